"""graph_passes/_shapes.py: the dims a view produces, derived from its input and target rather than
read from the graph's value_info, each case checked against what onnxruntime's Reshape produces
(with its graph optimizations off: they trust value_info, and a stale one changes what they run)."""

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from ascend_grad.graph_passes._shapes import Size, broadcast, same_dims, shape_of, shown
from ascend_grad.testing import run_onnxruntime as _run


def run_onnxruntime(model, feeds):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return _run(model, feeds, options)


def _reshape_model(x_shape, target, allowzero=None, recorded=None):
    """x -> Reshape(x, target) -> y, y's value_info `recorded` (a stale one, say)."""
    attributes = {} if allowzero is None else {"allowzero": allowzero}
    node = helper.make_node("Reshape", ["x", "target"], ["y"], **attributes)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, recorded)],
                              [numpy_helper.from_array(np.array(target, np.int64), "target")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def _y(model):
    return ir.serde.deserialize_model(model).graph.outputs[0]


@pytest.mark.parametrize("x_shape, target, allowzero", [
    ([2, 64, 8, 8], [0, 32, -1], None),  # GroupNorm's regrouping
    ([2, 64, 8, 8], [-1, 32, 0], None),  # 0 copies H (index 2), not N: (32, 32, 8)
    ([2, 64, 8, 8], [0, 0, -1], None),
    ([2, 64, 8, 8], [-1, 128, 0], None),
    ([2, 64, 8, 8], [1, 1, -1], None),  # across samples
    ([2, 64, 8, 8], [2, 32, 128], 1),  # allowzero with no 0: the target as written
    ([2, 0, 8, 8], [2, 0, -1], 1),  # allowzero: 0 is a zero-sized dim... with -1 beside it, invalid
    ([2, 0, 8, 8], [2, 0, 64], 1),
    ([3, 5, 1, 1], [0, 5, -1], None),  # HxW = 1
])
def test_reshape_dims_are_those_onnxruntime_produces(x_shape, target, allowzero):
    model = _reshape_model(x_shape, target, allowzero, recorded=[2, 32, 128])  # (stale for most)
    derived = shape_of(_y(model))
    try:
        ran = run_onnxruntime(model, {"x": np.zeros(x_shape, np.float32)})["y"].shape
    except Exception:  # onnxruntime refuses the target: nothing may be derived from it
        assert derived is None, derived
        return
    assert derived == list(ran), f"{shown(derived)} vs onnxruntime's {ran}"


def test_symbolic_dims_are_carried_and_the_inferred_one_is_a_product():
    y = _y(_reshape_model(["batch", 64, "H", "W"], [0, 32, -1]))
    assert shape_of(y)[:2] == ["batch", 32]
    assert shape_of(y)[2] == Size(2, (("H", 1), ("W", 1)))  # C/G * H * W
    assert shape_of(_y(_reshape_model(["batch", 64, 8, 8], [-1, 32, 128]))) == ["batch", 32, 128]
    assert shape_of(_y(_reshape_model(["batch", 64, 8, 8], [-1, 32, 0]))) == [Size(16, (("batch", 1),)), 32, 8]


def test_targets_computed_from_shapes_and_unnamed_dims():
    """Concat(Shape(x)[:1], [32, -1]), as dynamic-batch exports write it; x's first dim unnamed: it
    still lines up with itself through Shape."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], end=1),
             helper.make_node("Concat", ["s", "rest"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 64, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array([32, -1], np.int64), "rest")])
    model = ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
    x, y = model.graph.inputs[0], model.graph.outputs[0]
    assert shape_of(y)[0] == shape_of(x)[0] and shape_of(y)[1:] == [32, 128]
    assert shown(shape_of(y)) == "(?, 32, 128)"


def test_views_and_broadcasts_follow_their_inputs_not_their_records():
    """Unsqueeze, Squeeze and an elementwise Mul after a Reshape: each derived, the stale records ignored."""
    nodes = [helper.make_node("Reshape", ["x", "target"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "axes"], ["u"]),
             helper.make_node("Mul", ["u", "w"], ["m"]),
             helper.make_node("Squeeze", ["m", "axes"], ["y"])]
    stale = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in (("r", [2, 32, 128]), ("u", [2, 32, 128, 1]),
                                                                                ("m", [2, 32, 128, 1]))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32, 128])],
                              [numpy_helper.from_array(np.array([-1, 32, 0], np.int64), "target"),
                               numpy_helper.from_array(np.array([-1], np.int64), "axes"),
                               numpy_helper.from_array(np.ones((1, 32, 1, 1), np.float32), "w")], value_info=stale)
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    derived = shape_of(ir.serde.deserialize_model(onnx_model).graph.outputs[0])
    assert derived == [32, 32, 8]
    assert list(run_onnxruntime(onnx_model, {"x": np.zeros((2, 64, 8, 8), np.float32)})["y"].shape) == derived


@pytest.mark.parametrize("a, b, expected", [
    ([2, 1, 5], [3, 1], [2, 3, 5]),
    (["n", 8], [8], ["n", 8]),
    (["n", 8], [4, 1], [4, 8]),  # a named dim beside 4 is 4 wherever it runs
    (["n", 8], ["m", 8], [None, 8]),  # either may be 1
    ([2, 8], [3, 8], None),  # does not run
])
def test_broadcast(a, b, expected):
    assert broadcast(a, b) == expected


def test_unknown_dims_equal_nothing():
    assert not same_dims([None, 2], [None, 2]) and same_dims(["n", 2], ["n", 2]) and not same_dims([2], [2, 1])
