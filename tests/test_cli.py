"""The command line: `ascend-grad fuse` on real graphs and on bad input (exit 0 / 1 / 2, a one-line
reason on stderr, never a traceback)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from ascend_grad import cli
from ascend_grad.models import graph_path


def ascend_grad(*args):
    script = shutil.which("ascend-grad", path=str(Path(sys.executable).parent))
    return subprocess.run([script, *map(str, args)], capture_output=True, text=True)


def _one_line_error(done, *fragments):
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ascend-grad: error:"), done.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_fuse_verify_report(tmp_path):
    out, report = tmp_path / "fused.onnx", tmp_path / "report.json"
    done = ascend_grad("fuse", graph_path("resblock.aot.opt"), "-o", out, "--verify", "--report", report)
    assert done.returncode == 0, done.stderr
    assert "GroupNormSwishGrad x1" in done.stdout and "verified" in done.stdout
    result = json.loads(report.read_text())
    assert result["counts"]["GroupNormSwishGrad"] == 1 and result["nodes_after"] < result["nodes_before"]
    errors = result["verify"]["relative_errors"]
    assert "loss" in errors and len(errors) == len(onnx.load(out).graph.output)
    assert max(errors.values()) <= result["verify"]["bound"]
    fused = onnx.load(out)
    onnx.checker.check_model(fused, full_check=True)
    assert [n.op_type for n in fused.graph.node].count("GroupNormSwishGrad") == 1


def test_verify_fails_when_the_fused_graph_differs(tmp_path, monkeypatch, capsys):
    """A pass that changed the math (here: the loss scaled) must be caught: exit 1."""
    from ascend_grad import graph_passes

    real = graph_passes.fuse_backward_ops

    def wrong(model):
        fused, report = real(model)  # the command line hands the pass an onnx_ir model
        loss = fused.graph.outputs[0]
        two = ir.Value(name="two", const_value=ir.tensor(2.0, dtype=loss.dtype))
        fused.graph.initializers["two"] = two
        doubled = ir.node("Mul", [loss, two], num_outputs=1).outputs[0]
        fused.graph.append(doubled.producer())
        loss.name, doubled.name, doubled.shape, doubled.type = "loss_once", "loss", loss.shape, loss.type
        fused.graph.outputs[0] = doubled
        return fused, report

    monkeypatch.setattr(graph_passes, "fuse_backward_ops", wrong)
    status = cli.main(["fuse", str(graph_path("silu_mlp.aot.opt")), "-o", str(tmp_path / "f.onnx"), "--verify"])
    assert status == 1
    assert "differ" in capsys.readouterr().err


def test_graph_without_patterns_is_written_unchanged(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )
    source = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10), source)
    done = ascend_grad("fuse", source, "-o", tmp_path / "out.onnx", "--verify")
    assert done.returncode == 0, done.stderr
    assert "fused: nothing" in done.stdout
    assert [n.op_type for n in onnx.load(tmp_path / "out.onnx").graph.node] == ["Relu"]


def test_missing_file(tmp_path):
    _one_line_error(ascend_grad("fuse", tmp_path / "nope.onnx", "-o", tmp_path / "o.onnx"), "nope.onnx", "no such file")


def test_not_an_onnx_file(tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\xffthis is not protobuf\x12\x99" * 10)
    _one_line_error(ascend_grad("fuse", junk, "-o", tmp_path / "o.onnx"), "junk.onnx", "not an ONNX model")


def test_unwritable_output(tmp_path):
    _one_line_error(ascend_grad("fuse", graph_path("silu_mlp.aot.opt"), "-o", tmp_path / "no" / "dir" / "o.onnx"))


def test_verify_on_a_graph_stock_onnxruntime_cannot_run(tmp_path):
    """onnxruntime-training graphs hold com.microsoft training ops: fused and written, but --verify
    says it cannot run the original (exit 2) rather than pretending."""
    out = tmp_path / "o.onnx"
    done = ascend_grad("fuse", graph_path("silu_mlp.ort_training"), "-o", out, "--verify")
    _one_line_error(done, "does not run in this onnxruntime")
    assert "SiluBackward x1" in done.stdout and out.is_file()


@pytest.mark.parametrize("args", [["fuse"], ["fuse", "a.onnx"], ["fuse", "a.onnx", "-o", "b.onnx", "--target", "gpu"]])
def test_bad_arguments_exit_2(args):
    assert ascend_grad(*args).returncode == 2
