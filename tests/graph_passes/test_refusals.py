"""What must not fuse: a subgraph that is not exactly the op's math stays as it is (and the graph
still computes what it computed), and the report says why where the gradient was recognised."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ascend_grad.graph_passes import fuse_backward_ops
from ascend_grad.models import graph_path
from ascend_grad.testing import run_kernels, run_onnxruntime

F = TensorProto.FLOAT


def _model(nodes, outputs, inputs=("dy", "x"), initializers=(), opsets=()):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, F, [4, 8]) for n in inputs],
        [helper.make_tensor_value_info(n, F, [4, 8]) for n in outputs],
        list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), *opsets], ir_version=10)
    return onnx.shape_inference.infer_shapes(model)


def silu_backward_graph(one=1.0, swap_sub=False, product_input="x", extra_output=False):
    """dx = dy * s * (1 + x * (1 - s)) as torch writes it, with one thing changed."""
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"]),
        helper.make_node("Sub", ["s", "one"] if swap_sub else ["one", "s"], ["oms"]),
        helper.make_node("Mul", [product_input, "oms"], ["xo"]),
        helper.make_node("Add", ["xo", "one"], ["a"]),
        helper.make_node("Mul", ["s", "a"], ["d"]),
        helper.make_node("Mul", ["dy", "d"], ["dx"]),
    ]
    inputs = ("dy", "x", "y") if product_input == "y" else ("dy", "x")
    return _model(nodes, ["dx", "d"] if extra_output else ["dx"], inputs, [numpy_helper.from_array(np.array(one, np.float32), "one")])


def _feeds(model, rng):
    return {i.name: rng.standard_normal((4, 8)).astype(np.float32) for i in model.graph.input}


def _fused_ops(model):
    return {op: n for op, n in fuse_backward_ops(model)[1].counts.items() if n}


def test_the_unchanged_graph_fuses(rng):
    model = silu_backward_graph()
    fused, report = fuse_backward_ops(model)
    assert report.counts["SiluBackward"] == 1
    feeds = _feeds(model, rng)
    np.testing.assert_allclose(run_kernels(fused, feeds)["dx"], run_onnxruntime(model, feeds)["dx"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "change",
    [{"one": 0.999}, {"swap_sub": True}, {"product_input": "y"}],
    ids=["constant-0.999", "sub-operands-swapped", "two-different-tensors"],
)
def test_not_the_math_is_left_alone(change, rng):
    model = silu_backward_graph(**change)
    fused, report = fuse_backward_ops(model)
    assert report.counts["SiluBackward"] == 0
    assert [n.op_type for n in fused.graph.node] == [n.op_type for n in model.graph.node]
    feeds = _feeds(model, rng)
    np.testing.assert_array_equal(run_onnxruntime(fused, feeds)["dx"], run_onnxruntime(model, feeds)["dx"])


def test_a_float64_gradient_stays(rng):
    """The op set has no float64: the same math in double is recognised, refused, and left as it is."""
    model = silu_backward_graph()
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.elem_type = TensorProto.DOUBLE
    (one,) = model.graph.initializer
    one.CopyFrom(numpy_helper.from_array(np.array(1.0, np.float64), "one"))
    del model.graph.value_info[:]
    model = onnx.shape_inference.infer_shapes(model)
    fused, report = fuse_backward_ops(model)
    assert report.counts["SiluBackward"] == 0
    assert report.refused == {"SiluBackward at x": "dy is DOUBLE: the op set takes float, float16 and bfloat16 only"}
    feeds = {k: v.astype(np.float64) for k, v in _feeds(model, rng).items()}
    np.testing.assert_array_equal(run_onnxruntime(fused, feeds)["dx"], run_onnxruntime(model, feeds)["dx"])


def test_an_intermediate_read_elsewhere_stays_valid(rng):
    """d (s * (1 + x (1 - s))) is also an output: the fusion happens, and d is still computed."""
    model = silu_backward_graph(extra_output=True)
    fused, report = fuse_backward_ops(model)
    assert report.counts["SiluBackward"] == 1
    assert {"Sigmoid", "Sub", "Add"} <= {n.op_type for n in fused.graph.node}
    feeds = _feeds(model, rng)
    before, after = run_onnxruntime(model, feeds), run_kernels(fused, feeds)
    np.testing.assert_array_equal(after["d"], before["d"])
    np.testing.assert_allclose(after["dx"], before["dx"], rtol=1e-5, atol=1e-6)


def _mish_graph(threshold):
    """torch's Mish backward with softplus thresholded at `threshold` (torch: 20)."""
    nodes = [
        helper.make_node("Softplus", ["x"], ["sp0"]),
        helper.make_node("Greater", ["x", "threshold"], ["big"]),
        helper.make_node("Where", ["big", "x", "sp0"], ["sp"]),
        helper.make_node("Tanh", ["sp"], ["t"]),
        helper.make_node("Sigmoid", ["x"], ["s"]),
        helper.make_node("Mul", ["t", "t"], ["tt"]),
        helper.make_node("Sub", ["one", "tt"], ["omt"]),
        helper.make_node("Mul", ["x", "s"], ["xs"]),
        helper.make_node("Mul", ["xs", "omt"], ["m"]),
        helper.make_node("Add", ["t", "m"], ["bracket"]),
        helper.make_node("Mul", ["dy", "bracket"], ["dx"]),
    ]
    constants = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("one", 1.0), ("threshold", threshold))]
    return _model(nodes, ["dx"], initializers=constants)


