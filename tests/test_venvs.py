"""venv_python: an environment made once, by one process at a time."""

import fcntl
import subprocess
import sys
import time


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
