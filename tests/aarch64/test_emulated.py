"""The aarch64 build as an Atlas host (Kunpeng 920) runs it, here under emulation: qemu-user through
binfmt_misc, Debian's arm64 Python 3.11, the aarch64 wheels of onnxruntime 1.32.0 and
onnxruntime-cann 1.24.4, this repository cross-built (emulation.py makes all of it under
build/aarch64 on first use, about 2 minutes).

- The kernel tests, under ASCEND_GRAD_ISA=neon and =generic, in the emulated onnxruntime 1.32.0
  environment: the op tests' kernel cases, the property, offset, determinism, function-body and
  error tests (every op and dtype combination against the float64 references), and exp over a
  sample of its arguments (both paths, in the neon run). Counts are trimmed, never kinds:
  ASCEND_GRAD_TEST_FRACTION (property examples, placements of each kind), ascend_grad.testing's
  TRIMMED_SIZES (the sizes from which outputs are streamed and NHWC samples recomputed, and so those
  cases' sizes), ASCEND_GRAD_EXP_STEP.
- The CANN kernels' tests and one fused training graph through runtime_ext.cann_session, in the
  emulated onnxruntime-cann 1.24.4 environment (numpy 1), on the simulated CANN runtime built for
  aarch64 with the cross compiler.

The three runs go at once, started by whichever test (or pytest-xdist worker) comes first; the
others wait for the results of this pytest run. Where the emulation cannot be set up, the tests
fail with one line saying why, never skip."""

from __future__ import annotations

