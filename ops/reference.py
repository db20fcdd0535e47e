"""float64 numpy references of the op set: the formulas of SPEC.md, nothing else.

Inputs of any float dtype (bfloat16 included, via ml_dtypes) are widened to float64; outputs are
float64. Everything is written in the stable forms (sigmoid and softplus from exp(-|x|)), so
|x| up to 90 gives no NaN where the math is finite, while NaN and Inf inputs go through the formulas
as written (so x = +-inf gives what inf * 0 gives).
"""

from __future__ import annotations

import numpy as np


def _f64(a) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def silu_backward(grad_output, x) -> np.ndarray:
    dy, x = _f64(grad_output), _f64(x)
    if dy.shape != x.shape:
        raise ValueError(f"[SiluBackward] gradOutput {dy.shape} and self {x.shape} must have the same shape")
    with np.errstate(invalid="ignore", over="ignore"):
        s = _sigmoid(x)
        return dy * s * (1.0 + x * (1.0 - s))


def mish_backward(grad_output, x) -> np.ndarray:
    """Broadcasts like numpy; the caller rounds to the promoted dtype if it wants one."""
    dy, x = _f64(grad_output), _f64(x)
    with np.errstate(invalid="ignore", over="ignore"):
        t = np.tanh(_softplus(x))
        return dy * (t + x * _sigmoid(x) * (1.0 - t * t))


def _channels_first(a: np.ndarray, data_format: str) -> np.ndarray:
    if data_format not in ("NCHW", "NHWC"):
        raise ValueError(f"data_format must be 'NCHW' or 'NHWC', got {data_format!r}")
    return np.moveaxis(a, -1, 1) if data_format == "NHWC" else a


def _grouped(x: np.ndarray, num_groups: int, op: str) -> np.ndarray:
    """(N, C, *spatial) -> (N, G, C/G, HxW)."""
    if x.ndim < 2:
        raise ValueError(f"[{op}] x must have rank >= 2, got shape {x.shape}")
    N, C = x.shape[:2]
    if num_groups <= 0 or C % num_groups:
        raise ValueError(f"[{op}] C ({C}) must be divisible by num_groups ({num_groups})")
    HxW = int(np.prod(x.shape[2:]))  # 1 for rank 2
    return x.reshape(N, num_groups, C // num_groups, HxW)


def group_norm_swish(
    x, gamma, beta, num_groups, eps=1e-5, swish_scale=1.0, activate_swish=True, data_format="NCHW"
):
    """-> (y, mean, rstd): y shaped like x, mean and rstd (N, G)."""
    x = _channels_first(_f64(x), data_format)
    xg = _grouped(x, num_groups, "GroupNormSwish")
    gamma_g = _f64(gamma).reshape(1, num_groups, -1, 1)
    beta_g = _f64(beta).reshape(1, num_groups, -1, 1)
    mean = xg.mean(axis=(2, 3), keepdims=True)
    var = ((xg - mean) ** 2).mean(axis=(2, 3), keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    z = (xg - mean) * rstd * gamma_g + beta_g
    with np.errstate(invalid="ignore", over="ignore"):
        y = z * _sigmoid(swish_scale * z) if activate_swish else z
    y = np.moveaxis(y.reshape(x.shape), 1, -1) if data_format == "NHWC" else y.reshape(x.shape)
    N = x.shape[0]
    return y, mean.reshape(N, num_groups), rstd.reshape(N, num_groups)


def _grad_terms(dy, mean, rstd, x, gamma, beta, num_groups, swish_scale=1.0, data_format="NCHW"):
    """GroupNormSwishGrad's per-element terms, grouped (N, G, C/G, HxW): g = dy * d swish(z)/dz (the
    summand of dbeta; g * xhat is dgamma's) and xhat; with gamma and rstd shaped to broadcast, and
    the channels-first shape of x."""
    op = "GroupNormSwishGrad"
    x = _channels_first(_f64(x), data_format)
    dy = _channels_first(_f64(dy), data_format)
    if dy.shape != x.shape:
        raise ValueError(f"[{op}] dy {dy.shape} and x {x.shape} must have the same shape")
    xg = _grouped(x, num_groups, op)
    N = x.shape[0]
    rstd_g = _f64(rstd).reshape(N, num_groups, 1, 1)
    gamma_g = _f64(gamma).reshape(1, num_groups, -1, 1)
    beta_g = _f64(beta).reshape(1, num_groups, -1, 1)
    with np.errstate(invalid="ignore", over="ignore"):
        xhat = (xg - _f64(mean).reshape(N, num_groups, 1, 1)) * rstd_g
        z = xhat * gamma_g + beta_g
        s = _sigmoid(swish_scale * z)
        g = dy.reshape(xg.shape) * s * (1.0 + swish_scale * z * (1.0 - s))
    return g, xhat, gamma_g, rstd_g, x.shape


def group_norm_swish_grad(
    dy,
    mean,
    rstd,
    x,
    gamma,
    beta,
    num_groups,
    swish_scale=1.0,
    dgamma_is_require=True,
    dbeta_is_require=True,
    data_format="NCHW",
):
    """-> (dx, dgamma, dbeta); a gradient whose flag is off is all zeros."""
    g, xhat, gamma_g, rstd_g, shape = _grad_terms(dy, mean, rstd, x, gamma, beta, num_groups, swish_scale, data_format)
    C = shape[1]
    with np.errstate(invalid="ignore", over="ignore"):
        M = xhat.shape[2] * xhat.shape[3]
        c1 = (g * gamma_g).sum(axis=(2, 3), keepdims=True) / M
        c2 = (g * gamma_g * xhat).sum(axis=(2, 3), keepdims=True) / M
        dx = rstd_g * (g * gamma_g - c1 - xhat * c2)
        dgamma = (g * xhat).sum(axis=(0, 3)).reshape(C) if dgamma_is_require else np.zeros(C)
        dbeta = g.sum(axis=(0, 3)).reshape(C) if dbeta_is_require else np.zeros(C)
    dx = dx.reshape(shape)
    if data_format == "NHWC":
        dx = np.moveaxis(dx, 1, -1)
    return dx, dgamma, dbeta
