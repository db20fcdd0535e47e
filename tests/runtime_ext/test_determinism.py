"""Same inputs, any thread count: bitwise-identical outputs (fixed work split, fixed-order sums)."""

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
    [((4, 64, 24, 24), 32, "NCHW"), ((3, 40, 17, 9), 8, "NCHW"), ((1, 32, 64, 64), 1, "NCHW"), ((4, 12, 12, 48), 8, "NHWC")],
    ids=str,
)
def test_group_norm_swish_grad_is_bitwise_deterministic(rng, T, U, shape, G, data_format):
    feeds = group_norm_feeds(rng, shape, G, T, U, data_format)
    model = ops.make_node_model("GroupNormSwishGrad", feeds, num_groups=G, data_format=data_format, swish_scale=1.3)
    _assert_bitwise_equal(_by_threads(model, feeds))


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
