"""SiluBackward's onnxscript body, in onnxruntime and onnx's ReferenceEvaluator, vs the float64 reference."""

import numpy as np
import pytest

from ascend_grad import ops
from ascend_grad.testing import FLOAT_DTYPES, RUNNERS, assert_close, away_from, random_array

SILU_GRAD_ROOT = -1.2785  # silu'(x) = 0 there: see away_from

SHAPES = [
    (),  # rank 0
    (1,),
    (17,),  # rank 1, not a multiple of 16
    (15, 33),  # neither dim a multiple of 16
    (2, 1, 3, 1, 2, 1, 3, 2),  # rank 8
    (0, 5),  # empty: nothing to do
]

# |x| up to 90, saturating sigmoid both ways, zero, and the non-finite values.
SPECIALS = [90.0, -90.0, 20.0, -20.0, 0.0, np.nan, np.inf, -np.inf]


def _run(runner, dtype, go, x):
    model = ops.make_node_model("SiluBackward", {"gradOutput": go, "self": x})
    out = RUNNERS[runner](model, {"gradOutput": go, "self": x})["gradInput"]
    assert out.dtype == dtype
    return out


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES.values(), ids=FLOAT_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_reference(rng, runner, dtype, shape):
    x = away_from(random_array(rng, shape, dtype, scale=4.0), SILU_GRAD_ROOT)
    go = random_array(rng, shape, dtype)
    assert_close(_run(runner, dtype, go, x), ops.reference.silu_backward(go, x), "gradInput")


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES.values(), ids=FLOAT_DTYPES)
def test_large_and_non_finite_inputs(rng, runner, dtype):
    x = np.array(SPECIALS + list(rng.uniform(-90, 90, 41)), dtype=dtype)
    go = random_array(rng, x.shape, dtype)
    go[-1] = np.nan  # a NaN gradient propagates too
    out = _run(runner, dtype, go, x)
    ref = ops.reference.silu_backward(go, x)
    # The math is finite wherever x and gradOutput are; the formula gives NaN for x = +-inf.
    finite_inputs = np.isfinite(x.astype(np.float64)) & np.isfinite(go.astype(np.float64))
    assert np.isfinite(out[finite_inputs].astype(np.float64)).all()
    assert np.isnan(out[~finite_inputs].astype(np.float64)).all()
    assert_close(out, ref, "gradInput")
