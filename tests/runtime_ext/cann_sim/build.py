"""Builds the simulated CANN runtime (src/*.c) into <root>/lib64 with the system C compiler.

    build(root=None) -> Path of root     (default root: <repo>/build/cann_sim)

The libraries carry CANN's sonames, so onnxruntime-cann's provider and our kernel library load
them as they would load CANN's; <root>/set_env.sh exports ASCEND_HOME_PATH and LD_LIBRARY_PATH as
CANN's set_env.sh does. A build happens only when the hash of the sources, flags and compiler
changed (root/stamp); it compiles in a private temporary folder and moves each finished library
into place with an atomic rename, so two processes may build at once."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
REPO = HERE.parents[2]
# one build per architecture (an aarch64 python under emulation builds its own with CC set to the
# cross compiler: tests/aarch64)
DEFAULT_ROOT = REPO / "build" / ("cann_sim" if platform.machine() == "x86_64" else f"cann_sim-{platform.machine()}")

CFLAGS = ["-O2", "-fPIC", "-Wall", "-Wextra", "-std=gnu11", "-fvisibility=hidden"]
# soname -> (sources, simulated libraries it links against); libascendcl holds the shared state.
LIBRARIES = {
    "libascendcl.so": (["ascendcl.c"], []),
    "libnnopbase.so": (["nnopbase.c"], ["ascendcl"]),
    "libopapi.so": (["opapi.c"], ["nnopbase", "ascendcl"]),
    "libacl_op_compiler.so": (["op_compiler.c", "aclop_kernels.c"], ["ascendcl"]),
    "libfmk_onnx_parser.so": (["onnx_parser.c"], ["ascendcl"]),
}
SET_ENV = """# The simulated CANN runtime, as CANN's set_env.sh: source this file.
export ASCEND_HOME_PATH={root}
export LD_LIBRARY_PATH={root}/lib64${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}
"""


def compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise RuntimeError("no C compiler (cc or gcc) on PATH, needed for the simulated CANN runtime")
    return cc


def source_hash(cc: str) -> str:
    h = hashlib.sha256()
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    h.update(f"{version}\n{CFLAGS}\n{sorted(LIBRARIES.items())}\n".encode())
    for path in sorted(SRC.iterdir()):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def build(root=None) -> Path:
    root = Path(root or DEFAULT_ROOT).resolve()
    cc = compiler()
    digest = source_hash(cc)
    stamp = root / "stamp"
    lib64 = root / "lib64"
    if stamp.exists() and stamp.read_text() == digest and all((lib64 / name).exists() for name in LIBRARIES):
        return root
    lib64.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".build-") as tmp:
        tmp = Path(tmp)
        for name, (sources, deps) in LIBRARIES.items():  # in dependency order
            cmd = [cc, *CFLAGS, "-shared", f"-Wl,-soname,{name}", "-Wl,-z,defs", "-Wl,-rpath,$ORIGIN",
                   "-o", str(tmp / name), *(str(SRC / s) for s in sources), f"-L{tmp}",
                   *(f"-l{d}" for d in deps), "-lm", "-lpthread"]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"building {name} failed:\n{' '.join(cmd)}\n{done.stderr}")
        for name in LIBRARIES:
            os.replace(tmp / name, lib64 / name)
        (tmp / "set_env.sh").write_text(SET_ENV.format(root=root))
        os.replace(tmp / "set_env.sh", root / "set_env.sh")
        (tmp / "stamp").write_text(digest)
        os.replace(tmp / "stamp", stamp)
    return root


if __name__ == "__main__":
    print(build())
