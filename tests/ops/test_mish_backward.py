"""MishBackward's onnxscript bodies vs the float64 reference: dtypes, promotion, broadcasting, edges."""

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

from ascend_grad import ops
from ascend_grad.ops import mish_backward
from ascend_grad.testing import FLOAT_DTYPES, RUNNERS, assert_close, away_from, random_array, run_onnxruntime

F32, F16, BF16 = FLOAT_DTYPES["float32"], FLOAT_DTYPES["float16"], FLOAT_DTYPES["bfloat16"]
SHAPES = [
    (),  # rank 0
    (17,),  # not a multiple of 16
    (15, 33),
    (2, 1, 3, 1, 2, 1, 3, 2),  # rank 8
]
# Pairs one body serves (equal dtypes; a half type with float, either way) and their promotion.
PAIRS = [(F32, F32, F32), (F16, F16, F16), (BF16, BF16, BF16), (F16, F32, F32), (F32, F16, F32),
         (BF16, F32, F32), (F32, BF16, F32), (BF16, F16, F32), (F16, BF16, F32)]


MISH_GRAD_ROOT = -1.1924  # mish'(x) = 0 there: see away_from


def _x(rng, shape, dtype):
    return away_from(random_array(rng, shape, dtype, scale=4.0), MISH_GRAD_ROOT)


def _run(runner, go, x):
    model = ops.make_node_model("MishBackward", {"gradOutput": go, "self": x})
    return RUNNERS[runner](model, {"gradOutput": go, "self": x})["gradInput"]


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES.values(), ids=FLOAT_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_reference(rng, runner, dtype, shape):
    x = _x(rng, shape, dtype)
    go = random_array(rng, shape, dtype)
    out = _run(runner, go, x)
    assert out.dtype == dtype
    assert_close(out, ops.reference.mish_backward(go, x), "gradInput")


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("go_dtype, x_dtype, out_dtype", PAIRS, ids=lambda d: d.name)
def test_dtype_promotion(rng, runner, go_dtype, x_dtype, out_dtype):
    x = _x(rng, (4, 19), x_dtype)
    go = random_array(rng, (4, 19), go_dtype)
    out = _run(runner, go, x)
    assert out.dtype == out_dtype
    assert_close(out, ops.reference.mish_backward(go, x), "gradInput")


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize(
    "go_shape, x_shape",
    [
        ((3, 1, 5), (4, 5)),  # both sides stretch
        ((), (2, 3)),  # scalar gradient
        ((2, 3), ()),  # scalar input
        ((1, 7, 1), (6, 1, 9)),
    ],
    ids=str,
)
def test_broadcasting(rng, runner, go_shape, x_shape):
    go, x = random_array(rng, go_shape, F32), _x(rng, x_shape, F32)
    out = _run(runner, go, x)
    assert out.shape == np.broadcast_shapes(go_shape, x_shape)
    assert_close(out, ops.reference.mish_backward(go, x), "gradInput")


@settings(max_examples=40, deadline=None)
@given(
    shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=5, min_side=1, max_side=5),
    seed=st.integers(0, 2**32 - 1),
)
def test_broadcast_shapes_property(shapes, seed):
    """Shape inference and the onnxruntime result agree with numpy broadcasting for any shapes."""
    rng = np.random.default_rng(seed)
    go_shape, x_shape = shapes.input_shapes
    go, x = random_array(rng, go_shape, F32), _x(rng, x_shape, F32)
    model = ops.make_node_model("MishBackward", {"gradOutput": go, "self": x})
    declared = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert tuple(declared) == shapes.result_shape
    out = run_onnxruntime(model, {"gradOutput": go, "self": x})["gradInput"]
    assert_close(out, ops.reference.mish_backward(go, x), "gradInput")


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES.values(), ids=FLOAT_DTYPES)
def test_large_and_non_finite_inputs(rng, runner, dtype):
    specials = [90.0, -90.0, 30.0, -30.0, 0.0, np.nan, np.inf, -np.inf]
    x = np.array(specials + list(rng.uniform(-90, 90, 41)), dtype=dtype)
    go = random_array(rng, x.shape, dtype)
    out = _run(runner, go, x)
    finite_inputs = np.isfinite(x.astype(np.float64))
    assert np.isfinite(out[finite_inputs].astype(np.float64)).all()  # stable softplus and sigmoid
    assert np.isnan(out[~finite_inputs].astype(np.float64)).all()  # inf * 0 and NaN, as the formula
    assert_close(out, ops.reference.mish_backward(go, x), "gradInput")


def _two_node_model(pairs):
    """A model with one MishBackward node per (gradOutput dtype, self dtype) pair."""
    inputs, nodes, outputs = [], [], []
    for i, (a, b) in enumerate(pairs):
        elem = [onnx.helper.np_dtype_to_tensor_dtype(d) for d in (a, b)]
        inputs += [onnx.helper.make_tensor_value_info(f"go{i}", elem[0], [3]),
                   onnx.helper.make_tensor_value_info(f"x{i}", elem[1], [3])]
        nodes.append(onnx.helper.make_node("MishBackward", [f"go{i}", f"x{i}"], [f"y{i}"], domain="ascend.grad"))
        out_type = onnx.helper.np_dtype_to_tensor_dtype(F32 if a != b else a)
        outputs.append(onnx.helper.make_tensor_value_info(f"y{i}", out_type, [3]))
    graph = onnx.helper.make_graph(nodes, "mish", inputs, outputs)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)], ir_version=10)
    return ops.attach_functions(model)


@pytest.mark.parametrize(
    "pairs, follows",
    [
        ([(F16, F16), (F32, F16)], "gradOutput"),
        ([(F16, F16), (F16, F32)], "self"),
        ([(F16, F32), (F32, BF16), (BF16, F16)], "float"),
    ],
    ids=["follows-gradOutput", "follows-self", "fixed-float"],
)
def test_one_body_for_a_models_pairs(rng, pairs, follows):
    model = _two_node_model(pairs)
    onnx.checker.check_model(model, full_check=True)
    (attached,) = model.functions
    assert list(attached.node) == list(mish_backward.function_proto(follows).node)
    feeds = {}
    for i, (a, b) in enumerate(pairs):
        feeds[f"go{i}"], feeds[f"x{i}"] = random_array(rng, 3, a), _x(rng, 3, b)
    for runner in RUNNERS.values():
        out = runner(model, feeds)
        for i, (a, b) in enumerate(pairs):
            assert out[f"y{i}"].dtype == (a if a == b else F32)
            assert_close(out[f"y{i}"], ops.reference.mish_backward(feeds[f"go{i}"], feeds[f"x{i}"]), f"y{i}")


def test_pairs_no_body_serves_are_refused():
    with pytest.raises(ValueError, match=r"\[MishBackward\] no single ONNX function body.*float16, float"):
        _two_node_model([(F16, F16), (F32, F16), (F16, F32)])

