"""ExpNeg, the exp(y <= 0) under every sigmoid, softplus and swish of the CPU kernels, checked against
double exp over EVERY float argument in [-104.5, 0] (1.12e9 of them), once per distinct code path:
AVX-512 (a 16-entry table of 2^(j/16) and a cubic), AVX2 and NEON (one degree-6 polynomial, the
same operations) and the portable scalar path. avx512bf16 compiles the AVX-512 path unchanged. The
bounds are the measured worst errors rounded up in the third digit, so a change that loses accuracy
anywhere fails here. One program holds every path (exp_path.cc built once per instruction set,
linked into exp_accuracy.cc) and computes the double reference once per argument for all of them;
it is built with the library's -ffp-contract=off, by $CXX if set (the cross compiler under
emulation, tests/aarch64), and ASCEND_GRAD_EXP_STEP=k checks every k-th argument only (emulation)."""

import math
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ascend_grad import runtime_ext

HARNESS = Path(__file__).with_name("exp_accuracy.cc")  # (main: the arguments and the double reference)
PATH = Path(__file__).with_name("exp_path.cc")  # (one instruction set's ExpNeg, built once per set)
SOURCES = Path(__file__).resolve().parents[2] / "runtime_ext"  # (the checkout's: the installed package has no C++)
FLAGS = {
    "avx512": ["-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl", "-mfma", "-mf16c"],
    "avx2": ["-mavx2", "-mfma", "-mf16c"],
    "neon": ["-DASCEND_GRAD_NEON=1"],  # (isa_neon.cc's choice of the NEON path)
    "generic": [],
}
# max error over normal results (ulps of the float result), and over subnormal ones (units of 2^-149)
BOUNDS = {"avx512": (1.0, 1.0), "avx2": (1.17, 1.0), "neon": (1.17, 1.0), "generic": (1.45, 1.0)}
ISAS = [isa for isa in FLAGS if isa in runtime_ext.runnable_isas()]


@pytest.fixture(scope="module")
def measured(onnxruntime_headers, tmp_path_factory):
    """{isa: (max_ulp, where, above_one, subnormal_max, [(argument, result)])} from the harness: one
    program holding every path of ISAS, which computes the double reference once for all of them."""
    compiler = os.environ.get("CXX") or "g++"
    if shutil.which(compiler) is None:
        pytest.skip(f"needs {compiler}")
    if onnxruntime_headers is None:
        pytest.skip("no onnxruntime include/ folder (set ONNXRUNTIME_INCLUDE_DIR or pip install . first)")
    folder = tmp_path_factory.mktemp("exp")
    common = [compiler, "-O2", "-std=c++17", "-ffp-contract=off", f"-I{SOURCES}", f"-I{onnxruntime_headers}", f"-I{HARNESS.parent}"]
    builds = {isa: subprocess.Popen([*common, *FLAGS[isa], f"-DASCEND_GRAD_ISA={isa}", "-c", "-o", str(folder / f"{isa}.o"), str(PATH)],
                                    stderr=subprocess.PIPE, text=True) for isa in ISAS}
    for isa, build in builds.items():
        _, stderr = build.communicate()
        assert build.returncode == 0, f"{isa}: the ExpNeg path did not build:\n{stderr[-4000:]}"
    binary = folder / "exp_accuracy"
    built = subprocess.run([*common, "-o", str(binary), str(HARNESS), *(str(folder / f"{isa}.o") for isa in ISAS)],
                           capture_output=True, text=True)
    assert built.returncode == 0, f"the harness did not build:\n{built.stderr[-4000:]}"
    run = subprocess.run([str(binary), os.environ.get("ASCEND_GRAD_EXP_STEP", "1")], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"the harness failed ({run.returncode}): {run.stderr[-2000:]}"
    results = {}
    for isa in ISAS:
        lines = [line.split(": ", 1)[1] for line in run.stdout.splitlines() if line.startswith(f"{isa}: ")]
        words = lines[0].split()
        specials = [tuple(float(word) for word in line.split()[1:]) for line in lines[1:]]
        results[isa] = (float(words[1]), float(words[3]), int(words[5]), float(words[9]), specials)
        print(f"{isa}: {lines[0]}")
    return results


@pytest.mark.parametrize("isa", ISAS)
def test_every_argument_within_the_bound(measured, isa):
    worst, where, above_one, subnormal, _ = measured[isa]
    bound, subnormal_bound = BOUNDS[isa]
    assert worst <= bound, f"{isa} ExpNeg: {worst:.4f} ulp at {where!r} ({above_one} arguments above 1 ulp), bound {bound}"
    assert subnormal <= subnormal_bound, f"{isa} ExpNeg: subnormal results off by {subnormal:.4f} x 2^-149"


@pytest.mark.parametrize("isa", ISAS)
def test_special_arguments(measured, isa):
    """0 and -0 give 1, NaN gives NaN, everything below -104.5 (and -inf) gives 0, and the arguments
    whose result is the last normal float stay within an ulp."""
    specials = measured[isa][4]
    assert len(specials) == 8, specials
    for argument, result in specials:
        if math.isnan(argument):
            assert math.isnan(result), f"{isa} ExpNeg(NaN) = {result}"
        elif argument == 0.0:
            assert result == 1.0, f"{isa} ExpNeg({argument}) = {result}"
        elif argument <= -104.5:
            assert result == 0.0, f"{isa} ExpNeg({argument}) = {result}, not 0"
        else:
            exact = np.float32(math.exp(argument))
            assert abs(np.float32(result) - exact) <= np.spacing(exact), f"{isa} ExpNeg({argument}) = {result}, exp = {exact}"
