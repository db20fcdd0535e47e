"""Same inputs, any thread count: bitwise-identical outputs (fixed work split, fixed-order sums)."""

import os

import numpy as np
import onnxruntime as ort
import pytest

from ascend_grad import ops, runtime_ext
from ascend_grad.testing import FLOAT_DTYPES, group_norm_feeds, random_array, run_onnxruntime

F32, F16, BF16 = FLOAT_DTYPES["float32"], FLOAT_DTYPES["float16"], FLOAT_DTYPES["bfloat16"]


def _by_threads(model, feeds):
    results = []
    for threads in (1, 2, 4):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        results.append(run_onnxruntime(model, feeds, runtime_ext.session_options(options)))
    return results


def _assert_bitwise_equal(results):
    first = results[0]
    for other in results[1:]:
        for name, value in first.items():
            assert value.dtype == other[name].dtype
            assert value.view(np.uint8).tobytes() == other[name].view(np.uint8).tobytes(), name


@pytest.mark.parametrize("T, U", [(F32, F32), (F16, F32), (BF16, BF16)], ids=lambda d: d.name)
@pytest.mark.parametrize(
    "shape, G, data_format",
    [((4, 64, 24, 24), 32, "NCHW"), ((3, 40, 17, 9), 8, "NCHW"), ((1, 32, 64, 64), 1, "NCHW"), ((4, 12, 12, 48), 8, "NHWC"),
     ((6, 520, 1, 1), 8, "NCHW")],  # (HxW = 1: the channels-last kernel, C not a multiple of 16)
    ids=str,
)
def test_group_norm_swish_grad_is_bitwise_deterministic(rng, T, U, shape, G, data_format):
    feeds = group_norm_feeds(rng, shape, G, T, U, data_format)
    model = ops.make_node_model("GroupNormSwishGrad", feeds, num_groups=G, data_format=data_format, swish_scale=1.3)
    _assert_bitwise_equal(_by_threads(model, feeds))


@pytest.mark.parametrize("T", [F32, BF16], ids=lambda d: d.name)
def test_group_norm_swish_grad_runs_of_slabs_give_the_bits_of_slabs_alone(rng, T):
    """NCHW tasks take runs of consecutive (n, group) slabs, about four tasks a core
    (group_norm_swish_grad.cc), and float runs each slab's second pass behind the next one's first:
    dx must be what each sample computed alone gives (N = 1: G = 4 slabs, one a task), NaN groups
    (no second pass) at a run's start and in its middle included. HxW = 4371: a sum block of 4096 in
    pieces of 512, then 275."""
    N, G = 4 * len(os.sched_getaffinity(0)), 4  # four slabs a task
    shape = (N, 8, 47, 93)
    x = random_array(rng, shape, np.float64, scale=3.0)
    x[1, 0, 3, 4] = np.nan  # slab 4: a run's first
    x[2, 5, 0, 0] = np.inf  # slab 10: in the middle of a run, after a pipelined slab
    x[2, 4, 46, 92] = -np.inf
    feeds = group_norm_feeds(rng, shape, G, T, F32)
    feeds["x"] = x.astype(T)
    with np.errstate(all="ignore"):
        _, mean, rstd = ops.reference.group_norm_swish(feeds["x"], feeds["gamma"], feeds["beta"], G)
    feeds["mean"], feeds["rstd"] = mean.astype(F32), rstd.astype(F32)
    whole = run_onnxruntime(ops.make_node_model("GroupNormSwishGrad", feeds, ["dx"], num_groups=G), feeds,
                            runtime_ext.session_options())["dx"]
    assert np.isnan(whole[1, :2].astype(F32)).all() and np.isnan(whole[2, 4:6].astype(F32)).all()
    assert np.isfinite(whole[2, 6:].astype(F32)).all() and np.isfinite(whole[3].astype(F32)).all()
    for n in range(N):
        alone = {k: v[n:n + 1] if k in ("dy", "x", "mean", "rstd") else v for k, v in feeds.items()}
        got = run_onnxruntime(ops.make_node_model("GroupNormSwishGrad", alone, ["dx"], num_groups=G), alone,
                              runtime_ext.session_options())["dx"]
        assert got.view(np.uint8).tobytes() == whole[n:n + 1].view(np.uint8).tobytes(), f"sample {n}"


@pytest.mark.parametrize("data_format, shape", [("NCHW", (4, 64, 24, 24)), ("NHWC", (4, 24, 24, 64))])
def test_group_norm_swish_is_bitwise_deterministic(rng, data_format, shape):
    x = random_array(rng, shape, F32, scale=2.0, offset=1.0)
    feeds = {"x": x, "gamma": random_array(rng, 64, F32), "beta": random_array(rng, 64, F32)}
    model = ops.make_node_model("GroupNormSwish", feeds, num_groups=16, data_format=data_format)
    _assert_bitwise_equal(_by_threads(model, feeds))


@pytest.mark.parametrize("op_type", ["SiluBackward", "MishBackward"])
def test_elementwise_is_bitwise_deterministic(rng, op_type):
    go, x = random_array(rng, (5, 70001), F32), random_array(rng, (5, 70001), F32, scale=4.0)
    model = ops.make_node_model(op_type, {"gradOutput": go, "self": x})
    _assert_bitwise_equal(_by_threads(model, {"gradOutput": go, "self": x}))
