"""fuse_training_artifacts and `ascend-grad fuse IN_DIR -o OUT_DIR` on folders that onnxruntime-training's
generate_artifacts wrote (SPEC.md "Command line"): the fused folder trains in onnxruntime-training
1.19.2's Module + Optimizer to the same losses and parameters as the original, with the kernel library
and with the function bodies; the training API's names, the checkpoint and IR versions <= 10 kept.

The artifacts are made, and trained, in the onnxruntime-training venv of models/ort_training.py
(onnxruntime-training-cpu 1.19.2 with onnx 1.16.2: there generate_artifacts writes models 1.19.2
loads); the fusing runs here, as `ascend-grad fuse` would. That venv needs no ascend-grad: the kernel
library is handed to it by path.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import onnx
import pytest

from ascend_grad import DOMAIN, runtime_ext
from ascend_grad.graph_passes import NotArtifacts, fuse_training_artifacts

torch = pytest.importorskip("torch")
from ascend_grad.models import modules, ort_training  # noqa: E402  (needs torch)
from ascend_grad.testing import assert_one_line_error

REPO = Path(__file__).resolve().parents[2]
STEPS, LR = 5, 1e-3  # AdamW steps compared, on the same batch
TIMED = 30  # further steps, timed
# name -> (module, input shape)
MODELS = {"silu_mlp": (lambda: modules.SiluMLP(), (4, 16)), "resblock": (lambda: modules.ResBlock(), (2, 4, 8, 8))}
# what the fused training model holds: the ResBlock's GroupNorm+SiLU forward and backward (its SiLU
# backward is the GroupNormSwishGrad's swish part)
TRAINING_OPS = {"silu_mlp": {"SiluBackward": 1}, "resblock": {"GroupNormSwish": 1, "GroupNormSwishGrad": 1}}

# onnxruntime/training/__init__.py imports torch (microsoft/onnxruntime#22070); this venv has none
PRELUDE = """
import json, os, sys, time, types, numpy as np, onnx, onnxruntime
package = types.ModuleType("onnxruntime.training")
package.__path__ = [os.path.join(os.path.dirname(onnxruntime.__file__), "training")]
sys.modules["onnxruntime.training"] = package
"""

GENERATE = PRELUDE + """
from onnxruntime.training import artifacts
forward, folder, names = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
artifacts.generate_artifacts(onnx.load(forward), requires_grad=names, loss=None, optimizer=artifacts.OptimType.AdamW,
                             artifact_directory=folder)
"""

# STEPS AdamW steps on one batch (losses, then the parameters), then TIMED more steps timed
TRAIN = PRELUDE + """
from onnxruntime.training.api import CheckpointState, Module, Optimizer
folder, library, data, out, steps, timed, lr = sys.argv[1:8]
options = onnxruntime.SessionOptions()
if library:
    options.register_custom_ops_library(library)
state = CheckpointState.load_checkpoint(f"{folder}/checkpoint")
module = Module(f"{folder}/training_model.onnx", state, f"{folder}/eval_model.onnx", session_options=options)
optimizer = Optimizer(f"{folder}/optimizer_model.onnx", module)
optimizer.set_learning_rate(float(lr))
inputs = list(np.load(data).values())
module.train()
losses = []
for _ in range(int(steps)):
    losses.append(module(*inputs))
    optimizer.step()
    module.lazy_reset_grad()
parameters = {name: parameter.data.copy() for name, parameter in state.parameters}
module.eval()
evaluated = module(*inputs)
module.train()
times = []
for _ in range(int(timed)):
    start = time.perf_counter()
    module(*inputs)
    optimizer.step()
    module.lazy_reset_grad()
    times.append(time.perf_counter() - start)
np.savez(out, losses=np.array(losses), eval_loss=evaluated, step_seconds=np.median(times),
         **{f"parameter/{k}": v for k, v in parameters.items()})
"""


def _supported():
    if sys.version_info[:2] != (3, 11) or sysconfig.get_platform() != "linux-x86_64":
        pytest.skip(f"onnxruntime-training-cpu 1.19.2 has wheels for CPython 3.11 on Linux x86_64 here; this is "
                    f"{sysconfig.get_platform()} {sys.version.split()[0]}")


@pytest.fixture(scope="module")
def training_python():
    """models/ort_training.py's venv (made once under build/venvs, or $ASCEND_GRAD_VENVS)."""
    _supported()
    from ascend_grad.venvs import venv_python

    return venv_python(*ort_training.SPEC, root=os.environ.get("ASCEND_GRAD_VENVS") or REPO / "build" / "venvs")


def _run(python, script, *args):
    done = subprocess.run([python, "-c", script, *map(str, args)], capture_output=True, text=True)
    lines = [line for line in done.stderr.splitlines() if "[I:onnxruntime" not in line and "[W:onnxruntime" not in line]
    assert done.returncode == 0, "\n".join(lines[-15:])


