"""The float64 references equal PyTorch autograd in float64 (to 1e-12 relative to max |ref|)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ascend_grad.ops import reference  # noqa: E402

TOL = 1e-12


def _close(ours, theirs, what):
    theirs = theirs.detach().numpy() if hasattr(theirs, "detach") else np.asarray(theirs)
    assert ours.shape == theirs.shape, what
    scale = np.abs(theirs).max() or 1.0
    error = np.abs(ours - theirs).max() / scale
    assert error <= TOL, f"{what}: relative error {error:.3g}"


def _grad(fn, x, dy):
    x = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    (gx,) = torch.autograd.grad(fn(x), x, torch.tensor(dy, dtype=torch.float64))
    return gx


@pytest.mark.parametrize("shape", [(), (17,), (3, 5, 7)], ids=str)
def test_silu_backward(rng, shape):
    x = rng.uniform(-90, 90, shape)
    dy = rng.standard_normal(shape)
    _close(reference.silu_backward(dy, x), _grad(torch.nn.functional.silu, x, dy), "silu")


@pytest.mark.parametrize("shape", [(), (17,), (3, 5, 7)], ids=str)
def test_mish_backward(rng, shape):
    x = np.concatenate([rng.uniform(-90, 90, 64), rng.standard_normal(64) * 3])[: int(np.prod(shape))].reshape(shape)
    dy = rng.standard_normal(shape)
    _close(reference.mish_backward(dy, x), _grad(torch.nn.functional.mish, x, dy), "mish")


def test_mish_backward_broadcasts_like_numpy(rng):
    x, dy = rng.standard_normal((4, 1, 5)) * 3, rng.standard_normal((3, 1))
    ref = reference.mish_backward(dy, x)
    expanded = np.broadcast_to(dy, ref.shape)
    _close(ref, _grad(torch.nn.functional.mish, np.broadcast_to(x, ref.shape).copy(), expanded), "mish")


CASES = [((2, 12, 5, 3), 4), ((3, 35, 9, 7), 7), ((2, 8, 4, 4), 1), ((2, 8, 4, 4), 8), ((4, 12), 3), ((2, 6, 7), 2)]


@pytest.mark.parametrize("swish_scale", [1.0, 1.702])
@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shape, G", CASES, ids=str)
def test_group_norm_swish_and_grad(rng, shape, G, data_format, swish_scale):
    """group_norm then y * sigmoid(scale * y), forward and every gradient, against autograd."""
    C, eps = shape[1], 1e-5
    x = rng.standard_normal(shape) * 3 + 1
    gamma, beta, dy = rng.standard_normal(C), rng.standard_normal(C), rng.standard_normal(shape)

    tx, tg, tb = (torch.tensor(a, requires_grad=True) for a in (x, gamma, beta))
    z = torch.nn.functional.group_norm(tx, G, tg, tb, eps)
    y = z * torch.sigmoid(swish_scale * z)
    dx, dgamma, dbeta = torch.autograd.grad(y, (tx, tg, tb), torch.tensor(dy))
    _, t_mean, t_rstd = torch.ops.aten.native_group_norm(
        torch.tensor(x), torch.tensor(gamma), torch.tensor(beta), shape[0], C, int(np.prod(shape[2:])), G, eps
    )

    def layout(a):  # our references take channels-last arrays for NHWC
        return np.moveaxis(a, 1, -1) if data_format == "NHWC" else a

    def back(a):
        return np.moveaxis(a, -1, 1) if data_format == "NHWC" else a

    our_y, mean, rstd = reference.group_norm_swish(
        layout(x), gamma, beta, G, eps=eps, swish_scale=swish_scale, data_format=data_format
    )
    _close(back(our_y), y, "y")
    _close(mean, t_mean, "mean")
    _close(rstd, t_rstd, "rstd")
    ours = reference.group_norm_swish_grad(
        layout(dy), mean, rstd, layout(x), gamma, beta, G, swish_scale=swish_scale, data_format=data_format
    )
    _close(back(ours[0]), dx, "dx")
    _close(ours[1], dgamma, "dgamma")
    _close(ours[2], dbeta, "dbeta")


def test_group_norm_swish_grad_flags_give_zeros(rng):
    x = rng.standard_normal((2, 4, 3))
    _, mean, rstd = reference.group_norm_swish(x, np.ones(4), np.zeros(4), 2)
    _, dgamma, dbeta = reference.group_norm_swish_grad(
        x, mean, rstd, x, np.ones(4), np.zeros(4), 2, dgamma_is_require=False, dbeta_is_require=False
    )
    assert (dgamma == 0).all() and (dbeta == 0).all() and dgamma.shape == dbeta.shape == (4,)