import fcntl
import importlib.util
import os
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from ascend_grad.testing import TRIMMED_SIZES, reported_sizes

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def _load_emulation():
    spec = importlib.util.spec_from_file_location("aarch64_emulation", HERE / "emulation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


emulation = _load_emulation()

FRACTION = "0.5"  # of the property examples and of each kind of placement
EXP_STEP = "16"  # every 16th float argument of exp: 70 million of them
KERNEL_TESTS = ["tests/ops", "tests/runtime_ext/test_offsets.py", "tests/runtime_ext/test_properties.py",
                "tests/runtime_ext/test_determinism.py", "tests/runtime_ext/test_vs_function.py",
                "tests/runtime_ext/test_errors.py",
                # (the references checked against PyTorch's: no kernel in it, and no aarch64 torch here)
                "--ignore=tests/ops/test_reference.py"]
# tests/ops holds the function bodies' tests too: only its kernel cases (test_library's filter)
KERNELS_ONLY = "kernels or test_offsets or test_properties or test_determinism or test_vs_function or test_errors or test_exp"
RUNS = {
    "neon": ("onnxruntime", [*KERNEL_TESTS, "tests/runtime_ext/test_exp.py", "-k", KERNELS_ONLY],
             {"ASCEND_GRAD_ISA": "neon", "CXX": "aarch64-linux-gnu-g++"}),
    "generic": ("onnxruntime", [*KERNEL_TESTS, "-k", KERNELS_ONLY], {"ASCEND_GRAD_ISA": "generic"}),
    # (no test here uses hypothesis, whose pytest plugin imports it anyway: 6 of the run's 12 s of CPU
    # before its first test, under emulation)
    "cann": ("onnxruntime-cann", ["-p", "no:hypothesispytest", "tests/runtime_ext/test_cann_kernels.py",
                                  "tests/aarch64/emulated_cann_session.py"],
             {"CC": "aarch64-linux-gnu-gcc"}),
}
TIMEOUT = 1200  # s, each run (a guard against a hang, before pytest-timeout's 1500 s: a run takes 2.5-6 minutes)


def _run_id(config) -> str:
    """One id for this pytest run, shared by its xdist workers."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return workerinput["testrunuid"]
    if not hasattr(config, "_aarch64_run_id"):
        config._aarch64_run_id = uuid.uuid4().hex
    return config._aarch64_run_id


@pytest.fixture(scope="module")
def results(request):
    """{run: (exit status, output, seconds, CPU seconds)} of the three runs, each made once per pytest run."""
    try:
        pythons = {venv: emulation.ready(venv) for venv in {venv for venv, _, _ in RUNS.values()}}
    except emulation.Unavailable as error:
        pytest.fail(f"aarch64 emulation unavailable: {error}", pytrace=False)
    folder = emulation.ROOT / "runs"
    folder.mkdir(parents=True, exist_ok=True)
    run_id = _run_id(request.config)
    locks, started = {}, {}
    for name, (venv, args, env) in RUNS.items():
        lock = open(folder / f"{name}.lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another worker runs it: its result comes below
            lock.close()
            continue
        locks[name] = lock
        if (folder / f"{name}.id").exists() and (folder / f"{name}.id").read_text() == run_id:
            continue  # (done by another worker of this run)
        log = open(folder / f"{name}.log", "w")
        command = [pythons[venv], "-m", "pytest", "-q", "-s", "-n", "0", "-p", "no:cacheprovider", *args]  # (one process)
        environment = emulation.environment({"ASCEND_GRAD_VERBOSE": "1", "ASCEND_GRAD_TEST_FRACTION": FRACTION,
                                             **TRIMMED_SIZES, "ASCEND_GRAD_EXP_STEP": EXP_STEP, **env})
        started[name] = (subprocess.Popen([str(c) for c in command], cwd=REPO, env=environment, stdout=log,
                                          stderr=subprocess.STDOUT), log, time.monotonic())
    out = {}
    waiting = dict(started)
    while waiting:  # (os.wait4: each run's own CPU time, its children's included)
        for name, (process, log, start) in list(waiting.items()):
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            seconds = time.monotonic() - start
            if pid == 0 and seconds < TIMEOUT:
                continue
            if pid == 0:
                process.kill()
                _, _, usage = os.wait4(process.pid, 0)
                process.returncode = -9
                status = f"killed after {TIMEOUT} s"
            else:
                process.returncode = os.waitstatus_to_exitcode(status)
                status = str(process.returncode)
            log.close()
            (folder / f"{name}.status").write_text(f"{status} {seconds:.0f} {usage.ru_utime + usage.ru_stime:.0f}")
            (folder / f"{name}.id").write_text(run_id)
            del waiting[name]
        time.sleep(1)
    for lock in locks.values():
        lock.close()
    for name in RUNS:
        if name not in locks:  # wait for the worker that holds it
            with open(folder / f"{name}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
            done = folder / f"{name}.id"
            if not done.exists() or done.read_text() != run_id:
                pytest.fail(f"the emulated {name} run left no result in this pytest run", pytrace=False)
        status, seconds, cpu = (folder / f"{name}.status").read_text().rsplit(" ", 2)
        out[name] = (status, (folder / f"{name}.log").read_text(), float(seconds), float(cpu))
    return out


def _passed(name, results) -> str:
    status, output, seconds, cpu = results[name]
    summary = output.strip().splitlines()[-1] if output.strip() else "(no output)"
    print(f"aarch64 {name} run under emulation: {summary} ({seconds:.0f} s, {cpu:.0f} s of CPU)")
    assert status == "0", f"the emulated {name} run failed ({status}):\n{output[-6000:]}"
    assert re.search(r"\d+ passed", summary) and not re.search(r"failed|error|skipped", summary), summary
    return output


@pytest.mark.parametrize("isa", ["neon", "generic"])
def test_kernel_tests_under_emulation(results, isa):
    output = _passed(isa, results)
    # the library ran the table asked for, and nothing else
    tables = set(re.findall(r"ascend-grad: (\w+) kernels", output))
    assert tables == {isa}, tables
    # with the sizes asked for (the trimmed cases' sizes follow them)
    assert reported_sizes(output) == {tuple(TRIMMED_SIZES.values())}, reported_sizes(output)
    assert "property cases:" in output  # (test_properties' own count, printed with -s)
    if isa == "neon":
        exp = re.findall(r"\b(neon|generic): max_ulp", output)  # (test_exp's own lines, printed with -s)
        assert sorted(exp) == ["generic", "neon"], exp


def test_cann_tests_under_emulation(results):
    output = _passed("cann", results)
    assert "resblock.aot.opt:" in output and "within SPEC's bounds" in output