@pytest.fixture(scope="module")
def artifacts(training_python, tmp_path_factory):
    """artifacts(name) -> (folder of generate_artifacts(loss=None: the graph's loss output, AdamW), inputs.npz):
    each model of MODELS made once (seed 0); ResBlock's GroupNorm respelled first (make_differentiable)."""
    made = {}

    def get(name):
        if name not in made:
            factory, shape = MODELS[name]
            torch.manual_seed(0)
            module = factory()
            x = torch.randn(*shape)
            folder = tmp_path_factory.mktemp(name)
            forward = ort_training.export_forward(module, (x,))
            onnx.save(ort_training._differentiable(forward) if name == "resblock" else forward, folder / "forward.onnx")
            (folder / "original").mkdir()
            _run(training_python, GENERATE, folder / "forward.onnx", folder / "original",
                 json.dumps([n for n, _ in module.named_parameters()]))
            np.savez(folder / "inputs.npz", input_0=x.numpy())
            made[name] = folder / "original", folder / "inputs.npz"
        return made[name]

    return get


def _train(python, folder, data, out, library=""):
    _run(python, TRAIN, folder, library, data, out, STEPS, TIMED, LR)
    return np.load(out)


def _relative(got, want):
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def _ascend_nodes(folder, name="training_model.onnx") -> dict[str, int]:
    model = onnx.load(Path(folder) / name)
    found = [n.op_type for n in model.graph.node if n.domain == DOMAIN]
    return {op: found.count(op) for op in sorted(set(found))}


@pytest.mark.parametrize("name", list(MODELS))
def test_fused_artifacts_train_as_the_originals(name, training_python, artifacts, tmp_path, record_property):
    """Module + Optimizer (AdamW, STEPS steps on one batch) on the fused folder: the losses, the eval
    loss and every parameter within 1e-5 (relative to the largest) of the original folder's, with the
    kernel library registered and with only the function bodies."""
    original, data = artifacts(name)
    out = tmp_path / "fused"
    report = fuse_training_artifacts(original, out)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in original.iterdir())
    assert report.written == {"training_model.onnx": "fused", "eval_model.onnx": "fused",
                              "optimizer_model.onnx": "copied", "checkpoint": "copied"}
    held = _ascend_nodes(out)
    assert held == TRAINING_OPS[name]  # forward and backward
    for model in ("training_model.onnx", "eval_model.onnx"):  # (the eval model: the forward fusion's)
        assert {op: n for op, n in report.models[model].counts.items() if n} == _ascend_nodes(out, model)
    # what the training API finds by name: inputs (parameters, gradient buffers, lazy_reset_grad), outputs
    for model in ("training_model.onnx", "eval_model.onnx"):
        before, after = onnx.load(original / model).graph, onnx.load(out / model).graph
        assert [i.name for i in after.input] == [i.name for i in before.input]
        assert [o.name for o in after.output] == [o.name for o in before.output]
    assert (out / "checkpoint").read_bytes() == (original / "checkpoint").read_bytes()
    assert {p.name: onnx.load(p).ir_version for p in out.glob("*.onnx")} == dict.fromkeys(
        ["training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"], 8) | {"optimizer_model.onnx": 10}

    want = _train(training_python, original, data, tmp_path / "original.npz")
    kernels = _train(training_python, out, data, tmp_path / "kernels.npz", runtime_ext.library_path())
    bodies = _train(training_python, out, data, tmp_path / "bodies.npz")
    assert want["losses"][-1] < want["losses"][0]  # it trains
    for got in (kernels, bodies):
        assert _relative(got["losses"], want["losses"]) <= 1e-5
        assert _relative(got["eval_loss"], want["eval_loss"]) <= 1e-5
        parameters = [k for k in want.files if k.startswith("parameter/")]
        assert parameters and sorted(parameters) == sorted(k for k in got.files if k.startswith("parameter/"))
        for key in parameters:
            assert _relative(got[key], want[key]) <= 1e-5, key
    errors = {what: max(_relative(got[k], want[k]) for k in want.files if k != "step_seconds")
              for what, got in (("kernels", kernels), ("function bodies", bodies))}
    times = {what: float(got["step_seconds"]) * 1e3 for what, got in
             (("original", want), ("fused, kernels", kernels), ("fused, function bodies", bodies))}
    print(f"{name}: fused {held}; largest relative error {errors}; ms per step {times}")
    record_property("ascend_nodes", held)
    record_property("ms_per_step", times)
    record_property("relative_errors", errors)


