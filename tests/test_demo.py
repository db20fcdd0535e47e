"""`ascend-grad demo` runs to the end on the bundled graphs, without PyTorch, and says what it did."""

import ast
import json
import os
import re
import subprocess
import sys

import onnx

from ascend_grad import DOMAIN


def test_demo_runs_end_to_end_without_torch(tmp_path):
    out = tmp_path / "demo"
    # torch made unimportable: the demo must not need it
    script = ("import sys; sys.modules['torch'] = None\n"
              "from ascend_grad.cli import main\n"
              f"sys.exit(main(['demo', '-o', {str(out)!r}, '--seconds', '0.6', '--threads', '1']))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    for name, ops in (("resblock_b8.aot.opt", ["GroupNormSwishGrad", "GroupNormSwish"]), ("silu_mlp.aot.opt", ["SiluBackward"]),
                      ("mish_mlp.aot.opt", ["MishBackward"])):
        line = next(line for line in text.splitlines() if line.startswith(name))
        assert ", ".join(f"{op} x1" for op in ops) in line and "MISMATCH" not in line, line
        fused = onnx.load(out / f"{name}.fused.onnx")
        assert sorted(n.op_type for n in fused.graph.node if n.domain == DOMAIN) == sorted(ops)
    speed = re.search(r"(\d+\.\d+) ms unfused -> (\d+\.\d+) ms fused .*: (\d+\.\d)x (faster|slower)", text)
    assert speed, text
    before, after, ratio, word = float(speed[1]), float(speed[2]), float(speed[3]), speed[4]
    assert abs((before / after if word == "faster" else after / before) - ratio) <= 0.051
    report = json.loads((out / "report.json").read_text())
    assert abs(report["training_step"]["unfused_ms"] - before) <= 0.005
    for name in ("resblock_b8.aot.opt", "silu_mlp.aot.opt", "mish_mlp.aot.opt"):
        errors = report[name]["verify"]["relative_errors"]
        assert errors and max(errors.values()) <= report[name]["verify"]["bound"]
    assert str(out.resolve()) in text


def test_demo_on_the_simulated_npu(cann, tmp_path):
    """--target ascend without an NPU runs on the simulated one and says so; placement as planned,
    every output as the CPU gives it, one aclnn call, no protocol violation."""
    env = {**os.environ, "ASCEND_GRAD_CANN_SIM": str(cann.root), "ASCEND_GRAD_VENVS": str(cann.python.parents[2])}
    done = subprocess.run([sys.executable, "-m", "ascend_grad.cli", "demo", "--target", "ascend", "-o", str(tmp_path)],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    text = done.stdout
    assert "on a SIMULATED NPU" in text
    for op in ("GroupNormSwishGrad", "GroupNormSwish"):  # the backward and (fused too) the forward
        assert re.search(rf"node_{op}_\S*\s+{op}\s+npu", text), text
    assert "as onnxruntime placed them: the same" in text and "(DIFFERENT)" not in text
    error = float(re.search(r"max relative error (\S+) ", text)[1])
    assert error <= 1e-5
    calls = re.search(r"aclnn calls: (\{.*?\}); protocol violations: 0", text)
    assert calls and ast.literal_eval(calls[1]) == {"aclnnGroupNormSwishGrad": 1, "aclnnGroupNormSwish": 1}, text
    assert (tmp_path / "resblock_b8.aot.opt.ascend.onnx").is_file()


def test_demo_without_any_npu(tmp_path):
    env = {**os.environ, "ASCEND_GRAD_CANN_SIM": str(tmp_path / "none"), "ASCEND_GRAD_VENVS": str(tmp_path / "none")}
    done = subprocess.run([sys.executable, "-m", "ascend_grad.cli", "demo", "--target", "ascend", "-o", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "no Ascend NPU here" in done.stderr, done.stderr
