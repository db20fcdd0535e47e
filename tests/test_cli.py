"""The command line: `ascend-grad fuse` on real graphs and on bad input (exit 0 / 1 / 2, a one-line
reason on stderr, never a traceback). The commands run in the test's process (cli.main, as the
console script calls it); the first test and the bad arguments run the console script in a process
of its own, as tests/test_cli_hostile.py's whole-process cases and test_package's do."""

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
from ascend_grad.graph_passes import fuse_backward_ops
from ascend_grad.models import GRAPHS, graph_path
from ascend_grad.testing import assert_one_line_error, run_cli

_one_line_error = assert_one_line_error


def test_fuse_verify_report(tmp_path):
    """The main command in a whole process, as a user runs it."""
    out, report = tmp_path / "fused.onnx", tmp_path / "report.json"
    done = run_cli("fuse", graph_path("resblock.aot.opt"), "-o", out, "--verify", "--report", report)
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
    status = cli.main(["fuse", str(graph_path("silu_mlp.aot.opt")), "-o", str(tmp_path / "f.onnx"), "--verify",
                       "--report", str(tmp_path / "r.json")])
    assert status == 1
    assert "differ" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # a wrong graph is not written, nor its report


def test_graph_without_patterns_is_written_unchanged(tmp_path, ascend_grad):
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


def test_missing_file(tmp_path, ascend_grad):
    _one_line_error(ascend_grad("fuse", tmp_path / "nope.onnx", "-o", tmp_path / "o.onnx"), "nope.onnx", "no such file")


def test_not_an_onnx_file(tmp_path, ascend_grad):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\xffthis is not protobuf\x12\x99" * 10)
    _one_line_error(ascend_grad("fuse", junk, "-o", tmp_path / "o.onnx"), "junk.onnx", "not an ONNX model")


def test_unwritable_output(tmp_path, ascend_grad):
    _one_line_error(ascend_grad("fuse", graph_path("silu_mlp.aot.opt"), "-o", tmp_path / "no" / "dir" / "o.onnx"))


def test_verify_on_a_graph_stock_onnxruntime_cannot_run(tmp_path, ascend_grad):
    """onnxruntime-training graphs hold com.microsoft training ops: fused, but --verify says it
    cannot run the original (exit 2) rather than pretending, and nothing is left behind."""
    out = tmp_path / "o.onnx"
    done = ascend_grad("fuse", graph_path("silu_mlp.ort_training"), "-o", out, "--verify")
    _one_line_error(done, "does not run in this onnxruntime")
    assert "SiluBackward x1" in done.stdout and not out.exists()
    assert not list(tmp_path.iterdir())  # no temporary file either


@pytest.mark.parametrize("args", [["fuse"], ["fuse", "a.onnx"], ["fuse", "a.onnx", "-o", "b.onnx", "--target", "gpu"],
                                  ["demo", "--threads", "0"], ["demo", "--threads", "two"], ["demo", "--seconds", "-1"],
                                  ["demo", "--seconds", "inf"], ["demo", "--graphs", "no_such_graph"],
                                  ["export", "m:f", "-o", "o.onnx"], ["export", "m:f", "--input", "2,x", "-o", "o.onnx"],
                                  ["export", "m:f", "--input", "2:int9", "-o", "o.onnx"],
                                  ["export", "m:f", "--input", "-2", "-o", "o.onnx"]])
