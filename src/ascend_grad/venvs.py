"""Virtual environments beside this one, for what cannot share it: onnxruntime-training 1.19.2 (the
onnxruntime-training route of models/), older onnxruntimes (the tests)."""

from __future__ import annotations


def venv_python(spec: str, *extra: str, root=None):
    """The python of a virtual environment holding only `spec` (and `extra` packages), made once under
    `root`, else $ASCEND_GRAD_VENVS, else build/venvs/ of the current directory (the repository
    root): a second onnxruntime, say, beside this one."""
    import fcntl
    import os
    import re
    import subprocess
    import venv
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
            venv.create(folder, with_pip=True, clear=True)
            # --no-compile: the bytecode of what is imported is written at its first import (compiling
            # every module of onnxruntime, numpy, onnx and onnxscript took 5.6 of pip's 8 s of CPU)
            subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile", spec, *extra],
                           check=True)
            (folder / "ready").touch()
    return python
