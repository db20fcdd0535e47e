"""The README's worked example runs as written (from a PyTorch module to a fused graph in onnxruntime)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_worked_example_runs(tmp_path):
    pytest.importorskip("torch")
    text = README.read_text()
    heading = re.search(r"^#{2,3} From a PyTorch module to a fused training graph\n", text, re.M)
    assert heading, "the README's worked example has lost its heading"
    section = text[heading.end():]
    code = re.search(r"<!-- run -->\n```python\n(.*?)```", section, re.S)[1]  # marked: tests/test_docs.py leaves it here
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout.splitlines()[0]
    assert printed == "['GroupNormSwish', 'GroupNormSwishGrad', 'MishBackward']", done.stdout
    assert f"It prints `{printed}`" in section, "the README quotes what the example prints"
    assert "gradients and 3 buffers match PyTorch" in done.stdout


def test_set_up_commands_are_the_ci_command():
    text = README.read_text()
    blocks = re.findall(r"```\n(python3 -m venv .*?)\n```", text)
    assert len(blocks) == 2 and blocks[0].endswith("ascend-grad demo")
    ci = (README.parent / ".ci" / "run").read_text()
    assert blocks[1] in ci.splitlines()
