"""The distributable wheels (build_support/wheels): one per architecture, tagged manylinux_2_17 as
auditwheel judges it; the x86_64 one installs and runs the demo and the kernel tests in a fresh
environment with no compiler, cmake or npm, on the widest instruction set the CPU has; installed
beside an onnxruntime flavour it keeps that flavour. The aarch64 one runs its smoke test under
emulation, in the emulated aarch64 host of tests/aarch64/emulation.py (made where missing; where it
cannot be, the test fails saying why).

The wheels are built once per session into the session's own folder; the build itself (CMake's
folders, the tools' environment) is kept under build/wheels/ between sessions and locked, so that
two test processes take turns and an unchanged tree rebuilds in seconds."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from ascend_grad import runtime_ext
from ascend_grad.testing import TRIMMED_SIZES, reported_sizes
from ascend_grad.venvs import make_venv

REPO = Path(__file__).resolve().parents[1]
ARCHES = ("x86_64", "aarch64")
ELF_MACHINE = {"x86_64": 62, "aarch64": 183}  # e_machine: EM_X86_64, EM_AARCH64
# none of these may be reachable where the x86_64 wheel is installed and run
TOOLCHAIN = ("gcc", "g++", "cc", "c++", "clang", "clang++", "zig", "cmake", "ninja", "make", "npm")
# the kernel tests run against the installed wheel: the kernels against the function bodies, the
# errors they report, determinism, page offsets and streamed outputs, accuracy properties
KERNEL_TESTS = ["tests/runtime_ext/" + name for name in
                ("test_vs_function.py", "test_errors.py", "test_determinism.py", "test_offsets.py", "test_properties.py")]
# ...with TRIMMED_SIZES (the library reads them; the tests' sizes follow): the wheel's streamed and
# recomputing paths on arrays 16-32 times smaller, as in the emulated aarch64 runs (the checkout's own
# library takes them at full size)

pytestmark = pytest.mark.skipif(sysconfig.get_platform() != "linux-x86_64", reason="the wheels are built on x86_64 Linux")


def _load(path: Path, name: str):
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    loader.exec_module(module)
    return module


wheels_script = _load(REPO / "build_support" / "wheels", "build_support_wheels")


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory):
    """{arch: path} of the two wheels, built by build_support/wheels for this session."""
    out = tmp_path_factory.mktemp("wheelhouse")
    done = _run([sys.executable, REPO / "build_support" / "wheels", "-o", out], os.environ, REPO, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = {arch: sorted(out.glob(f"*_{arch}.whl")) for arch in ARCHES}
    assert all(len(paths) == 1 for paths in found.values()), found
    return {arch: paths[0] for arch, paths in found.items()}


def _venv(folder: Path) -> tuple[Path, dict, list[str]]:
    """A fresh virtual environment, the environment variables to run it with (PATH holds only its
    bin/ folder, and none of TOOLCHAIN is on it) and the pip command that installs into it."""
    pip = make_venv(folder)
    path = str(folder / "bin")
    for tool in TOOLCHAIN:
        assert shutil.which(tool, path=path) is None, f"{tool} is on the test's PATH"
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("ASCEND_GRAD_", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"))}
    env["PATH"] = path
    return folder / "bin" / "python", env, pip


def _run(command, env, cwd, timeout=900) -> subprocess.CompletedProcess:
    """`command` run to its end, or failing the test after `timeout` s with what it printed (its whole
    process group killed: a pytest's workers or a build's compilers would hold the pipes open)."""
    command = [str(c) for c in command]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"still running after {timeout} s, killed: {' '.join(command)}\n{stdout[-3000:]}{stderr[-3000:]}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _pip_install(pip, env, cwd, *requirements):
    done = _run([*pip, "install", "-q", "--disable-pip-version-check", "--no-compile", *requirements], env, cwd)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def _installed(pip, env, cwd) -> dict[str, str]:
    listed = _run([*pip, "list", "--format=freeze", "--disable-pip-version-check"], env, cwd)
    return dict(line.lower().split("==") for line in listed.stdout.splitlines() if "==" in line)


class X86Env:
    """The x86_64 wheel in a fresh environment with no toolchain: first alone (`without_onnxruntime`:
    what `import ascend_grad` said then), then with its [cpu] extra and pytest."""

    def __init__(self, wheel: Path, folder: Path):
        self.folder = folder
        self.python, self.env, pip = _venv(folder / "env")
        _pip_install(pip, self.env, folder, wheel)
        self.packages_alone = _installed(pip, self.env, folder)
        self.without_onnxruntime = _run([self.python, "-c", "import ascend_grad"], self.env, folder)
        _pip_install(pip, self.env, folder, f"{wheel}[cpu]", "pytest>=8", "pytest-xdist>=3.6", "pytest-timeout>=2.3", "hypothesis>=6.100")

    def run(self, *command, cwd=None, **env):
        return _run(command, dict(self.env, **env), cwd or self.folder)


@pytest.fixture(scope="session")
def x86_env(wheelhouse, tmp_path_factory):
    return X86Env(wheelhouse["x86_64"], tmp_path_factory.mktemp("x86_64-wheel"))


def _verbose_isas(text: str) -> set[str]:
    """The instruction sets the library's ASCEND_GRAD_VERBOSE lines name."""
    return set(re.findall(r"^ascend-grad: (\w+) kernels,", text, re.MULTILINE))


