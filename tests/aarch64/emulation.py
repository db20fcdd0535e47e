"""An aarch64 Linux host (an Atlas server's Kunpeng 920) emulated on this x86-64 one, made by the
tests themselves under build/aarch64 (one maker at a time: a file lock; each part made once):

- Debian's cross compiler, qemu-user-static and binfmt-support (apt-get), binfmt_misc mounted and
  qemu-aarch64 enabled, so aarch64 programs run directly, their loader and libraries taken from
  QEMU_LD_PREFIX = the sysroot, on an emulated Neoverse N1 (QEMU_CPU: ARMv8.2 without SVE, as the
  Kunpeng 920);
- the sysroot: Debian's arm64 Python 3.11 and the libraries it needs (apt-get download, dpkg -x, with
  apt's lists kept under build/aarch64/apt: the host's own apt setup is left alone), and an ARM
  /proc/cpuinfo in it (qemu maps that path through the sysroot; onnxruntime crashes on import under
  qemu 7.2 reading the x86 host's);
- this repository as an aarch64 wheel, cross-built with tests/aarch64/toolchain.cmake (again
  whenever its sources change);
- virtual environments of that python (python -m venv runs under emulation), their packages
  installed by this side's pip for the aarch64 platform (pip install --target --platform): the
  aarch64 wheels of onnxruntime 1.32.0 or onnxruntime-cann 1.24.4 (numpy 1), the test tools, and
  the cross-built wheel.

    python tests/aarch64/emulation.py        # makes everything, prints the two pythons

Anything that cannot be set up raises Unavailable with one line saying what and why (needs root,
apt-get, binfmt_misc); the tests turn that into a failure, never a skip."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ROOT = REPO / "build" / "aarch64"
SYSROOT = ROOT / "sysroot"
TOOLCHAIN = HERE / "toolchain.cmake"

HOST_PACKAGES = {"aarch64-linux-gnu-g++": "g++-aarch64-linux-gnu", "qemu-aarch64-static": "qemu-user-static",
                 "update-binfmts": "binfmt-support"}
# Debian's arm64 python3.11 and what its interpreter and the extension modules the tests import
# (ctypes, hashlib, lzma, bz2, zlib, ssl, sqlite3, uuid; decimal is built in) load
SYSROOT_PACKAGES = ["python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib", "libc6", "libgcc-s1",
                    "libstdc++6", "zlib1g", "libexpat1", "libffi8", "libssl3", "libbz2-1.0", "liblzma5",
                    "libsqlite3-0", "libuuid1", "libcrypt1", "libncursesw6", "libtinfo6", "libreadline8", "libdb5.3"]
# what pip may install into the sysroot's python (glibc 2.36)
PLATFORMS = ["linux_aarch64", "manylinux2014_aarch64"] + [f"manylinux_2_{minor}_aarch64" for minor in range(17, 37)]
TOOLS = ["pytest>=8", "pytest-xdist>=3.6", "pytest-timeout>=2.3", "hypothesis>=6.100"]  # (pyproject's addopts and ini name them)
# the environments: (name, packages); numpy 1 for onnxruntime-cann, which its metadata does not say.
# ml_dtypes (onnx's) before 0.7: 0.7.0 registers its numpy loops in time quadratic in their number, and
# its import took 10.4 s of CPU under emulation against 0.6.0's 1.4 (`import ascend_grad.ops` 16.5 s
# against 5.7; natively 1 s against 0.01), in each emulated process that imports onnx (the numpy-1
# environment gets 0.5 anyway). The x86 environments keep what pip picks (tests/test_wheels.py: 0.7).
ONNXRUNTIME = ["onnxruntime==1.32.0", "numpy", "ml_dtypes<0.7"]
VENVS = {
    "onnxruntime": ONNXRUNTIME,
    "onnxruntime-cann": ["onnxruntime-cann==1.24.4", "numpy<2"],
    "wheelhouse": ONNXRUNTIME,  # (for a wheel of build_support/wheels: tests/test_wheels.py; a copy of the first)
}

def _base_requirements() -> list[str]:
    """The package's own requirements (pyproject.toml's base list) but numpy, which each venv pins."""
    try:
        import tomllib
    except ModuleNotFoundError:  # (Python 3.10: pip's own copy of it)
        from pip._vendor import tomli as tomllib

    base = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["scikit-build"]["metadata"]["dependencies"]["base"]
    return [r for r in base if not r.startswith("numpy")]


BASE = _base_requirements()
# what the wheel is made of (a change rebuilds it)
WHEEL_SOURCES = ["pyproject.toml", "runtime_ext", "src", "ops", "graph_passes", "models", "bench", "build_support"]


class Unavailable(RuntimeError):
    """The emulated aarch64 host cannot be set up here (the message says what, in one line)."""


def _run(command, what: str, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}").splitlines()[-1]
        raise Unavailable(f"{what}: {last}")
    return done


@contextlib.contextmanager
def _locked(name: str):
    ROOT.mkdir(parents=True, exist_ok=True)
    with open(ROOT / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _apt_get(*args, what: str):
    # (waits for another apt-get or dpkg that holds the lock, as a second test worker's would)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return _run(["apt-get", "-q", "-o", "DPkg::Lock::Timeout=600", *args], what, env=env)


def host_tools():
    """HOST_PACKAGES (the cross compiler, qemu-user-static and binfmt-support), installed by apt-get
    where missing, one installer at a time (tests/runtime_ext/test_x86_features.py's qemu-x86_64
    comes from here too)."""
    with _locked("host-tools"):
        missing = [package for tool, package in HOST_PACKAGES.items() if shutil.which(tool) is None]
        if not missing:
            return
        if shutil.which("apt-get") is None:
            raise Unavailable(f"aarch64 emulation needs {', '.join(missing)} and there is no apt-get to install them")
        if os.geteuid() != 0:
            raise Unavailable(f"aarch64 emulation needs {', '.join(missing)}: apt-get install needs root")
        _apt_get("update", what="apt-get update")
        _apt_get("install", "-y", "--no-install-recommends", *missing, what=f"apt-get install {' '.join(missing)}")


BINFMT = Path("/proc/sys/fs/binfmt_misc")


def binfmt():
    """binfmt_misc mounted and its qemu-aarch64 entry enabled: aarch64 ELF files then run directly."""
    entry = BINFMT / "qemu-aarch64"
    if entry.exists() and entry.read_text().startswith("enabled"):
        return
    if os.geteuid() != 0:
        raise Unavailable("binfmt_misc has no enabled qemu-aarch64 entry, and setting one up needs root")
    if not (BINFMT / "register").exists():
        _run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)], "mount -t binfmt_misc (needs root, and a kernel that allows it here)")
    if not entry.exists():
        _run(["update-binfmts", "--import", "qemu-aarch64"], "update-binfmts --import qemu-aarch64")
    _run(["update-binfmts", "--enable", "qemu-aarch64"], "update-binfmts --enable qemu-aarch64")
    if not (entry.exists() and entry.read_text().startswith("enabled")):
        raise Unavailable(f"binfmt_misc: {entry} is not enabled after update-binfmts --enable qemu-aarch64")


def sysroot() -> Path:
    """Debian's arm64 python3.11 unpacked under build/aarch64/sysroot, with an ARM /proc/cpuinfo."""
    stamp = SYSROOT / "ready"
    wanted = " ".join(SYSROOT_PACKAGES)
    if stamp.exists() and stamp.read_text() == wanted:
        return SYSROOT
    apt = ROOT / "apt"
    for folder in (apt / "lists" / "partial", apt / "cache" / "archives" / "partial"):
        folder.mkdir(parents=True, exist_ok=True)
    (apt / "status").touch()
    # apt's lists of arm64 packages of the host's sources, kept apart from the host's own
    private = ["-o", f"Dir::State::Lists={apt / 'lists'}", "-o", f"Dir::Cache={apt / 'cache'}",
               "-o", f"Dir::State::status={apt / 'status'}", "-o", "APT::Architecture=arm64", "-o", "APT::Architectures::=arm64"]
    _apt_get(*private, "update", what="apt-get update (arm64 lists)")
    debs = ROOT / "debs"
    shutil.rmtree(debs, ignore_errors=True)
    debs.mkdir()
    _run(["apt-get", "-q", *private, "download", *SYSROOT_PACKAGES], "apt-get download (arm64 python3.11)", cwd=debs)
    tmp = Path(tempfile.mkdtemp(prefix="sysroot-", dir=ROOT))
    for deb in sorted(debs.glob("*.deb")):
        _run(["dpkg", "-x", deb, tmp], f"dpkg -x {deb.name}")
    (tmp / "proc").mkdir()
    shutil.copy(HERE / "cpuinfo", tmp / "proc" / "cpuinfo")
    # the standard library's bytecode, which Debian's packages make when installed, not unpacked (by
    # this python: every 3.11 reads the same; where PYTHONDONTWRITEBYTECODE is set, each emulated
    # process would compile what it imports again, about half its start)
    _run([sys.executable, "-m", "compileall", "-q", "-j0", "-x", r"/(test|idlelib|lib2to3|tkinter|turtledemo)/",
          tmp / "usr" / "lib" / "python3.11"], "compiling the sysroot's standard library")
    shutil.rmtree(SYSROOT, ignore_errors=True)
    os.replace(tmp, SYSROOT)
    stamp.write_text(wanted)
    return SYSROOT


