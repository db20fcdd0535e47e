"""The schemas: onnx.checker and shape inference accept, type and shape graphs that use the ops, and
reject bad nodes with a message that names the op and the values."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.shape_inference import InferenceError

import ascend_grad
from ascend_grad import ops

F, H, B = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16


def _model(op_type, inputs, outputs, **attrs):
    """A graph of one node whose outputs carry no type: inference must supply it."""
    node = helper.make_node(op_type, [n for n, *_ in inputs], outputs, domain=ascend_grad.DOMAIN, name="n0", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_value_info(o, onnx.TypeProto()) for o in outputs if o],
    )
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid(ascend_grad.DOMAIN, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def _inferred(model):
    """The output types and shapes shape inference gives; the typed model must pass the checker."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, check_type=True)
    onnx.checker.check_model(inferred, full_check=True)
    out = {}
    for vi in inferred.graph.output:
        t = vi.type.tensor_type
        out[vi.name] = (t.elem_type, [d.dim_value if d.HasField("dim_value") else d.dim_param or None for d in t.shape.dim])
    return out


def _gn_grad_inputs(T=F, U=F, x=("N", 64, 8, 8), stat=("N", 32), C=64):
    return [("dy", T, x), ("mean", U, stat), ("rstd", U, stat), ("x", T, x), ("gamma", U, [C]), ("beta", U, [C])]


def test_domain_and_version():
    assert (ascend_grad.DOMAIN, ascend_grad.OPSET_VERSION) == ("ascend.grad", 1)
    for op_type in ("SiluBackward", "MishBackward", "GroupNormSwishGrad", "GroupNormSwish"):
        schema = onnx.defs.get_schema(op_type, 1, "ascend.grad")
        assert schema.since_version == 1 and schema.has_type_and_shape_inference_function


@pytest.mark.parametrize("elem_type", [F, H, B])
def test_silu_backward_typed(elem_type):
    model = _model("SiluBackward", [("dy", elem_type, ["N", 7]), ("x", elem_type, [3, None])], ["dx"])
    assert _inferred(model) == {"dx": (elem_type, [3, 7])}


@pytest.mark.parametrize(
    "a, b, out",
    [((H, [2, 1, 5]), (F, [4, 5]), (F, [2, 4, 5])), ((B, ["N", 1]), (B, [1, 9]), (B, ["N", 9])), ((B, []), (H, [3]), (F, [3]))],
)
def test_mish_backward_promotes_and_broadcasts(a, b, out):
    model = _model("MishBackward", [("dy", *a), ("x", *b)], ["dx"])
    assert _inferred(model) == {"dx": out}


@pytest.mark.parametrize("T, U", [(F, F), (H, F), (B, F), (F, H), (B, B)])
def test_group_norm_swish_grad_typed(T, U):
    model = _model("GroupNormSwishGrad", _gn_grad_inputs(T, U), ["dx", "dgamma", "dbeta"], num_groups=32)
    assert _inferred(model) == {"dx": (T, ["N", 64, 8, 8]), "dgamma": (U, [64]), "dbeta": (U, [64])}


def test_group_norm_swish_grad_optional_outputs_and_nhwc():
    inputs = _gn_grad_inputs(x=(2, 5, 5, 12), stat=(8,), C=12)
    model = _model("GroupNormSwishGrad", inputs, ["dx", "", "dbeta"], num_groups=4, data_format="NHWC")
    assert _inferred(model) == {"dx": (F, [2, 5, 5, 12]), "dbeta": (F, [12])}


def test_group_norm_swish_typed():
    model = _model("GroupNormSwish", [("x", H, ["N", 64, 9]), ("g", F, [64]), ("b", F, [64])], ["y", "m", "r"], num_groups=8)
    assert _inferred(model) == {"y": (H, ["N", 64, 9]), "m": (F, ["N", 8]), "r": (F, ["N", 8])}