@pytest.mark.parametrize("arch", ARCHES)
def test_wheel_is_py3_manylinux_2_17(wheelhouse, arch):
    """One wheel for every Python (the library is no CPython extension), glibc 2.17 as auditwheel
    judges it (onnxruntime's own wheels are manylinux_2_28), holding a library for `arch` and no
    onnxruntime requirement but that of its [cpu] extra."""
    wheel = wheelhouse[arch]
    assert re.fullmatch(rf"ascend_grad-[\w.]+-py3-none-manylinux2014_{arch}\.manylinux_2_17_{arch}\.whl", wheel.name)
    tools = wheels_script.tools_python()
    env = dict(os.environ, PATH=f"{tools.parent}{os.pathsep}{os.environ['PATH']}")
    shown = subprocess.run([tools, "-m", "auditwheel", "show", wheel], capture_output=True, text=True, env=env, check=True).stdout
    assert re.search(rf'consistent with the\s+following platform tag:\s+"manylinux_2_17_{arch}"', shown), shown
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (library,) = [n for n in names if n.endswith("/" + runtime_ext.LIBRARY_NAME)]
        elf = archive.read(library)
        info = next(n for n in names if n.endswith(".dist-info/WHEEL"))
        tags = re.findall(r"^Tag: (\S+)$", archive.read(info).decode(), re.MULTILINE)
        meta = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert library == f"ascend_grad/runtime_ext/{runtime_ext.LIBRARY_NAME}"
    assert elf[:4] == b"\x7fELF" and int.from_bytes(elf[18:20], "little") == ELF_MACHINE[arch]
    assert sorted(tags) == [f"py3-none-manylinux2014_{arch}", f"py3-none-manylinux_2_17_{arch}"]
    onnxruntime = [line for line in meta.splitlines() if line.startswith("Requires-Dist: onnxruntime")]
    assert onnxruntime == ['Requires-Dist: onnxruntime>=1.19; extra == "cpu"'], onnxruntime


def test_x86_64_wheel_without_onnxruntime_names_the_flavours(x86_env):
    """Alone, the wheel installs no onnxruntime, and importing ascend_grad says what to install."""
    assert not any(name.startswith("onnxruntime") for name in x86_env.packages_alone), x86_env.packages_alone
    assert "ascend-grad" in x86_env.packages_alone
    done = x86_env.without_onnxruntime
    assert done.returncode != 0
    assert "ImportError: ascend-grad needs onnxruntime, and none is installed" in done.stderr
    assert "onnxruntime-cann" in done.stderr and "ascend-grad[cpu]" in done.stderr


def test_x86_64_wheel_picks_the_widest_instruction_set(x86_env):
    """The installed library's choice (ASCEND_GRAD_VERBOSE) is the widest table /proc/cpuinfo allows."""
    best = runtime_ext.runnable_isas()[0]
    done = x86_env.run(x86_env.python, "-c", "from ascend_grad import runtime_ext; runtime_ext.session_options()", ASCEND_GRAD_VERBOSE="1")
    assert done.returncode == 0, done.stderr
    assert _verbose_isas(done.stderr) == {best}, done.stderr


def test_x86_64_wheel_runs_the_demo(x86_env):
    done = x86_env.run(x86_env.folder / "env" / "bin" / "ascend-grad", "demo", "-o", x86_env.folder / "demo", ASCEND_GRAD_VERBOSE="1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    print(done.stdout)  # (the timings, for the log)
    assert _verbose_isas(done.stderr) == {runtime_ext.runnable_isas()[0]}, done.stderr
    for graph, op in (("resblock_b8", "GroupNormSwishGrad x1"), ("silu_mlp", "SiluBackward x1"), ("mish_mlp", "MishBackward x1")):
        assert re.search(rf"^{graph}\.aot\.opt +.*{op}.* outputs, max rel\. error", done.stdout, re.MULTILINE), done.stdout
    assert (x86_env.folder / "demo" / "report.json").is_file()


def test_x86_64_wheel_passes_the_kernel_tests(x86_env):
    """The kernel tests of this checkout, run by the wheel's environment against the installed wheel
    (pytest's importlib mode imports ascend_grad from site-packages, which the last test checks)."""
    done = x86_env.run(x86_env.python, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *KERNEL_TESTS,
                       "tests/test_package.py::test_imports_the_installed_package_not_the_checkout",
                       cwd=REPO, ASCEND_GRAD_VERBOSE="1", **TRIMMED_SIZES)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"\d+ passed", done.stdout) and " failed" not in done.stdout
    assert _verbose_isas(done.stdout + done.stderr) == {runtime_ext.runnable_isas()[0]}
    assert reported_sizes(done.stdout + done.stderr) == {tuple(TRIMMED_SIZES.values())}


