"""What the function bodies' fast forms must keep: sigmoid/tanh relatively exact on the tails, the
centred x of GroupNorm, and no op that onnxruntime runs slowly (Where, Softplus) at full size.

onnxruntime's CPU EP runs Where about 20x and Softplus about 40x slower than an arithmetic op, so
the bodies use Reciprocal(1 + Exp(-x)) for the sigmoid (overflowing into the right limits instead
of picking a stable branch) and keep any Where on per-channel tensors.
"""

import numpy as np
import onnx
import onnx.inliner
import pytest
from onnx.reference import ReferenceEvaluator

from ascend_grad import ops
from ascend_grad.testing import (
    FLOAT_DTYPES,
    assert_close,
    group_norm_feeds,
    random_array,
    run_onnxruntime,
    run_reference_evaluator,
)

F32, F16 = FLOAT_DTYPES["float32"], FLOAT_DTYPES["float16"]
BODY_RUNNERS = {"onnxruntime": run_onnxruntime, "reference_evaluator": run_reference_evaluator}
SLOW_OPS = {"Where", "Softplus"}


def _slow_op_sizes(model: onnx.ModelProto, feeds) -> dict[str, int]:
    """{output of each slow op in the inlined body: its number of elements}."""
    inlined = onnx.inliner.inline_local_functions(model)
    names = [o for n in inlined.graph.node if n.op_type in SLOW_OPS for o in n.output]
    del inlined.graph.output[:]
    inlined.graph.output.extend(onnx.helper.make_empty_tensor_value_info(name) for name in names)
    with np.errstate(all="ignore"):
        values = ReferenceEvaluator(inlined).run(None, dict(feeds)) if names else []
    return {name: np.asarray(v).size for name, v in zip(names, values)}


def _case(rng, op_type, data_format):
    """(feeds, attributes) of a small node of op_type."""
    if op_type in ("SiluBackward", "MishBackward"):
        return {"gradOutput": random_array(rng, 600, F32), "self": random_array(rng, 600, F32)}, {}
    shape = (2, 16, 6, 6) if data_format == "NCHW" else (2, 6, 6, 16)
    feeds = group_norm_feeds(rng, shape, 4, F32, F32, data_format)
    if op_type == "GroupNormSwish":
        feeds = {k: feeds[k] for k in ("x", "gamma", "beta")}
    return feeds, {"num_groups": 4, "data_format": data_format}


@pytest.mark.parametrize(
    "op_type, data_format",
    [("SiluBackward", None), ("MishBackward", None), ("GroupNormSwishGrad", "NCHW"), ("GroupNormSwishGrad", "NHWC"),
     ("GroupNormSwish", "NCHW"), ("GroupNormSwish", "NHWC")],
)
def test_no_slow_op_at_full_size(rng, op_type, data_format):
    feeds, attrs = _case(rng, op_type, data_format)
    full = max(v.size for v in feeds.values())
    sizes = _slow_op_sizes(ops.make_node_model(op_type, feeds, **attrs), feeds)
    assert all(size < full / 4 for size in sizes.values()), f"{op_type}: slow ops over big tensors: {sizes}"


@pytest.mark.parametrize("runner", BODY_RUNNERS)
@pytest.mark.parametrize("op_type", ["SiluBackward", "MishBackward"])
@pytest.mark.parametrize("low, high", [(-85.0, -15.0), (-15.0, -3.0), (15.0, 85.0)], ids=str)
def test_elementwise_tails_relatively_exact(rng, runner, op_type, low, high):
    """A tensor of tail values only: max |ref| is tiny, so the bound is one relative to each value's
    size (onnxruntime's Sigmoid, absolutely accurate only, is 1e-2 off at x = -12)."""
    x = rng.uniform(low, high, 500).astype(F32)
    go = random_array(rng, x.shape, F32)
    model = ops.make_node_model(op_type, {"gradOutput": go, "self": x})
    got = BODY_RUNNERS[runner](model, {"gradOutput": go, "self": x})["gradInput"]
    ref = {"SiluBackward": ops.reference.silu_backward, "MishBackward": ops.reference.mish_backward}[op_type](go, x)
    if high < 0:  # the gradients are as small as exp(x); compare each with its own size
        rel = np.abs(got.astype(np.float64) - ref) / np.abs(ref)
        assert rel.max() <= 1e-5, f"worst relative error {rel.max():.3g} at x = {x[np.argmax(rel)]}"
    assert_close(got, ref, "gradInput")


