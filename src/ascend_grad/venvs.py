"""Virtual environments beside this one, for what cannot share it: onnxruntime-training 1.19.2 (the
onnxruntime-training route of models/), older onnxruntimes (the tests)."""

from __future__ import annotations


def make_venv(folder, clear: bool = False, with_pip: bool = False) -> list[str]:
    """A new virtual environment at `folder` -> the command that runs pip for it (append `install ...`).

    Unless `with_pip`, this python's own pip does the installing where it can (pip >= 22.3,
    `--python`: the same pip, run by the new environment's python), and the new environment gets no
    pip of its own: ensurepip took 4 s of CPU per environment, the whole cost of one that pip then
    fills from its cache. Without such a pip here (an environment made by uv, say), or an interpreter
    that does not know its own path (sys.executable empty), or `with_pip`, the new one gets its own."""
    import importlib.metadata
    import sys
    import venv
    from pathlib import Path

    python = Path(folder) / "bin" / "python"
    try:
        version = tuple(int(part) for part in importlib.metadata.version("pip").split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        version = (0, 0)
    if version >= (22, 3) and sys.executable and not with_pip:
        venv.create(folder, with_pip=False, clear=clear)
        return [sys.executable, "-m", "pip", "--python", str(python)]
    venv.create(folder, with_pip=True, clear=clear)
    return [str(python), "-m", "pip"]


def venv_python(spec: str, *extra: str, root=None, with_pip: bool = False):
    """The python of a virtual environment holding only `spec` (and `extra` packages), made once under
    `root`, else $ASCEND_GRAD_VENVS, else build/venvs/ of the current directory (the repository
    root): a second onnxruntime, say, beside this one. `with_pip`: with its own pip as well (else
    it may have none: make_venv)."""
    import fcntl
    import os
    import re
    import subprocess
    from pathlib import Path

    folder = Path(root or os.environ.get("ASCEND_GRAD_VENVS") or Path.cwd() / "build" / "venvs") / re.sub(r"[^A-Za-z0-9.]+", "-", " ".join((spec, *extra)))
    python = folder / "bin" / "python"
    if (folder / "ready").exists():
        return python
    folder.parent.mkdir(parents=True, exist_ok=True)
    # one maker at a time: a second process clearing the folder under the first one's pip left a
    # folder marked ready without its packages (two test runs in one checkout)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "ready").exists():
            pip = make_venv(folder, clear=True, with_pip=with_pip)
            # --no-compile: the bytecode of what is imported is written at its first import (compiling
            # every module of onnxruntime, numpy, onnx and onnxscript took 5.6 of pip's 8 s of CPU)
            subprocess.run([*pip, "install", "-q", "--disable-pip-version-check", "--no-compile", spec, *extra], check=True)
            (folder / "ready").touch()
    return python