def test_bad_arguments_exit_2(args, tmp_path):
    done = subprocess.run([shutil.which("ascend-grad", path=str(Path(sys.executable).parent)), *args],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "", done.stdout  # refused before any work
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("command", [[], ["ops"], ["fuse"], ["demo"], ["info"], ["export"], ["bench"],
                                     ["bench", "kernels"], ["bench", "graph_pass"], ["bench", "training_step"], ["bench", "training_artifacts"],
                                     ["bench", "translations"], ["bench", "chart"]])
def test_help(command, ascend_grad):
    done = ascend_grad(*command, "--help")
    assert done.returncode == 0 and done.stdout.startswith(f"usage: {' '.join(['ascend-grad', *command])}"), done.stdout


def test_info_before_and_after_fusing(tmp_path, ascend_grad):
    source = graph_path("resblock.aot.opt")
    done = ascend_grad("info", source)
    assert done.returncode == 0, done.stderr
    assert "ascend.grad nodes: none" in done.stdout
    _, report = fuse_backward_ops(onnx.load(source))
    assert (f"the graph pass fuses: GroupNormSwishGrad x1, GroupNormSwish x1 ({report.nodes_before} -> "
            f"{report.nodes_after} nodes)") in done.stdout
    fused = tmp_path / "fused.onnx"
    assert ascend_grad("fuse", source, "-o", fused).returncode == 0
    done = ascend_grad("info", fused)
    assert done.returncode == 0, done.stderr
    assert ("ascend.grad nodes: GroupNormSwish x1, GroupNormSwishGrad x1 (function bodies attached: GroupNormSwish, "
            "GroupNormSwishGrad)") in done.stdout
    assert "the graph pass fuses: none" in done.stdout
    assert onnx.load(fused).SerializeToString() == onnx.load(fused).SerializeToString()  # info wrote nothing


def test_info_says_why_something_was_left_alone(ascend_grad):
    done = ascend_grad("info", graph_path("scaled_swish_mlp.aot.opt"))
    assert done.returncode == 0 and "recognised but left alone: SiluBackward at" in done.stdout, done.stdout


def test_info_bad_input(tmp_path, ascend_grad):
    _one_line_error(ascend_grad("info", tmp_path / "missing.onnx"), "no such file")
    (tmp_path / "text.onnx").write_text("hello")
    _one_line_error(ascend_grad("info", tmp_path / "text.onnx"), "not an ONNX model")


def test_model_with_external_data(tmp_path, ascend_grad):
    """Weights in a side file: fuse keeps them in a side file of its own, info and --verify read them."""
    model = onnx.load(graph_path("silu_mlp.aot.opt"))
    (tmp_path / "in").mkdir()
    onnx.save(model, tmp_path / "in" / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.weights", size_threshold=256)
    assert (tmp_path / "in" / "m.weights").stat().st_size > 0
    done = ascend_grad("info", tmp_path / "in" / "m.onnx")
    assert done.returncode == 0 and "SiluBackward x1" in done.stdout, done.stderr
    out = tmp_path / "out" / "f.onnx"
    out.parent.mkdir()
    done = ascend_grad("fuse", tmp_path / "in" / "m.onnx", "-o", out, "--verify")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "f.onnx.data").stat().st_size > 0
    external = [t.name for t in onnx.load(out, load_external_data=False).graph.initializer if t.external_data]
    assert external, "the weights should stay in a side file"
    fused = onnx.load(out)  # loads the side file
    assert [n.op_type for n in fused.graph.node].count("SiluBackward") == 1


def test_model_with_every_tensor_external(tmp_path, ascend_grad):
    """size_threshold=0 puts even an Unsqueeze's axes in the side file, which onnxruntime's shape
    inference cannot read from there: --verify still runs both graphs (data loaded in memory)."""
    model = onnx.load(graph_path("resblock.aot.opt"))
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0)
    done = ascend_grad("fuse", tmp_path / "m.onnx", "-o", tmp_path / "f.onnx", "--verify")
    assert done.returncode == 0, done.stderr
    assert "GroupNormSwishGrad x1" in done.stdout and "verified 7 outputs" in done.stdout


@pytest.mark.parametrize("command", ["info", "fuse"])
def test_missing_or_short_external_data(tmp_path, command, ascend_grad):
    """A side file that is gone or cut short is bad input, not a graph with nothing to fuse."""
    model = onnx.load(graph_path("silu_mlp.aot.opt"))
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=256)
    args = [command, tmp_path / "m.onnx"] + (["-o", tmp_path / "f.onnx"] if command == "fuse" else [])
    data = tmp_path / "m.data"
    size = data.stat().st_size
    with open(data, "r+b") as file:
        file.truncate(size // 2)
    _one_line_error(ascend_grad(*args), "m.data", f"{size // 2} bytes", f"need {size}")
    data.unlink()
    _one_line_error(ascend_grad(*args), "m.data", "is missing")
    assert not (tmp_path / "f.onnx").exists()


def test_inputs_that_are_not_onnx_models(tmp_path, ascend_grad):
    folder = tmp_path / "folder.onnx"
    folder.mkdir()
    _one_line_error(ascend_grad("info", folder), "is a directory")
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    _one_line_error(ascend_grad("fuse", empty, "-o", tmp_path / "o.onnx"), "empty file")
    # two bytes protobuf decodes as a ModelProto with ir_version 7 and nothing else
    tiny = tmp_path / "tiny.onnx"
    tiny.write_bytes(b"\x08\x07")
    _one_line_error(ascend_grad("info", tiny), "not an ONNX model")
    assert not (tmp_path / "o.onnx").exists()


def test_bad_output_paths(tmp_path, ascend_grad):
    source = graph_path("silu_mlp.aot.opt")
    _one_line_error(ascend_grad("fuse", source, "-o", tmp_path), "is a directory")
    _one_line_error(ascend_grad("fuse", source, "-o", tmp_path / "no" / "o.onnx"), "cannot write", "no folder")
    copy = tmp_path / "m.onnx"
    shutil.copy(source, copy)  # --verify over itself would compare the fused graph with itself
    _one_line_error(ascend_grad("fuse", copy, "-o", copy, "--verify"), "write OUT to another path")
    assert copy.read_bytes() == Path(source).read_bytes()
    (tmp_path / "file").write_text("")
    _one_line_error(ascend_grad("demo", "-o", tmp_path / "file"), "not a folder")
    _one_line_error(ascend_grad("demo", "-o", tmp_path / "file" / "sub"), "cannot create the output folder")


def test_bench_runs_a_benchmark(ascend_grad):
    done = ascend_grad("bench", "graph_pass", "--sizes", "300")
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and line[2:3].isalpha() and "nodes" not in line]
    assert len(rows) == 3, done.stdout