REJECTED = [
    # (op, inputs, attributes, words the message must hold)
    ("SiluBackward", [("dy", F, [2] * 9), ("x", F, [2] * 9)], {}, ["[SiluBackward]", "rank 0 to 8", "(2, 2, 2, 2, 2, 2, 2, 2, 2)"]),
    ("SiluBackward", [("dy", F, [3, 4]), ("x", F, [3, 5])], {}, ["[SiluBackward]", "same shape", "(3, 4)", "(3, 5)"]),
    ("SiluBackward", [("dy", H, [3]), ("x", F, [3])], {}, ["[SiluBackward]", "float16", "float"]),
    ("SiluBackward", [("dy", TensorProto.INT32, [3]), ("x", TensorProto.INT32, [3])], {}, ["SiluBackward", "int32"]),
    ("MishBackward", [("dy", F, [3, 4]), ("x", F, [5])], {}, ["[MishBackward]", "do not broadcast", "(3, 4)"]),
    ("MishBackward", [("dy", F, [0, 4]), ("x", F, [4])], {}, ["[MishBackward]", "empty", "(0, 4)"]),
    ("GroupNormSwishGrad", _gn_grad_inputs(x=(2, 63, 4, 4), C=63), {"num_groups": 32},
     ["[GroupNormSwishGrad]", "C (63) must be divisible by num_groups (32)"]),
    ("GroupNormSwishGrad", _gn_grad_inputs(x=(64,), C=64), {"num_groups": 32}, ["[GroupNormSwishGrad]", "rank 2 to 8", "(64)"]),
    ("GroupNormSwishGrad", _gn_grad_inputs(), {}, ["[GroupNormSwishGrad]", "num_groups is required"]),
    ("GroupNormSwishGrad", _gn_grad_inputs(), {"num_groups": 0}, ["[GroupNormSwishGrad]", "num_groups must be > 0, got 0"]),
    ("GroupNormSwishGrad", _gn_grad_inputs(C=32), {"num_groups": 32}, ["[GroupNormSwishGrad]", "gamma has 32 elements, C is 64"]),
    ("GroupNormSwishGrad", [*_gn_grad_inputs()[:4], ("gamma", F, [8, 8]), ("beta", F, [64])], {"num_groups": 32},
     ["[GroupNormSwishGrad]", "gamma must be 1-D", "(8, 8)"]),
    ("GroupNormSwishGrad", _gn_grad_inputs(x=(2, 64, 8, 8), stat=(2, 16)), {"num_groups": 32},
     ["[GroupNormSwishGrad]", "mean (2, 16) has 32 elements", "2 * 32 = 64"]),
    ("GroupNormSwishGrad", _gn_grad_inputs(), {"num_groups": 32, "data_format": "NCWH"}, ["[GroupNormSwishGrad]", "'NCWH'"]),
    ("GroupNormSwishGrad", _gn_grad_inputs(), {"num_groups": 32, "dgamma_is_require": 2}, ["dgamma_is_require must be 0 or 1, got 2"]),
    ("GroupNormSwishGrad", [("dy", F, (2, 64, 8, 8)), *_gn_grad_inputs()[1:3], ("x", F, (2, 64, 8, 7)), *_gn_grad_inputs()[4:]],
     {"num_groups": 32}, ["[GroupNormSwishGrad]", "same shape", "(2, 64, 8, 8)", "(2, 64, 8, 7)"]),
    ("GroupNormSwishGrad", _gn_grad_inputs(T=H), {"num_groups": 32} | {}, None),  # accepted: T != U is fine
    ("GroupNormSwishGrad", [*_gn_grad_inputs()[:4], ("gamma", H, [64]), ("beta", F, [64])], {"num_groups": 32},
     ["[GroupNormSwishGrad]", "share one dtype (U)", "gamma float16"]),
    ("GroupNormSwish", [("x", F, (2, 10, 3)), ("g", F, [10]), ("b", F, [10])], {"num_groups": 4},
     ["[GroupNormSwish]", "C (10) must be divisible by num_groups (4)"]),
    ("GroupNormSwish", [("x", F, (2, 12, 3)), ("g", F, [12]), ("b", F, [12])], {"num_groups": 4, "eps": -1.0},
     ["[GroupNormSwish]", "eps must be >= 0, got -1"]),
]


@pytest.mark.parametrize("op_type, inputs, attrs, words", REJECTED, ids=lambda v: None)
@pytest.mark.parametrize("strict", [True, False])
def test_bad_nodes_are_rejected_with_the_op_named(op_type, inputs, attrs, words, strict):
    model = _model(op_type, inputs, ["o0"], **attrs)
    if words is None:
        onnx.shape_inference.infer_shapes(model, strict_mode=strict)
        return
    with pytest.raises((InferenceError, onnx.checker.ValidationError)) as caught:
        onnx.shape_inference.infer_shapes(model, strict_mode=strict, check_type=True)
    for word in words:
        assert word in str(caught.value)


def test_checker_names_the_op_when_num_groups_is_missing():
    model = _model("GroupNormSwishGrad", _gn_grad_inputs(), ["dx"])
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("dx", F, ["N", 64, 8, 8]))
    with pytest.raises(onnx.checker.ValidationError, match="(?s)num_groups.*OpType: GroupNormSwishGrad"):
        onnx.checker.check_model(model)


def test_make_node_model_raises_the_schema_error():
    x = np.zeros((2, 63, 4), np.float32)
    feeds = {"dy": x, "mean": np.zeros((2, 32), np.float32), "rstd": np.zeros((2, 32), np.float32), "x": x,
             "gamma": np.zeros(63, np.float32), "beta": np.zeros(63, np.float32)}
    with pytest.raises(InferenceError, match=r"^\[GroupNormSwishGrad\] node 'GroupNormSwishGrad': C \(63\)"):
        ops.make_node_model("GroupNormSwishGrad", feeds, num_groups=32)