@pytest.mark.parametrize("runner", BODY_RUNNERS)
@pytest.mark.parametrize("beta", [-30.0, 30.0])
def test_group_norm_tails_relatively_exact(rng, runner, beta):
    """beta = -30 puts every z far into sigmoid's left tail (y and g ~ exp(-30)), beta = 30 into its right."""
    feeds = group_norm_feeds(rng, (2, 8, 5, 5), 2, F32, F32)
    feeds["gamma"] = rng.uniform(0.5, 1.0, 8).astype(F32)
    feeds["beta"] = np.full(8, beta, F32)
    got = BODY_RUNNERS[runner](ops.make_node_model("GroupNormSwishGrad", feeds, num_groups=2), feeds)
    for name, ref in zip(("dx", "dgamma", "dbeta"), ops.reference.group_norm_swish_grad(*feeds.values(), 2)):
        assert_close(got[name], ref, name)
    forward = {k: feeds[k] for k in ("x", "gamma", "beta")}
    got = BODY_RUNNERS[runner](ops.make_node_model("GroupNormSwish", forward, num_groups=2), forward)
    assert_close(got["y"], ops.reference.group_norm_swish(*forward.values(), 2)[0], "y")


@pytest.mark.parametrize("runner", BODY_RUNNERS)
@pytest.mark.parametrize("T", [F32, F16], ids=lambda d: d.name)
@pytest.mark.parametrize("offset", [300.0, 3000.0])
def test_grad_large_offset(rng, runner, T, offset):
    """|mean| >> std: the body works on x - mean (exact) rather than on x, so nothing cancels."""
    feeds = group_norm_feeds(rng, (2, 16, 6, 6), 4, T, F32)
    feeds["x"] = random_array(rng, feeds["x"].shape, T, scale=offset / 1000, offset=offset)
    _, mean, rstd = ops.reference.group_norm_swish(feeds["x"], feeds["gamma"], feeds["beta"], 4)
    feeds["mean"], feeds["rstd"] = mean.astype(F32), rstd.astype(F32)
    got = BODY_RUNNERS[runner](ops.make_node_model("GroupNormSwishGrad", feeds, num_groups=4), feeds)
    for name, ref in zip(("dx", "dgamma", "dbeta"), ops.reference.group_norm_swish_grad(*feeds.values(), 4)):
        assert_close(got[name], ref, name)


@pytest.mark.parametrize("runner", BODY_RUNNERS)
@pytest.mark.parametrize("op_type", ["GroupNormSwishGrad", "GroupNormSwish"])
@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shape", [(0, 8, 3, 3), (2, 8, 0, 3)], ids=["N=0", "HxW=0"])
@pytest.mark.filterwarnings("ignore:Mean of empty slice:RuntimeWarning")
def test_empty_inputs(rng, runner, op_type, data_format, shape):
    """Nothing to normalise: empty dx / y; dgamma and dbeta are sums over nothing, 0 (even where the
    statistics of an empty group are NaN); mean and rstd of an empty group are NaN."""
    if data_format == "NHWC":
        shape = (shape[0], *shape[2:], shape[1])
    with np.errstate(all="ignore"):  # the statistics of empty groups
        feeds = group_norm_feeds(rng, shape, 2, F32, F32, data_format)
        if op_type == "GroupNormSwish":
            feeds = {k: feeds[k] for k in ("x", "gamma", "beta")}
            refs = ops.reference.group_norm_swish(*feeds.values(), 2, data_format=data_format)
            names = ("y", "mean", "rstd")
        else:
            refs = ops.reference.group_norm_swish_grad(*feeds.values(), 2, data_format=data_format)
            names = ("dx", "dgamma", "dbeta")
    got = BODY_RUNNERS[runner](ops.make_node_model(op_type, feeds, num_groups=2, data_format=data_format), feeds)
    for name, ref in zip(names, refs):
        assert got[name].shape == ref.shape, name
        assert_close(got[name], ref, name)
