"""export_for_ascend on graphs shaped unlike the bundled ones: control flow, initializers that are
also inputs, duplicate node names, a graph input passed through as an output, a Constant that is a
graph output, NHWC with mixed dtypes. Each OUT is a valid model whose outputs on onnxruntime's CPU
EP equal the original's (placement of subgraph nodes is onnxruntime's business: the plan lists
the top-level graph)."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

from ascend_grad import runtime_ext
from ascend_grad.graph_passes.ascend import export_for_ascend
from ascend_grad.testing import run_onnxruntime

V = helper.make_tensor_value_info


def _model(nodes, inputs, outputs, initializers=(), ours=False):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("ascend.grad", 1)] if ours else [])
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def _cases(rng):
    then_g = helper.make_graph([helper.make_node("Add", ["a", "a"], ["t"])], "then", [], [V("t", TP.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Mul", ["a", "a"], ["e"])], "else", [], [V("e", TP.FLOAT, [2])])
    a = rng.standard_normal(2).astype(np.float32)
    yield "if", _model([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
                       [V("c", TP.BOOL, []), V("a", TP.FLOAT, [2])], [V("y", TP.FLOAT, [2])]), {"c": np.array(False), "a": a}
    w = numpy_helper.from_array(rng.standard_normal((2, 2)).astype(np.float32), "w")
    yield "initializer_as_input", _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [V("x", TP.FLOAT, [2, 2]), V("w", TP.FLOAT, [2, 2])],
                                         [V("y", TP.FLOAT, None)], [w]), {"x": rng.standard_normal((2, 2)).astype(np.float32)}
    yield "duplicate_names", _model([helper.make_node("Relu", ["x"], ["a"], name="n"), helper.make_node("Neg", ["a"], ["y"], name="n")],
                                    [V("x", TP.FLOAT, [3])], [V("y", TP.FLOAT, None)]), {"x": a.repeat(2)[:3]}
    yield "passthrough", _model([helper.make_node("Relu", ["x"], ["y"])], [V("x", TP.FLOAT, [2])],
                                [V("y", TP.FLOAT, None), V("x", TP.FLOAT, [2])]), {"x": a}
    yield "constant_output", _model([helper.make_node("Constant", [], ["y"], value=numpy_helper.from_array(a))], [],
                                    [V("y", TP.FLOAT, [2])]), {}
    x = rng.standard_normal((2, 3, 4)).astype(np.float16)
    yield "nhwc_mixed", _model([helper.make_node("GroupNormSwish", ["x", "ga", "be"], ["y", "m", "r"], domain="ascend.grad",
                                                 num_groups=2, data_format="NHWC")],
                               [V("x", TP.FLOAT16, [2, 3, 4]), V("ga", TP.FLOAT, [4]), V("be", TP.FLOAT, [4])],
                               [V("y", TP.FLOAT16, None), V("m", TP.FLOAT, None), V("r", TP.FLOAT, None)], ours=True), {
        "x": x, "ga": rng.standard_normal(4).astype(np.float32), "be": rng.standard_normal(4).astype(np.float32)}


@pytest.mark.parametrize("index", range(6))
def test_unusual_graph(rng, index):
    name, model, feeds = list(_cases(rng))[index]
    out, plan = export_for_ascend(model)
    onnx.checker.check_model(out, full_check=True)
    assert [o.name for o in out.graph.output] == [o.name for o in model.graph.output], name
    assert len({n.name for n in out.graph.node}) == len(out.graph.node), f"{name}: node names not unique"
    assert {p["node"] for p in plan["placement"]} == {n.name for n in out.graph.node}
    options = ort.SessionOptions()
    options.register_custom_ops_library(runtime_ext.library_path())
    got = run_onnxruntime(out, feeds, options)
    # onnxruntime refuses the original with two nodes named alike; OUT has them renamed
    want = {"y": -np.maximum(feeds["x"], 0)} if name == "duplicate_names" else run_onnxruntime(model, feeds, options)
    for key in want:
        np.testing.assert_allclose(got[key].astype(np.float64), want[key].astype(np.float64), rtol=1e-3 if got[key].dtype == np.float16 else 1e-6,
                                   err_msg=f"{name}/{key}")