def test_mish_with_torchs_threshold_fuses_and_another_does_not():
    assert _fused_ops(_mish_graph(20.0)) == {"MishBackward": 1}
    assert _fused_ops(_mish_graph(10.0)) == {}  # tanh(10) is not 1 in float: not the same math


def test_quick_gelu_grad_with_gelus_alpha_stays():
    node = helper.make_node("QuickGeluGrad", ["dy", "x"], ["dx"], domain="com.microsoft", alpha=1.702)
    model = _model([node], ["dx"], opsets=[helper.make_opsetid("com.microsoft", 1)])
    fused, report = fuse_backward_ops(model)
    assert report.counts["SiluBackward"] == 0 and "alpha is 1.702" in report.refused["SiluBackward at x"]
    model.graph.node[0].attribute[0].f = 1.0
    assert _fused_ops(model) == {"SiluBackward": 1}


def _mutated_resblock(change):
    model = onnx.load(graph_path("resblock.aot.opt"))
    for tensor in model.graph.initializer:
        array = numpy_helper.to_array(tensor)
        replacement = change(tensor.name, array)
        if replacement is not None:
            tensor.CopyFrom(numpy_helper.from_array(replacement, tensor.name))
    return model


def test_group_norm_whose_grouping_does_not_match_num_groups_stays():
    """dx's Reshape groups channels 16 x 4 while the forward normalises 32 groups: refused."""
    def regroup(name, array):
        return np.array([2, 16, 4, 64], np.int64) if array.dtype == np.int64 and array.tolist() == [2, 32, 2, 64] else None

    fused, report = fuse_backward_ops(_mutated_resblock(regroup))
    assert report.counts["GroupNormSwishGrad"] == 0
    assert "num_groups" in report.refused["GroupNormSwishGrad at getitem"]


def test_group_norm_whose_statistics_use_another_eps_stays():
    """rstd computed with eps 1e-3 while the forward normalised with 1e-5: not x's statistics."""
    def other_eps(name, array):
        return np.array(1e-3, np.float32) if array.dtype == np.float32 and array.shape == () and np.isclose(array, 1e-5) else None

    fused, report = fuse_backward_ops(_mutated_resblock(other_eps))
    assert report.counts["GroupNormSwishGrad"] == 0
    assert "eps" in report.refused["GroupNormSwishGrad at getitem"]


@pytest.mark.parametrize("change, reason", [
    ("eps", "another eps"),
    ("gamma", "not g * gamma"),
    ("scale", "scale of its own"),
])
def test_onnxruntime_training_group_norm_backward_that_differs_stays(change, reason):
    """onnxruntime-training's GroupNorm backward (LayerNormalizationGrad) fuses only as the math
    says: the forward's eps, the rows' gradient weighted by the same gamma, a unit scale."""
    model = onnx.load(graph_path("resblock.ort_training"))
    graph = model.graph
    (grad,) = [n for n in graph.node if n.op_type == "LayerNormalizationGrad"]
    if change == "eps":
        (attribute,) = [a for a in grad.attribute if a.name == "epsilon"]
        attribute.f = 1e-3
    elif change == "gamma":  # the Mul feeding the rows' gradient reads another per-channel tensor
        (mul,) = [n for n in graph.node if n.name == "/module/norm/Mul_Grad/Mul_0"]
        graph.initializer.append(numpy_helper.from_array(np.full((64, 1, 1), 0.5, np.float32), "other_gamma"))
        mul.input[1] = "other_gamma"
    else:
        graph.initializer.append(numpy_helper.from_array(np.full(128, 2.0, np.float32), "twos"))
        grad.input[2] = "twos"
    _, report = fuse_backward_ops(model)
    assert report.counts["GroupNormSwishGrad"] == 0
    assert any(reason in r for r in report.refused.values()), report.refused
