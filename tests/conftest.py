"""Fixtures every test folder shares: fresh random inputs with a seed that failures print, and the
simulated CANN runtime with the onnxruntime-cann venv that runs against it.

The suite runs on pytest-xdist workers (pyproject's addopts: -n auto, one test file per worker at a
time). A session fixture runs once per worker: what is expensive to make (the real models' exports,
the venvs beside this one) is made once per run by whichever worker asks first, in a folder the
workers share, while the others wait for it (`_made_once`)."""

import contextlib
import fcntl
import importlib.util
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

# Runs of slabs (float NCHW GroupNormSwishGrad, group_norm_swish_grad.cc) are the default only where
# L2 holds 2 MiB: every machine tests them wherever they fit (ASCEND_GRAD_SLAB_RUNS= (empty) for the
# CPU's own rule; the library reads it when first registered).
os.environ.setdefault("ASCEND_GRAD_SLAB_RUNS", "on")


def pytest_xdist_auto_num_workers(config):
    """-n auto: no workers to start for a run of test files or test ids (a developer's run of one
    file), nor for a pytest that a test starts; else xdist's own count (the CPUs, or
    PYTEST_XDIST_AUTO_NUM_WORKERS)."""
    if os.environ.get("PYTEST_CURRENT_TEST"):  # (set while a test runs: a pytest it starts inherits it)
        return 0
    if config.args and all("::" in arg or arg.endswith(".py") for arg in config.args):
        return 0
    return None