def test_in_place_with_a_prefix(training_python, artifacts, tmp_path):
    """OUT = IN: the artifacts are replaced, other files are left, the ORT-format copy of the unfused
    training model is removed (it would still be the unfused model); a prefix is found."""
    original, data = artifacts("silu_mlp")
    folder = tmp_path / "in_place"
    folder.mkdir()
    for path in original.iterdir():
        shutil.copy(path, folder / f"p_{path.name}")
    (folder / "notes.txt").write_text("mine")
    (folder / "p_training_model.ort").write_bytes(b"stale")
    report = fuse_training_artifacts(folder, folder)
    assert report.prefix == "p_" and report.counts["SiluBackward"] == 1
    assert "p_training_model.ort" in report.dropped and not (folder / "p_training_model.ort").exists()
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt", "p_checkpoint", "p_eval_model.onnx",
                                                        "p_optimizer_model.onnx", "p_training_model.onnx"]
    assert (folder / "notes.txt").read_text() == "mine"
    for path in original.iterdir():  # the training API takes any file names
        shutil.copy(folder / f"p_{path.name}", tmp_path / path.name)
    want = _train(training_python, original, data, tmp_path / "original.npz")
    got = _train(training_python, tmp_path, data, tmp_path / "fused.npz", runtime_ext.library_path())
    assert _relative(got["losses"], want["losses"]) <= 1e-5
    # a second time: nothing more to fuse, the same files
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert sum(fuse_training_artifacts(folder, folder).counts.values()) == 0
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_an_optimizer_model_of_a_newer_ir_version_is_lowered(training_python, artifacts, tmp_path):
    """generate_artifacts beside onnx 1.18+ writes the optimizer model with that onnx's IR version
    (14 for onnx 1.23), which onnxruntime-training 1.19.2 refuses: OUT's is IR 10, and loads."""
    original, data = artifacts("silu_mlp")
    source = tmp_path / "newer"
    shutil.copytree(original, source)
    optimizer = onnx.load(source / "optimizer_model.onnx")
    optimizer.ir_version = 14
    onnx.save(optimizer, source / "optimizer_model.onnx")
    report = fuse_training_artifacts(source, tmp_path / "out")
    assert report.written["optimizer_model.onnx"] == "copied, ir_version 14 -> 10"
    assert all(onnx.load(p).ir_version <= 10 for p in (tmp_path / "out").glob("*.onnx"))
    _train(training_python, tmp_path / "out", data, tmp_path / "fused.npz", runtime_ext.library_path())

    optimizer.graph.value_info.append(onnx.helper.make_tensor_value_info("f4", onnx.TensorProto.FLOAT4E2M1, [2]))
    onnx.save(optimizer, source / "optimizer_model.onnx")
    with pytest.raises(NotArtifacts, match="FLOAT4E2M1"):
        fuse_training_artifacts(source, tmp_path / "refused")
    assert not (tmp_path / "refused").exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_folders_that_are_not_artifacts(tmp_path, artifacts):
    """NotArtifacts naming what is missing; nothing written."""
    with pytest.raises(NotArtifacts, match="no training_model.onnx"):
        fuse_training_artifacts(tmp_path, tmp_path / "out")
    original, _ = artifacts("silu_mlp")
    partial = tmp_path / "partial"
    partial.mkdir()
    shutil.copy(original / "training_model.onnx", partial)
    with pytest.raises(NotArtifacts, match="no checkpoint"):
        fuse_training_artifacts(partial, tmp_path / "out")
    with pytest.raises(NotArtifacts, match="no such folder"):
        fuse_training_artifacts(tmp_path / "missing", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["partial"]


_one_line_error = assert_one_line_error


def test_command_line(artifacts, tmp_path, ascend_grad):
    """`ascend-grad fuse IN_DIR -o OUT_DIR --report`; a folder that is not one, --verify and
    --target ascend on one: exit 2, one line, nothing written."""
    original, _ = artifacts("resblock")
    out, report = tmp_path / "out", tmp_path / "report.json"
    done = ascend_grad("fuse", original, "-o", out, "--report", report)
    assert done.returncode == 0, done.stderr
    assert "training_model.onnx: fused: GroupNormSwishGrad x1, GroupNormSwish x1" in done.stdout and f"wrote {out}" in done.stdout
    assert "carried over: optimizer_model.onnx, checkpoint" in done.stdout
    result = json.loads(report.read_text())
    assert result["counts"]["GroupNormSwishGrad"] == 1 and set(result["models"]) == {"training_model.onnx", "eval_model.onnx"}
    assert result["written"]["checkpoint"] == "copied"
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in original.iterdir())
    assert all(onnx.load(p).ir_version <= 10 for p in out.glob("*.onnx"))

    (tmp_path / "plain").mkdir()
    _one_line_error(ascend_grad("fuse", tmp_path / "plain", "-o", tmp_path / "o"), "not a folder of onnxruntime-training artifacts")
    _one_line_error(ascend_grad("fuse", original, "-o", tmp_path / "o", "--verify"), "load OUT with onnxruntime.training.api")
    _one_line_error(ascend_grad("fuse", original, "-o", tmp_path / "o", "--target", "ascend"), "onnxruntime-cann")
    (tmp_path / "file").write_text("")
    _one_line_error(ascend_grad("fuse", original, "-o", tmp_path / "file"), "not a folder")
    assert not (tmp_path / "o").exists()