def test_internal_error_is_one_line(tmp_path, monkeypatch, capsys):
    from ascend_grad import graph_passes

    def broken(model):
        raise RuntimeError("something we did not expect\nsecond line")

    monkeypatch.setattr(graph_passes, "fuse_backward_ops", broken)
    assert cli.main(["fuse", str(graph_path("silu_mlp.aot.opt")), "-o", str(tmp_path / "o.onnx")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "internal error: RuntimeError: something we did not expect" in err[0]


# ---- ascend-grad export (needs PyTorch)

MODULE_FILE = """
import torch

def mlp():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Mish(), torch.nn.Linear(16, 4))

def not_a_module():
    return 3

def untraceable():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x  # data-dependent control flow: torch.export refuses it
    return Branchy()
"""


def test_export_a_module_from_its_factory(tmp_path, ascend_grad):
    """package.module:factory, shapes, --fuse, --verify: the graph is written, holds our ops, and
    matches PyTorch; progress lines go to stderr."""
    pytest.importorskip("torch")
    out = tmp_path / "resblock.onnx"
    done = ascend_grad("export", "ascend_grad.models.modules:ResBlock", "--input", "2,4,8,8", "-o", out, "--fuse",
                       "--verify", "--dynamic-batch")
    assert done.returncode == 0, done.stderr
    assert "GroupNormSwishGrad x1" in done.stdout and "verified 7 outputs against PyTorch" in done.stdout
    assert "tracing the training step" in done.stderr and "translating to ONNX" in done.stderr
    model = onnx.load(out)
    assert [o.name for o in model.graph.output][:2] == ["loss", "grad.conv1.weight"]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param  # --dynamic-batch


def test_export_without_fuse_holds_no_ascend_op_and_a_file_module(tmp_path, ascend_grad):
    pytest.importorskip("torch")
    (tmp_path / "net.py").write_text(MODULE_FILE)
    out = tmp_path / "mlp.onnx"
    done = ascend_grad("export", tmp_path / "net.py:mlp", "--input", "3,8", "-o", out, "--verify")
    assert done.returncode == 0, done.stderr
    assert "ascend.grad nodes: none" in done.stdout
    assert not [n for n in onnx.load(out).graph.node if n.domain == "ascend.grad"]


@pytest.mark.parametrize(("factory", "fragment"), [
    ("no_colon", "give the module as package.module:factory"),
    ("no_such_package_xyz:f", "cannot import no_such_package_xyz"),
    ("ascend_grad.models.modules:NoSuchThing", "has no attribute 'NoSuchThing'"),
    ("NET:not_a_module", "returned a int, not a torch.nn.Module"),
    ("NET:untraceable", "cannot be exported"),
    ("missing.py:f", "missing.py: no such file"),
])
def test_export_bad_modules_are_one_line_errors(tmp_path, factory, fragment, ascend_grad):
    pytest.importorskip("torch")
    (tmp_path / "net.py").write_text(MODULE_FILE)
    factory = factory.replace("NET", str(tmp_path / "net.py"))
    done = ascend_grad("export", factory, "--input", "3,8", "-o", tmp_path / "out.onnx")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("ascend-grad: error:") and fragment in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out.onnx").exists()


def test_export_names_every_untranslatable_op(tmp_path, ascend_grad):
    pytest.importorskip("torch")
    (tmp_path / "net.py").write_text(MODULE_FILE + """
@torch.library.custom_op("cli_test::odd", mutates_args=())
def odd(x: torch.Tensor) -> torch.Tensor:
    return x.flip(0)

odd.register_fake(lambda x: torch.empty_like(x))
odd.register_autograd(lambda ctx, grad: grad.flip(0))

class Odd(torch.nn.Module):
    def forward(self, x):
        return odd(x)

def odd_net():
    return torch.nn.Sequential(torch.nn.Linear(8, 8), Odd())
""")
    done = ascend_grad("export", f"{tmp_path / 'net.py'}:odd_net", "--input", "3,8", "-o", tmp_path / "out.onnx")
    assert done.returncode == 2, done.stderr
    assert "1 op of the training step has no ONNX translation" in done.stderr
    assert "cli_test.odd.default: used by 1 (Odd)" in done.stderr and not (tmp_path / "out.onnx").exists()


def test_fuse_for_ascend_writes_the_model_and_its_plan(tmp_path, ascend_grad):
    out = tmp_path / "fused.onnx"
    done = ascend_grad("fuse", graph_path("resblock.aot.opt"), "-o", out, "--target", "ascend")
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    assert "nodes on the NPU" in done.stdout and "copies" in done.stdout
    model, plan = onnx.load(out), json.loads((tmp_path / "fused.onnx.ascend.json").read_text())
    onnx.checker.check_model(model, full_check=True)
    assert plan["provider_options"] == {"enable_cann_graph": "0"}  # single-operator mode (SPEC)
    assert [p["node"] for p in plan["placement"]] == [n.name for n in model.graph.node]
    assert {p["device"] for p in plan["placement"]} == {"npu", "host"}
    assert all(p["reason"] for p in plan["placement"])
    assert isinstance(plan["host_device_copies"], int) and all({"node", "what", "why"} <= set(r) for r in plan["rewrites"])
    assert [n.op_type for n in model.graph.node].count("GroupNormSwishGrad") == 1


@pytest.mark.parametrize("dtypes", [("float16", "float32"), ("bfloat16", "float16")])
def test_fuse_for_ascend_keeps_a_mixed_dtype_mish_backward(tmp_path, rng, dtypes, ascend_grad):
    """A MishBackward whose inputs differ in dtype is one aclnnMishBackward call (the seed's dtype
    deduction): OUT holds it as IN does, no Cast added, and the plan puts it on the NPU."""
    from ascend_grad.testing import FLOAT_DTYPES, cast_wrapped, random_array

    go, x = (random_array(rng, (2, 5), FLOAT_DTYPES[t]) for t in dtypes)
    model, _ = cast_wrapped("MishBackward", {"gradOutput": go, "self": x}, ["gradInput"])
    onnx.save(model, tmp_path / "in.onnx")
    done = ascend_grad("fuse", tmp_path / "in.onnx", "-o", tmp_path / "out.onnx", "--target", "ascend")
    assert done.returncode == 0, done.stderr
    plan = json.loads((tmp_path / "out.onnx.ascend.json").read_text())
    (mish,) = [p for p in plan["placement"] if p["op_type"] == "MishBackward"]
    assert mish["device"] == "npu" and ", ".join(t.replace("32", "") for t in dtypes) in mish["reason"], mish
    assert not [r for r in plan["rewrites"] if r["node"] == mish["node"]], plan["rewrites"]
    assert [n.op_type for n in onnx.load(tmp_path / "out.onnx").graph.node] == [n.op_type for n in model.graph.node]


def test_fuse_for_ascend_refuses_what_onnxruntime_cann_cannot_load(tmp_path, ascend_grad):
    """onnxruntime-training graphs hold training ops (com.microsoft) that no inference build has."""
    out = tmp_path / "fused.onnx"
    done = ascend_grad("fuse", graph_path("silu_mlp.ort_training"), "-o", out, "--target", "ascend")
    _one_line_error(done, "onnxruntime-cann 1.24.4 cannot load this graph", "training ops")
    assert not out.exists() and not (tmp_path / "fused.onnx.ascend.json").exists()


@pytest.mark.parametrize("graph", ["resblock.aot.fp16", "mish_mlp.export.fp16", "gn_swish.export.dyn"])
def test_fuse_for_ascend_verify(tmp_path, graph, ascend_grad):
    done = ascend_grad("fuse", graph_path(graph), "-o", tmp_path / "out.onnx", "--target", "ascend", "--verify")
    assert done.returncode == 0, done.stderr
    assert "verified" in done.stdout


def test_fuse_an_inference_model(tmp_path, ascend_grad):
    """A forward-only export (TorchScript, constant folding on): its GroupNorm+SiLU becomes one
    GroupNormSwish, and --verify runs both."""
    source = GRAPHS / "collection" / "gn_silu.fwd.ts.fold.o17.static.f32.init.onnx"
    out = tmp_path / "fused.onnx"
    done = ascend_grad("fuse", source, "-o", out, "--verify")
    assert done.returncode == 0, done.stderr
    assert "fused: GroupNormSwish x1; nodes 13 -> 3" in done.stdout and "verified 1 outputs" in done.stdout
    assert [n.op_type for n in onnx.load(out).graph.node] == ["Conv", "GroupNormSwish", "Conv"]