_UNLOAD_AND_EXIT = """
import gc, numpy as np, onnxruntime as ort
from ascend_grad import ops, runtime_ext
go, x = np.ones(1000, np.float32), np.linspace(-5, 5, 1000, dtype=np.float32)
model = ops.make_node_model("SiluBackward", {"gradOutput": go, "self": x})
session = ort.InferenceSession(model.SerializeToString(), runtime_ext.session_options(), providers=["CPUExecutionProvider"])
out = session.run(None, {"gradOutput": go, "self": x})[0]
assert np.allclose(out, ops.reference.silu_backward(go, x), rtol=1e-5, atol=1e-6)
del session; gc.collect()   # onnxruntime unloads the library with the session options
print("unloaded")
"""


def test_x86_64_wheel_process_exits_cleanly_after_the_library_is_unloaded(x86_env):
    """A zig-built library left its static destructors in glibc's exit list after onnxruntime
    unloaded it, and the process died at exit (SIGSEGV, status -11); linked -z nodelete it stays."""
    done = x86_env.run(x86_env.python, "-c", _UNLOAD_AND_EXIT)
    assert done.returncode == 0 and done.stdout.strip() == "unloaded", (done.returncode, done.stderr[-2000:])


def test_wheel_keeps_the_installed_onnxruntime_flavour(wheelhouse, tmp_path):
    """Installed into an environment holding onnxruntime-training-cpu, the wheel leaves it as it is
    (no CPU onnxruntime over it) and its kernels run on that onnxruntime."""
    if sys.version_info[:2] != (3, 11):
        pytest.skip(f"onnxruntime-training-cpu 1.19.2 has wheels for CPython 3.11 on Linux x86_64; this is {sys.version}")
    python, env, pip = _venv(tmp_path / "env")
    _pip_install(pip, env, tmp_path, "onnxruntime-training-cpu==1.19.2", "numpy<2")
    before = _installed(pip, env, tmp_path)
    _pip_install(pip, env, tmp_path, wheelhouse["x86_64"])
    after = _installed(pip, env, tmp_path)
    assert after["onnxruntime-training-cpu"] == before["onnxruntime-training-cpu"] == "1.19.2"
    assert "onnxruntime" not in after and "ascend-grad" in after, after
    done = _run([python, "-c", "import onnxruntime; print(onnxruntime.__version__)\n" + _UNLOAD_AND_EXIT], env, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1.19.2", "unloaded"]


def test_aarch64_wheel_under_emulation(wheelhouse):
    """The aarch64 wheel installed in the emulated aarch64 host of tests/aarch64/emulation.py (qemu-user,
    Debian's arm64 Python 3.11, onnxruntime 1.32.0's aarch64 wheel): it picks the NEON kernels, the
    process exits cleanly after unloading the library, and the kernels agree with the function bodies
    (test_vs_function.py). Where the emulation cannot be set up the test fails saying why."""
    emulation = _load(REPO / "tests" / "aarch64" / "emulation.py", "aarch64_emulation")
    try:
        python = emulation.ready("wheelhouse", built=wheelhouse["aarch64"])
    except emulation.Unavailable as error:
        pytest.fail(f"aarch64 emulation unavailable: {error}", pytrace=False)
    env = emulation.environment({"ASCEND_GRAD_VERBOSE": "1"})
    env = {k: v for k, v in env.items() if not k.startswith("ASCEND_GRAD_") or k == "ASCEND_GRAD_VERBOSE"}
    done = _run([python, "-c", _UNLOAD_AND_EXIT], env, REPO)
    assert done.returncode == 0 and done.stdout.strip() == "unloaded", (done.returncode, done.stderr[-2000:])
    assert _verbose_isas(done.stderr) == {"neon"}, done.stderr
    done = _run([python, "-m", "pytest", "-q", "-s", "-n", "0", "-p", "no:cacheprovider", "tests/runtime_ext/test_vs_function.py"],
                dict(env, **TRIMMED_SIZES), REPO, timeout=1800)
    assert done.returncode == 0 and re.search(r"\d+ passed", done.stdout), done.stdout[-4000:] + done.stderr[-2000:]
    assert reported_sizes(done.stdout + done.stderr) == {tuple(TRIMMED_SIZES.values())}