# The longest files first, longest first: xdist hands whole files to the workers in collection order
# (--no-loadscope-reorder), so the long ones start at once and short ones fill in around them, instead
# of one long file running alone at the end. Seconds of setup + call per file, one run on 2 workers
# of this 2-core machine while others' jobs loaded it (issue 34): 730, 366, 328, 250, 246, 153, 148,
# 136; the real models' exports and the venvs of test_package then serve the files that come later.
# Before them the two files whose one long setup runs beside everything else (2026-12-04, from a
# fresh clone: the emulated aarch64 runs 350 s, the two wheels' build 225-390 s); left to the end,
# the wheels' file ran alone for 330 s with the other worker idle.
LONGEST_FIRST = ("aarch64/test_emulated.py", "test_wheels.py",
                 "models/export/test_real_models.py", "runtime_ext/test_library.py", "test_cli.py",
                 "runtime_ext/test_sanitizers.py", "test_package.py", "runtime_ext/test_exp.py",
                 "models/export/test_upsample.py", "graph_passes/test_scale.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}
    here = Path(__file__).parent
    items.sort(key=lambda item: rank.get(item.path.relative_to(here).as_posix() if item.path.is_relative_to(here) else "",
                                         len(rank)))


def _shared_folder(tmp_path_factory, name: str) -> Path:
    """A folder of this test run that every xdist worker sees (their base temp folders' parent)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    return root / name


@contextlib.contextmanager
def _locked(path: Path):
    """One process at a time (an fcntl lock on the file `path`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _made_once(folder: Path, make) -> Path:
    """`folder`, filled by make(folder) in one process of the run: the first to ask makes it (from
    empty, under a lock), the others wait for it and find it ready; a failed make leaves it unready."""
    with _locked(folder.parent / f"{folder.name}.lock"):
        if not (folder / "ready").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            (folder / "ready").touch()
    return folder


@pytest.fixture
def rng(request):
    """A generator seeded fresh for each test; ASCEND_GRAD_SEED=<n> replays a failure."""
    seed = int(os.environ.get("ASCEND_GRAD_SEED") or np.random.SeedSequence().entropy % 2**32)
    print(f"{request.node.nodeid}: ASCEND_GRAD_SEED={seed}")
    return np.random.default_rng(seed)


@pytest.fixture
def ascend_grad(capfd):
    """ascend_grad(*args) -> CompletedProcess: `ascend-grad ARGS...` run in the test's process
    (ascend_grad.testing.run_cli_here; run_cli runs the console script in a process of its own)."""
    from ascend_grad.testing import run_cli_here

    return lambda *args: run_cli_here(capfd, *args)


def _load(name: str, relative: str):
    """The module at tests/<relative>, loaded by path (a test helper, not an importable package)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cann_harness():
    return _load("cann_sim_harness", "runtime_ext/cann_sim/harness.py")


@pytest.fixture(scope="session")
def cann():
    """The simulated CANN runtime (built when its sources changed) and the onnxruntime-cann 1.24.4
    venv: `.root`, `.python`, `.run(script, *args, env=None, preload=False, timeout=...)` ->
    (completed process, simulator report), `.run_models(...)`, `.assert_clean(report)`.
    Skipped only where that wheel does not exist (not x86_64/aarch64 Linux, not Python 3.11)."""
    harness = _cann_harness()
    reason = harness.unsupported_reason()
    if reason:
        pytest.skip(reason)
    return harness.make()


@pytest.fixture(scope="session")
def real_model(tmp_path_factory):
    """real_model(name, dynamic_batch=False) -> (module, example inputs, training graph): each model
    of models.modules.REAL_MODELS built (seed 0) by every worker that needs it, and exported (batch 2,
    the batch static or dynamic) once per run, for every test that needs that graph (an export of the
    UNet takes most of a minute on these machines): the other workers load the graph the first one
    saved."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("diffusers")
    import onnx

    from ascend_grad.models import export_training_graph
    from ascend_grad.models.modules import REAL_MODELS

    cache = {}

    def get(name, dynamic_batch=False):
        key = (name, dynamic_batch)
        if key not in cache:
            factory, make_inputs = REAL_MODELS[name]
            torch.manual_seed(0)
            module = factory()
            inputs = make_inputs(2)
            folder = _made_once(_shared_folder(tmp_path_factory, f"real-model-{name}" + ("-dynamic" if dynamic_batch else "")),
                                lambda folder: onnx.save(export_training_graph(module, inputs, dynamic_batch=dynamic_batch),
                                                         folder / "graph.onnx"))
            cache[key] = (module, inputs, onnx.load(folder / "graph.onnx"))
        return cache[key]

    return get


@pytest.fixture(scope="session")
def installed_beside(tmp_path_factory):
    """installed_beside(distribution) -> python of a fresh venv holding that onnxruntime distribution
    (with numpy 1, which the CANN and training wheels need) and this repository pip-installed beside
    it, as a user would; made once per run per distribution (the workers share it)."""
    import subprocess

    from ascend_grad.venvs import make_venv

    def make(folder, distribution):
        pip = [*make_venv(folder / "env"), "install", "-q", "--disable-pip-version-check", "--no-compile"]
        subprocess.run([*pip, distribution, "numpy<2"], check=True)
        # one build at a time: pip builds the repository in its one build folder (build/<wheel tag>),
        # where the kernels' objects of the checkout's own install are kept (runtime_ext/library/)
        with _locked(_shared_folder(tmp_path_factory, "beside-build.lock")):
            subprocess.run([*pip, str(Path(__file__).resolve().parents[1]), "numpy<2"], check=True)

    def get(distribution):
        folder = _shared_folder(tmp_path_factory, "beside-" + re.sub(r"[^A-Za-z0-9.]+", "-", distribution))
        return _made_once(folder, lambda folder: make(folder, distribution)) / "env" / "bin" / "python"

    return get


_ORT_TRAINING_CHILD = r"""
import json, sys, numpy as np, onnxruntime as ort
library, listing, inputs, out = sys.argv[1:]
feeds = dict(np.load(inputs))
results, errors = {}, {}
for tag, path, register in json.load(open(listing)):
    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # (testing.without_spinning)
    if register:
        options.register_custom_ops_library(library)
    try:
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        for o, v in zip(session.get_outputs(), session.run(None, feeds)):
            results[f"{tag}/{o.name}"] = v
    except Exception as error:  # (a mutant that onnxruntime cannot run, say)
        errors[tag] = str(error)[:500]
np.savez(out, **results)
json.dump(errors, open(out + ".errors.json", "w"))
"""


@pytest.fixture
def in_onnxruntime_training(tmp_path):
    """in_onnxruntime_training(original, fused, feeds) -> {"original/<output>": array, "fused/<output>":
    array}: both models (ModelProtos) run in the onnxruntime-training venv every such test shares
    (models.ort_training.SPEC, made once under build/venvs), the fused one with the kernel library:
    onnxruntime-training's own ops (QuickGeluGrad, TanhGrad, ...) run only there.
    `.many({tag: (model, register the library?)}, feeds)` -> ({"<tag>/<output>": array}, {tag: error})
    runs any number of models in one child process, each failure reported, not raised."""
    import json
    import subprocess

    import onnx

    from ascend_grad import runtime_ext
    from ascend_grad.models.ort_training import SPEC
    from ascend_grad.venvs import venv_python

    def many(models, feeds):
        listing = []
        for k, (tag, (model, register)) in enumerate(models.items()):
            onnx.save(model, tmp_path / f"model{k}.onnx")
            listing.append((tag, str(tmp_path / f"model{k}.onnx"), register))
        paths = [tmp_path / "models.json", tmp_path / "inputs.npz", tmp_path / "out.npz"]
        paths[0].write_text(json.dumps(listing))
        np.savez(paths[1], **feeds)
        python = venv_python(*SPEC, root=Path(__file__).resolve().parents[1] / "build" / "venvs")
        done = subprocess.run([python, "-c", _ORT_TRAINING_CHILD, runtime_ext.library_path(), *map(str, paths)],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        return dict(np.load(paths[2])), json.loads(Path(f"{paths[2]}.errors.json").read_text())

    def run(original, fused, feeds):
        results, errors = many({"original": (original, False), "fused": (fused, True)}, feeds)
        assert not errors, errors
        return results

    run.many = many
    return run
