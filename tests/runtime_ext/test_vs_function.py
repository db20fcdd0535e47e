"""The kernels and the onnxscript function bodies agree on the same inputs (both within SPEC.md's
bound of each other), for every op and dtype combination."""

import itertools
import os

import pytest

from ascend_grad import ops
from ascend_grad.testing import FLOAT_DTYPES, assert_close, group_norm_feeds, random_array, run_kernels, run_onnxruntime

DTYPES = list(FLOAT_DTYPES.values())
PAIRS = list(itertools.product(DTYPES, repeat=2))


def _agree(model, feeds):
    kernel, function = run_kernels(model, feeds), run_onnxruntime(model, feeds)
    assert kernel.keys() == function.keys()
    for name in kernel:
        assert kernel[name].dtype == function[name].dtype, name
        assert_close(kernel[name], function[name].astype("float64"), name)


@pytest.mark.parametrize("T", DTYPES, ids=lambda d: d.name)
def test_silu_backward(rng, T):
    go, x = random_array(rng, (7, 1001), T), random_array(rng, (7, 1001), T, scale=5.0)
    _agree(ops.make_node_model("SiluBackward", {"gradOutput": go, "self": x}), {"gradOutput": go, "self": x})


@pytest.mark.parametrize("dy_type, x_type", PAIRS, ids=lambda d: d.name)
def test_mish_backward(rng, dy_type, x_type):
    go, x = random_array(rng, (7, 1, 131), dy_type), random_array(rng, (3, 131), x_type, scale=5.0)
    feeds = {"gradOutput": go, "self": x}  # broadcast (7, 1, 131) with (3, 131)
    _agree(ops.make_node_model("MishBackward", feeds), feeds)


@pytest.mark.parametrize("T, U", PAIRS, ids=lambda d: d.name)
@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_group_norm_swish_grad(rng, T, U, data_format):
    shape = (2, 48, 9, 11) if data_format == "NCHW" else (2, 9, 11, 48)
    feeds = group_norm_feeds(rng, shape, 12, T, U, data_format)
    _agree(ops.make_node_model("GroupNormSwishGrad", feeds, num_groups=12, data_format=data_format, swish_scale=0.9), feeds)


# NHWC half types keep g in a float scratch of a sample's HxW * C values up to 16 MiB and compute it
# again past that (runtime_ext/cpu/group_norm_swish_grad_kernel.h): 64 * 64 * 1000 and 64 * 64 * 1040
# values lie either side. The emulated aarch64 runs (tests/aarch64) move the size with
# ASCEND_GRAD_SAMPLE_SCRATCH_BYTES, which the library reads: C follows (1 MiB: 40 and 80).
SCRATCH_FLOATS = int(os.environ.get("ASCEND_GRAD_SAMPLE_SCRATCH_BYTES") or 16 << 20) // 4
SCRATCH_C = [(SCRATCH_FLOATS // 4096 - 24) // 8 * 8, (SCRATCH_FLOATS // 4096 + 16) // 8 * 8]


@pytest.mark.parametrize("T", [FLOAT_DTYPES["bfloat16"], FLOAT_DTYPES["float16"]], ids=lambda d: d.name)
@pytest.mark.parametrize("C", SCRATCH_C)
def test_group_norm_swish_grad_channels_last_sample_scratch(rng, T, C):
    assert 0 < 64 * 64 * min(SCRATCH_C) <= SCRATCH_FLOATS < 64 * 64 * max(SCRATCH_C)  # (either side)
    feeds = group_norm_feeds(rng, (1, 64, 64, C), 8, T, FLOAT_DTYPES["float32"], "NHWC")
    _agree(ops.make_node_model("GroupNormSwishGrad", feeds, num_groups=8, data_format="NHWC"), feeds)


@pytest.mark.parametrize("T, U", PAIRS, ids=lambda d: d.name)
@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_group_norm_swish(rng, T, U, data_format):
    shape = (2, 48, 9, 11) if data_format == "NCHW" else (2, 9, 11, 48)
    x = random_array(rng, shape, T, scale=2.0, offset=0.5)
    feeds = {"x": x, "gamma": random_array(rng, 48, U), "beta": random_array(rng, 48, U)}
    _agree(ops.make_node_model("GroupNormSwish", feeds, num_groups=12, data_format=data_format), feeds)
