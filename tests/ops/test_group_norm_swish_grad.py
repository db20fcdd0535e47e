"""GroupNormSwishGrad's onnxscript body vs the float64 reference: layouts, T != U, flags, edges."""

import itertools

import numpy as np
import pytest

from ascend_grad import ops
from ascend_grad.testing import FLOAT_DTYPES, RUNNERS, assert_close, group_norm_feeds

F32, F16, BF16 = FLOAT_DTYPES["float32"], FLOAT_DTYPES["float16"], FLOAT_DTYPES["bfloat16"]
CASES = [  # (N, C, *spatial) in NCHW terms, num_groups
    ((2, 12, 5, 3), 4),
    ((3, 35, 9, 7), 7),  # C/G = 5, HxW = 63: nothing a multiple of 16
    ((2, 8, 4, 4), 1),  # G == 1
    ((2, 8, 4, 4), 8),  # G == C
    ((4, 12), 3),  # rank 2: HxW == 1 (M = 4; at M = 2 dx is O(eps) by cancellation, see docs/ops.md, Accuracy)
    ((2, 8, 1, 1), 8),  # HxW == 1 and G == C: each group is one element
    ((2, 6, 7), 2),  # rank 3
    ((2, 4, 1, 2, 1, 3, 1, 2), 2),  # rank 8
    ((1, 64, 8, 8), 32),
    # HxW = 4371: the kernel's float sums flushed after 4096 values; NG = 32: runs of slabs (a
    # slab's second pass behind the next one's first) on a machine of up to 4 cores
    ((8, 8, 47, 93), 4),
]
# (T, U): activations and parameters in the same or in different precisions.
TU = [(F32, F32), (F16, F32), (BF16, BF16)]


def _layout(shape, data_format):
    return shape if data_format == "NCHW" else (shape[0], *shape[2:], shape[1])


def _check(runner, feeds, num_groups, outputs=("dx", "dgamma", "dbeta"), **attrs):
    model = ops.make_node_model("GroupNormSwishGrad", feeds, list(outputs), num_groups=num_groups, **attrs)
    got = RUNNERS[runner](model, feeds)
    flags = {k: bool(attrs.get(k, 1)) for k in ("dgamma_is_require", "dbeta_is_require")}
    ref = ops.reference.group_norm_swish_grad(
        *feeds.values(), num_groups, swish_scale=attrs.get("swish_scale", 1.0),
        data_format=attrs.get("data_format", "NCHW"), **flags,
    )
    for name, expected, dtype in zip(("dx", "dgamma", "dbeta"), ref, (feeds["x"].dtype, *[feeds["gamma"].dtype] * 2)):
        if name in outputs:
            assert got[name].dtype == dtype, name
            assert_close(got[name], expected, name)
    return got


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("T, U", TU, ids=lambda d: d.name)
@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shape, num_groups", CASES, ids=str)
def test_matches_reference(rng, runner, T, U, data_format, shape, num_groups):
    feeds = group_norm_feeds(rng, _layout(shape, data_format), num_groups, T, U, data_format)
    _check(runner, feeds, num_groups, data_format=data_format, swish_scale=1.0)


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("T, U", list(itertools.product(FLOAT_DTYPES.values(), repeat=2)), ids=lambda d: d.name)
def test_every_dtype_combination(rng, runner, T, U):
    feeds = group_norm_feeds(rng, (2, 12, 3, 5), 3, T, U)
    _check(runner, feeds, 3, swish_scale=0.8)


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("swish_scale", [1.0, 1.702, -0.5, 0.0])  # 0: z * 1/2, a linear "swish"
def test_swish_scale(rng, runner, swish_scale):
    feeds = group_norm_feeds(rng, (2, 16, 6, 6), 4, F32, F32)
    _check(runner, feeds, 4, swish_scale=swish_scale)


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("T", FLOAT_DTYPES.values(), ids=FLOAT_DTYPES)
def test_large_inputs_stay_finite(rng, runner, T):
    """|x| up to 90 and gamma up to 40: z reaches the hundreds, sigmoid must not overflow."""
    feeds = group_norm_feeds(rng, (2, 8, 5, 5), 2, T, F32)
    feeds["x"] = rng.uniform(-90, 90, feeds["x"].shape).astype(T)
    feeds["gamma"] = rng.uniform(-40, 40, 8).astype(F32)
    _, mean, rstd = ops.reference.group_norm_swish(feeds["x"], feeds["gamma"], feeds["beta"], 2)
    feeds["mean"], feeds["rstd"] = mean.astype(F32), rstd.astype(F32)
    got = _check(runner, feeds, 2, swish_scale=1.0)
    for name, value in got.items():
        assert np.isfinite(value.astype(np.float64)).all(), name


@pytest.mark.parametrize("runner", RUNNERS)
def test_nan_propagates_through_its_group(rng, runner):
    feeds = group_norm_feeds(rng, (2, 8, 3, 3), 2, F32, F32)
    feeds["x"][1, 5, 2, 0] = np.nan  # n = 1, channel 5 is in group 1
    got = _check(runner, feeds, 2)  # NaN positions are checked against the reference
    assert np.isnan(got["dx"][1, 4:]).all() and np.isfinite(got["dx"][0]).all() and np.isfinite(got["dx"][1, :4]).all()
    assert np.isnan(got["dgamma"][5]) and np.isfinite(np.delete(got["dgamma"], 5)).all()


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize(
    "outputs, attrs",
    [
        (("dx", "dgamma", "dbeta"), {"dgamma_is_require": 0}),
        (("dx", "dgamma", "dbeta"), {"dbeta_is_require": 0}),
        (("dx", "dgamma", "dbeta"), {"dgamma_is_require": 0, "dbeta_is_require": 0}),
        (("dx", "", ""), {}),  # both parameter gradients left out
        (("dx", "", "dbeta"), {}),
        (("dx", "dgamma", ""), {"dbeta_is_require": 0}),
    ],
    ids=["no-dgamma", "no-dbeta", "neither", "dx-only", "skip-dgamma", "skip-dbeta-flag-off"],
)
def test_flags_and_omitted_outputs(rng, runner, outputs, attrs):
    feeds = group_norm_feeds(rng, (2, 12, 4, 4), 4, F16, F32)
    feeds["x"][0, 0, 0, 0] = np.nan  # a requested output whose flag is 0 is zeros, even then
    got = _check(runner, feeds, 4, outputs, **attrs)
    assert set(got) == {o for o in outputs if o}
    for name in ("dgamma", "dbeta"):
        if name in got and not attrs.get(f"{name}_is_require", 1):
            assert (got[name] == 0).all(), name


@pytest.mark.parametrize("runner", RUNNERS)
def test_empty_batch(rng, runner):
    """N == 0: dx is empty, the parameter gradients are sums over nothing."""
    feeds = group_norm_feeds(rng, (0, 8, 3, 3), 2, F32, F32)
    got = _check(runner, feeds, 2)
    assert got["dx"].shape == (0, 8, 3, 3) and (got["dgamma"] == 0).all() and (got["dbeta"] == 0).all()