def environment(env: dict | None = None) -> dict:
    """os.environ for a process under emulation: the sysroot's loader and libraries, no x86 leftovers
    (a virtual environment's variables, the instruction set asked of this side's tests, the xdist
    worker's identity)."""
    out = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "ASCEND_GRAD_ISA") and not k.startswith("PYTEST_XDIST_")}
    out["QEMU_LD_PREFIX"] = str(SYSROOT)
    # the emulated CPU: an ARMv8.2 core with half-precision and dot-product instructions and no SVE,
    # as the Kunpeng 920's TaiShan v110 cores are. qemu's default ("max") adds SVE and later
    # extensions, which numpy and onnxruntime would then use: no Atlas host runs those paths (and
    # the kernel runs took 10% more time under them)
    out.setdefault("QEMU_CPU", "neoverse-n1")
    out.update(env or {})
    return out


def _sources_hash() -> str:
    digest = hashlib.sha256()
    for name in WHEEL_SOURCES:
        top = REPO / name
        paths = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        for path in paths:
            digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    digest.update(TOOLCHAIN.read_bytes())
    return digest.hexdigest()


def wheel() -> Path:
    """This repository cross-built as an aarch64 wheel (again when its sources changed)."""
    folder = ROOT / "wheel"
    digest = _sources_hash()
    stamp = folder / "stamp"
    if stamp.exists() and stamp.read_text() == digest:
        return next(folder.glob("*.whl"))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    env = dict(os.environ, _PYTHON_HOST_PLATFORM="linux-aarch64", CMAKE_TOOLCHAIN_FILE=str(TOOLCHAIN),
               ASCEND_GRAD_ONNXRUNTIME="onnxruntime")
    headers = sorted(REPO.glob("build/*/onnxruntime-headers/onnxruntime_c_api.h"))
    if headers and "ONNXRUNTIME_INCLUDE_DIR" not in env:  # (the x86 build's copy: no second fetch)
        env["ONNXRUNTIME_INCLUDE_DIR"] = str(headers[0].parent)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", folder, REPO], "cross-building the aarch64 wheel", env=env)
    built = list(folder.glob("*.whl"))
    if len(built) != 1 or not built[0].name.endswith("linux_aarch64.whl"):
        raise Unavailable(f"cross-building the aarch64 wheel made {[p.name for p in built]}, not one linux_aarch64 wheel")
    stamp.write_text(digest)
    return built[0]


