"""attach_functions and make_node_model: bodies stamped with the model's opset, idempotent, found in
subgraphs, runnable in onnxruntime and the ReferenceEvaluator at every supported opset."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ascend_grad import ops
from ascend_grad.ops._models import BODIES
from ascend_grad.testing import RUNNERS, assert_close, group_norm_feeds, random_array

F32 = np.dtype(np.float32)


def _silu_graph_model(onnx_opset, nodes=None):
    nodes = nodes or [helper.make_node("SiluBackward", ["dy", "x"], ["dx"], domain="ascend.grad")]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [5]) for n in ("dy", "x")],
        [helper.make_tensor_value_info("dx", TensorProto.FLOAT, [5])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", onnx_opset)], ir_version=10)


@pytest.mark.parametrize("onnx_opset", [15, 17, 18, 19, 21, 23])
@pytest.mark.parametrize("runner", RUNNERS)
def test_every_op_runs_at_every_supported_opset(rng, runner, onnx_opset):
    """The bodies use only ops whose meaning is the same from opset 15 on, so stamping is exact."""
    fmt = {"data_format": "NHWC" if onnx_opset % 2 else "NCHW"}  # both layouts across the opsets
    shape = (2, 3, 3, 8) if fmt["data_format"] == "NHWC" else (2, 8, 3, 3)
    feeds = group_norm_feeds(rng, shape, 4, F32, F32, fmt["data_format"])
    model = ops.make_node_model("GroupNormSwishGrad", feeds, onnx_opset=onnx_opset, num_groups=4, **fmt)
    onnx.checker.check_model(model, full_check=True)
    got = RUNNERS[runner](model, feeds)
    for name, ref in zip(("dx", "dgamma", "dbeta"), ops.reference.group_norm_swish_grad(*feeds.values(), 4, **fmt)):
        assert_close(got[name], ref, name)

    x, gamma, beta = feeds["x"], feeds["gamma"], feeds["beta"]
    model = ops.make_node_model("GroupNormSwish", {"x": x, "gamma": gamma, "beta": beta}, onnx_opset=onnx_opset, num_groups=4, **fmt)
    onnx.checker.check_model(model, full_check=True)
    got = RUNNERS[runner](model, {"x": x, "gamma": gamma, "beta": beta})
    assert_close(got["y"], ops.reference.group_norm_swish(x, gamma, beta, 4, **fmt)[0], "y")

    for op_type, reference in (("SiluBackward", ops.reference.silu_backward), ("MishBackward", ops.reference.mish_backward)):
        go, xs = random_array(rng, (4, 9), F32), random_array(rng, (4, 9), F32, scale=3.0, offset=1.0)
        model = ops.make_node_model(op_type, {"gradOutput": go, "self": xs}, onnx_opset=onnx_opset)
        onnx.checker.check_model(model, full_check=True)
        assert_close(RUNNERS[runner](model, {"gradOutput": go, "self": xs})["gradInput"], reference(go, xs), op_type)


def test_bodies_import_the_models_opset():
    model = ops.attach_functions(_silu_graph_model(21))
    (function,) = model.functions
    assert [(o.domain, o.version) for o in function.opset_import] == [("", 21)]
    assert ("ascend.grad", 1) in [(o.domain, o.version) for o in model.opset_import]


def test_attaching_twice_changes_nothing():
    once = ops.attach_functions(_silu_graph_model(18))
    twice = ops.attach_functions(onnx.ModelProto.FromString(once.SerializeToString()))
    assert once.SerializeToString() == twice.SerializeToString()


def test_defaults_are_written_on_the_node():
    node = helper.make_node("GroupNormSwishGrad", ["dy", "m", "r", "x", "g", "b"], ["dx"], domain="ascend.grad", num_groups=2)
    model = _silu_graph_model(18, [node])
    ops.attach_functions(model)
    attrs = {a.name: helper.get_attribute_value(a) for a in model.graph.node[0].attribute}
    assert attrs == {"num_groups": 2, "swish_scale": 1.0, "dgamma_is_require": 1, "dbeta_is_require": 1, "data_format": b"NCHW"}


def test_model_without_our_ops_is_untouched():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    before = model.SerializeToString()
    assert ops.attach_functions(model).SerializeToString() == before


def test_other_functions_are_kept_and_nodes_in_subgraphs_found(rng):
    """A SiluBackward inside an If branch gets its body; an unrelated model function survives."""
    inner = helper.make_node("SiluBackward", ["dy", "x"], ["dx_then"], domain="ascend.grad")
    then_branch = helper.make_graph([inner], "then", [], [helper.make_tensor_value_info("dx_then", TensorProto.FLOAT, [5])])
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["dy"], ["dx_else"])], "else", [], [helper.make_tensor_value_info("dx_else", TensorProto.FLOAT, [5])]
    )
    nodes = [
        helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", TensorProto.BOOL, [], [True])),
        helper.make_node("If", ["c"], ["dx"], then_branch=then_branch, else_branch=else_branch),
    ]
    model = _silu_graph_model(18, nodes)
    other = helper.make_function("my.domain", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                                 [helper.make_opsetid("", 18)])
    model.functions.append(other)
    ops.attach_functions(model)
    assert sorted((f.domain, f.name) for f in model.functions) == [("ascend.grad", "SiluBackward"), ("my.domain", "Twice")]
    onnx.checker.check_model(model, full_check=True)
    dy, x = random_array(rng, 5, F32), random_array(rng, 5, F32, scale=3.0, offset=1.0)
    for runner in RUNNERS.values():
        assert_close(runner(model, {"dy": dy, "x": x})["dx"], ops.reference.silu_backward(dy, x))


def test_old_opsets_are_refused_with_the_op_named():
    with pytest.raises(ValueError, match=r"\[SiluBackward\] the function body needs ai.onnx opset >= 15, the model imports 14"):
        ops.attach_functions(_silu_graph_model(14))


def test_every_op_has_one_flat_body():
    """No body calls another function: runtimes such as the ReferenceEvaluator cannot run that."""
    assert set(BODIES) == {"SiluBackward", "MishBackward", "GroupNormSwishGrad", "GroupNormSwish"}
    for name, function_proto in BODIES.items():
        proto = function_proto()
        assert (proto.domain, proto.name) == ("ascend.grad", name)
        assert all(node.domain == "" for node in proto.node)
        assert [(o.domain, o.version) for o in proto.opset_import] == [("", 18)]
