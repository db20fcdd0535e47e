"""The library's own cpuid/xgetbv reading (runtime_ext/cpu/x86_features.cc; zig's runtime, which
builds the wheels, answers no to every __builtin_cpu_supports) against GCC's builtins, on this CPU
and on the CPU models qemu emulates (with and without AVX2, Intel's and AMD's). Which table the
library then picks is checked against /proc/cpuinfo in test_library."""

import importlib.util
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

HARNESS = Path(__file__).with_name("x86_features_probe.cc")
SOURCES = Path(__file__).resolve().parents[2] / "runtime_ext"  # (the checkout's: the installed package has no C++)
EMULATION = Path(__file__).resolve().parents[1] / "aarch64" / "emulation.py"
# qemu 7.2 (Debian 12) emulates AVX2 but no AVX-512: for these models only the expected facts are
# fixed, the AVX-512 ones come from agreement; models qemu does not know are skipped
MODELS = {
    "qemu64": {"intel": 0, "avx2": 0},
    "Nehalem": {"intel": 1, "avx2": 0},
    "SandyBridge": {"intel": 1, "avx2": 0},  # AVX without AVX2
    "Haswell": {"intel": 1, "avx2": 1},
    "Skylake-Server-v4": {"intel": 1},
    "EPYC-Rome": {"intel": 0, "avx2": 1},
    "max": {},
}

pytestmark = pytest.mark.skipif(sysconfig.get_platform() != "linux-x86_64", reason="x86_64 only")


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    binary = tmp_path_factory.mktemp("x86_features") / "probe"
    built = subprocess.run(["g++", "-O2", "-std=c++17", f"-I{SOURCES}", "-o", str(binary), str(HARNESS), str(SOURCES / "cpu" / "x86_features.cc")],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-4000:]
    return binary


def _facts(output: str) -> tuple[dict, dict]:
    """({fact: 0|1} read by cpuid, the same by the builtins)"""
    found = {}
    for line in output.splitlines():
        who, *pairs = line.split()
        found[who] = {key: int(value) for key, value in (pair.split("=") for pair in pairs)}
    return found["cpuid"], found["builtins"]


def test_agrees_with_the_builtins_on_this_cpu(probe):
    done = subprocess.run([str(probe)], capture_output=True, text=True, check=True)
    cpuid, builtins = _facts(done.stdout)
    assert cpuid == builtins
    flags = set(re.search(r"^flags\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE).group(1).split())
    assert cpuid["avx2"] == int({"avx", "avx2", "fma", "f16c"} <= flags)
    assert cpuid["avx512bf16"] == int(cpuid["avx512"] == 1 and "avx512_bf16" in flags)


@pytest.fixture(scope="module")
def qemu() -> str:
    """qemu-x86_64 from Debian's qemu-user-static, which the emulated aarch64 host's set-up installs
    where missing (as root, apt-get): a fresh machine runs these cases too, or fails saying why."""
    found = shutil.which("qemu-x86_64-static") or shutil.which("qemu-x86_64")
    if found is None:
        spec = importlib.util.spec_from_file_location("aarch64_emulation", EMULATION)
        emulation = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(emulation)
        try:
            emulation.host_tools()
        except emulation.Unavailable as error:
            pytest.fail(f"qemu-x86_64 unavailable: {error}", pytrace=False)
        found = shutil.which("qemu-x86_64-static")
        assert found, "qemu-user-static installed but no qemu-x86_64-static on PATH"
    return found


@pytest.mark.parametrize("model", MODELS)
def test_agrees_with_the_builtins_on_emulated_cpus(probe, qemu, model):
    done = subprocess.run([qemu, "-cpu", model, str(probe)], capture_output=True, text=True)
    if "unable to find CPU model" in done.stderr:
        pytest.skip(f"this qemu has no {model}")
    assert done.returncode == 0, done.stderr
    cpuid, builtins = _facts(done.stdout)
    assert cpuid == builtins
    assert {key: cpuid[key] for key in MODELS[model]} == MODELS[model]