def _pip_target(site: Path, *requirements, what: str, no_deps=False):
    platforms = [option for platform in PLATFORMS for option in ("--platform", platform)]
    _run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--target", site, "--upgrade",
          "--only-binary=:all:", *platforms, "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
          *(["--no-deps"] if no_deps else []), *requirements], what)


def _packages(name: str) -> Path:
    """The folder of the aarch64 virtual environment `name` holding the packages VENVS names (made
    anew when the list changes)."""
    folder = ROOT / "venvs" / name
    ready = folder / "ready"
    wanted = " ".join([*VENVS[name], *BASE, *TOOLS])
    if ready.exists() and ready.read_text() == wanted:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    twin = next(other for other in VENVS if VENVS[other] == VENVS[name])
    if twin != name:
        # the packages of an earlier venv: a copy of it (its python a link to the sysroot's; a wheel
        # of this repository in it is replaced by venv()), not a second resolve and install (20 s of CPU)
        shutil.copytree(_packages(twin), folder, symlinks=True)
        (folder / "wheel").unlink(missing_ok=True)
    else:
        _run([SYSROOT / "usr" / "bin" / "python3.11", "-m", "venv", "--without-pip", folder],
             "python3.11 -m venv under emulation", env=environment())
        _pip_target(folder / "lib" / "python3.11" / "site-packages", *VENVS[name], *BASE, *TOOLS,
                    what=f"pip install (aarch64) {' '.join(VENVS[name])}")
    ready.write_text(wanted)
    return folder


def venv(name: str, built: Path | None = None) -> Path:
    """The python of the aarch64 virtual environment `name` (VENVS) with a wheel of this repository
    in it: `built`, else the cross-built one (installed again whenever the wheel changes)."""
    folder = _packages(name)
    built = built or wheel()
    installed, identity = folder / "wheel", f"{built} {hashlib.sha256(built.read_bytes()).hexdigest()}"
    if not installed.exists() or installed.read_text() != identity:
        _pip_target(folder / "lib" / "python3.11" / "site-packages", built, what=f"pip install (aarch64) {built.name}",
                    no_deps=True)
        installed.write_text(identity)
    return folder / "bin" / "python"


def ready(name: str, built: Path | None = None) -> Path:
    """Everything set up (made where missing, one maker at a time) -> the python of venv `name`
    (holding the wheel `built`, else the cross-built one)."""
    with _locked("setup"):
        host_tools()
        binfmt()
        sysroot()
        python = venv(name, built)
    done = subprocess.run([python, "-c", "import platform; print(platform.machine())"], capture_output=True, text=True,
                          env=environment())
    if done.returncode != 0 or done.stdout.strip() != "aarch64":
        raise Unavailable(f"the emulated python does not run: {(done.stderr.strip() or done.stdout.strip()).splitlines()[-1:]}")
    return python


if __name__ == "__main__":
    for name in ("onnxruntime", "onnxruntime-cann"):
        print(name, ready(name))
