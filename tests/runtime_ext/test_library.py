"""The kernel library itself: where it is, what it exports, the op set's identity, the kernels run
without any function body, and every instruction-set path passes the op tests."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import ascend_grad
from ascend_grad import ops, runtime_ext
from ascend_grad.testing import TRIMMED_SIZES, assert_close, random_array, run_onnxruntime

REPO = Path(__file__).resolve().parents[2]


def test_library_path_and_session_options():
    path = Path(runtime_ext.library_path())
    assert path.is_absolute() and path.is_file() and path.name == "libascend_grad_kernels.so"
    base = ort.SessionOptions()
    base.intra_op_num_threads = 2
    assert runtime_ext.session_options(base) is base


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm")
def test_exports_only_register_custom_ops():
    done = subprocess.run(["nm", "-D", "--defined-only", runtime_ext.library_path()], capture_output=True, text=True, check=True)
    assert [line.split()[-1] for line in done.stdout.splitlines()] == ["RegisterCustomOps"]


def test_domain_and_version_agree_with_the_cpp_constants():
    header = (REPO / "runtime_ext" / "common" / "op_set.h").read_text()
    assert re.search(r'kDomain = "([^"]+)"', header).group(1) == ascend_grad.DOMAIN
    assert int(re.search(r"kOpsetVersion = (\d+)", header).group(1)) == ascend_grad.OPSET_VERSION


def test_kernels_run_a_model_with_no_function_body(rng):
    """Only the library can run this model: so its domain and version are the op set's."""
    go, x = random_array(rng, (3, 33), np.float32), random_array(rng, (3, 33), np.float32, scale=3.0, offset=1.0)
    model = ops.make_node_model("SiluBackward", {"gradOutput": go, "self": x})
    del model.functions[:]
    with pytest.raises(Exception, match="SiluBackward"):
        run_onnxruntime(model, {"gradOutput": go, "self": x})
    out = run_onnxruntime(model, {"gradOutput": go, "self": x}, runtime_ext.session_options())["gradInput"]
    assert_close(out, ops.reference.silu_backward(go, x))


# every instruction set but the one the library picks here, which this run's own op tests use
OTHER_ISAS = [isa for isa in runtime_ext.ISA_FEATURES if isa != runtime_ext.runnable_isas()[0]]


@pytest.mark.skipif(os.environ.get("ASCEND_GRAD_ISA") is not None, reason="already inside an instruction-set run")
@pytest.mark.parametrize("isa", OTHER_ISAS)
def test_every_instruction_set_passes_the_op_tests(isa):
    """The op tests' kernel cases and the page-offset tests again, with the library forced onto each
    other instruction set. Outputs are streamed from 1 MiB (TRIMMED_SIZES), as in the emulated aarch64
    runs: each table's streamed paths on arrays 32 times smaller (this run's own page-offset tests
    take them at the library's 32 MiB, on the table it picks). The streamed cases were 71 of these
    runs' 82 s of CPU at 32 MiB, the portable table's 41."""
    missing = [flag for flag in runtime_ext.ISA_FEATURES[isa] if flag not in runtime_ext.cpu_flags()]
    if missing:
        pytest.skip(f"this CPU lacks {missing}")
    env = dict(os.environ, ASCEND_GRAD_ISA=isa, ASCEND_GRAD_VERBOSE="1", ASCEND_GRAD_STREAM_BYTES=TRIMMED_SIZES["ASCEND_GRAD_STREAM_BYTES"])
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-k", "kernels", "-p", "no:cacheprovider", "-s", str(REPO / "tests" / "ops"),
               str(REPO / "tests" / "runtime_ext" / "test_offsets.py")]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"ascend-grad: {isa} kernels" in done.stderr + done.stdout
    assert re.search(r"\d+ passed", done.stdout)


def _verbose_line(**env) -> str:
    """The library's ASCEND_GRAD_VERBOSE report, from a child process that registers it with `env`."""
    env = dict({k: v for k, v in os.environ.items() if not k.startswith("ASCEND_GRAD_")}, ASCEND_GRAD_VERBOSE="1", **env)
    done = subprocess.run([sys.executable, "-c", "from ascend_grad import runtime_ext; runtime_ext.session_options()"],
                          capture_output=True, text=True, env=env, check=True)
    return done.stderr


def test_picks_the_widest_instruction_set_the_cpu_has():
    """The library reads the CPU itself (cpuid and xgetbv, cpu/x86_features.cc): its choice must be
    the widest table the flags of /proc/cpuinfo allow, and a table the CPU lacks is refused."""
    runnable = runtime_ext.runnable_isas()
    assert re.search(rf"^ascend-grad: {runnable[0]} kernels,", _verbose_line(), re.MULTILINE)
    for isa in runtime_ext.ISA_FEATURES:
        line = _verbose_line(ASCEND_GRAD_ISA=isa)
        if isa in runnable:
            assert re.search(rf"^ascend-grad: {isa} kernels,", line, re.MULTILINE), line
        else:
            assert f"ASCEND_GRAD_ISA={isa} is not available on this CPU" in line
            assert re.search(rf"^ascend-grad: {runnable[0]} kernels,", line, re.MULTILINE), line


