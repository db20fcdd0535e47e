"""venv_python: an environment made once, by one process at a time."""

import fcntl
import subprocess
import sys
import time

import pytest


def test_a_second_maker_waits_for_the_first(tmp_path):
    """Two runs in one checkout once made the same environment together: the second cleared the
    folder under the first one's pip, and the folder stayed marked ready without its packages. While
    another holds the environment's lock, a maker must not touch the folder; after, it makes it."""
    name = "six-1.16.0"
    ask = "import sys; from ascend_grad.venvs import venv_python; print(venv_python('six==1.16.0', root=sys.argv[1]))"
    with open(tmp_path / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        maker = subprocess.Popen([sys.executable, "-c", ask, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        time.sleep(3)  # (the package imports in about 1 s)
        assert maker.poll() is None and not (tmp_path / name).exists(), "the maker did not wait for the lock"
    python = maker.communicate(timeout=600)[0].strip()
    assert maker.returncode == 0 and (tmp_path / name / "ready").exists()
    done = subprocess.run([python, "-c", "import six; print(six.__version__)"], capture_output=True, text=True)
    assert done.stdout.strip() == "1.16.0", done.stderr


def test_a_new_environment_is_filled_by_this_pip(tmp_path):
    """make_venv: no ensurepip (4 s of CPU) where this python's pip can install into the new one."""
    from ascend_grad.venvs import make_venv

    pip = make_venv(tmp_path / "env")
    assert pip[:4] == [sys.executable, "-m", "pip", "--python"], pip
    assert not list((tmp_path / "env").glob("lib/python*/site-packages/pip")), "ensurepip ran"
    done = subprocess.run([*pip, "install", "-q", "--disable-pip-version-check", "six==1.16.0"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([tmp_path / "env" / "bin" / "python", "-c", "import six, sys; print(six.__file__.startswith(sys.prefix))"],
                          capture_output=True, text=True)
    assert done.stdout.strip() == "True", done.stdout + done.stderr


@pytest.mark.parametrize("lacking", ["pip", "its own path"])
def test_without_a_pip_here_the_new_environment_gets_its_own(tmp_path, monkeypatch, lacking):
    """Where this python has no pip (an environment made by uv, say), or does not know its own path
    (an embedded interpreter), the new one gets ensurepip's."""
    import importlib.metadata

    from ascend_grad.venvs import make_venv

    version = importlib.metadata.version

    def without_pip(name):
        if name == "pip":
            raise importlib.metadata.PackageNotFoundError(name)
        return version(name)

    if lacking == "pip":
        monkeypatch.setattr(importlib.metadata, "version", without_pip)
    else:
        monkeypatch.setattr(sys, "executable", "")
    pip = make_venv(tmp_path / "env")
    assert pip == [str(tmp_path / "env" / "bin" / "python"), "-m", "pip"], pip
    done = subprocess.run([*pip, "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and str(tmp_path / "env") in done.stdout, done.stdout + done.stderr