def test_streamed_walk_follows_the_cpu_vendor_or_the_environment():
    """Streamed outputs walk forward on Intel, by page gap elsewhere (runtime_ext/cpu/page_walk.h);
    ASCEND_GRAD_STREAM_WALK=gap|forward overrides that, and any other value is reported and ignored."""
    cpuinfo = Path("/proc/cpuinfo")
    vendor = re.search(r"vendor_id\s*:\s*(\S+)", cpuinfo.read_text()) if cpuinfo.exists() else None
    default = "forward" if vendor and vendor.group(1) == "GenuineIntel" else "by page gap"
    assert re.search(rf"ascend-grad: \w+ kernels, streams walk {default},", _verbose_line())
    assert "streams walk by page gap," in _verbose_line(ASCEND_GRAD_STREAM_WALK="gap")
    assert "streams walk forward," in _verbose_line(ASCEND_GRAD_STREAM_WALK="forward")
    bad = _verbose_line(ASCEND_GRAD_STREAM_WALK="backward")
    assert "ASCEND_GRAD_STREAM_WALK=backward is neither gap nor forward" in bad
    assert f"streams walk {default}," in bad


def test_slab_runs_follow_the_l2_size_or_the_environment():
    """Float NCHW GroupNormSwishGrad tasks take runs of slabs only where L2 holds 2 MiB
    (runtime_ext/cpu/group_norm_swish_grad.cc) unless ASCEND_GRAD_SLAB_RUNS=on|off says otherwise;
    any other value is reported and ignored. (The runs' results are checked in test_determinism.)"""
    assert re.search(r"ascend-grad: \w+ kernels, streams walk [\w ]+, slab runs by L2 size\n", _verbose_line())
    assert ", slab runs on\n" in _verbose_line(ASCEND_GRAD_SLAB_RUNS="on")
    assert ", slab runs off\n" in _verbose_line(ASCEND_GRAD_SLAB_RUNS="off")
    bad = _verbose_line(ASCEND_GRAD_SLAB_RUNS="always")
    assert "ASCEND_GRAD_SLAB_RUNS=always is neither on nor off" in bad
    assert ", slab runs by L2 size\n" in bad


def test_sizes_follow_the_environment():
    """ASCEND_GRAD_STREAM_BYTES and ASCEND_GRAD_SAMPLE_SCRATCH_BYTES are what ASCEND_GRAD_VERBOSE
    reports (32 and 16 MiB by default); anything but a positive number is reported and ignored."""
    line = "ascend-grad: outputs streamed from {} bytes, NHWC sample scratch up to {} bytes\n"
    assert line.format(32 << 20, 16 << 20) in _verbose_line()
    assert line.format(4096, 1 << 20) in _verbose_line(ASCEND_GRAD_STREAM_BYTES="4096", ASCEND_GRAD_SAMPLE_SCRATCH_BYTES=str(1 << 20))
    bad = _verbose_line(ASCEND_GRAD_SAMPLE_SCRATCH_BYTES="1e6")
    assert "ASCEND_GRAD_SAMPLE_SCRATCH_BYTES=1e6 is not a positive number of bytes" in bad
    assert line.format(32 << 20, 16 << 20) in bad


def test_stream_threshold_follows_the_environment():
    """ASCEND_GRAD_STREAM_BYTES moves the size from which outputs are streamed (the emulated aarch64
    runs take the streamed paths on small arrays); anything but a positive number is reported and
    ignored, and the op still computes."""
    child = ("import numpy as np, onnxruntime as ort; from ascend_grad import ops, runtime_ext; "
             "x = np.linspace(-8, 8, 4099, dtype=np.float32); "
             "model = ops.make_node_model('SiluBackward', {'gradOutput': x, 'self': x}); "
             "s = ort.InferenceSession(model.SerializeToString(), runtime_ext.session_options(), providers=['CPUExecutionProvider']); "
             "ref = ops.reference.silu_backward(x, x); "
             "print(np.abs(s.run(None, {'gradOutput': x, 'self': x})[0] - ref).max() / np.abs(ref).max())")
    for value, message in (("4096", False), ("lots", True), ("-1", True)):
        env = dict({k: v for k, v in os.environ.items() if not k.startswith("ASCEND_GRAD_")}, ASCEND_GRAD_STREAM_BYTES=value)
        done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, env=env, check=True)
        assert float(done.stdout) <= 1e-5, done.stdout  # (SPEC's float bound, relative to max |ref|)
        said = f"ASCEND_GRAD_STREAM_BYTES={value} is not a positive number of bytes" in done.stderr
        assert said == message, done.stderr
