"""Our ops inside the PyTorch graph, so the exporter emits ascend.grad nodes instead of spelling the
backward out.

SiLU, Mish and GroupNorm followed by SiLU become torch custom ops (namespace `ascend_grad`) whose
autograd formulas call backward custom ops with the aclnn semantics:

    ascend_grad::silu(x)                          backward  ascend_grad::silu_backward(dy, x)
    ascend_grad::mish(x)                          backward  ascend_grad::mish_backward(dy, x)
    ascend_grad::group_norm_swish(x, w, b, G, eps) -> (y, mean, rstd)
                                                  backward  ascend_grad::group_norm_swish_grad(dy, mean, rstd, x, w, b, G, mask)

(substitute.py puts them into the forward graph before autograd runs). Their translations are
the ascend.grad nodes SiluBackward, MishBackward, GroupNormSwish and GroupNormSwishGrad, as are
those of ATen's `silu_backward` and `mish_backward` wherever a graph holds them (float64 keeps the
math: the op set has no float64); the
forward SiLU and Mish stay plain ONNX (x * Sigmoid(x), x * Tanh(softplus(x))), as PyTorch
spells them. Each op also runs eagerly (ATen's own kernels), so the graph they sit in stays a
working PyTorch program.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from onnxscript import opset18 as op
from torch import Tensor

from ascend_grad.ops._schema import FLOAT_TYPES  # the op set's dtypes
from ascend_grad.ops._script import ascend  # importing ascend_grad.ops registers the schemas with onnx

# ---- the torch side


def _sizes(x: Tensor):
    """native_group_norm's N, C, HxW of an (N, C, *spatial) tensor."""
    N, C = x.shape[0], x.shape[1]
    HxW = 1
    for d in x.shape[2:]:
        HxW = HxW * d
    return N, C, HxW


@torch.library.custom_op("ascend_grad::silu", mutates_args=())
def silu(x: Tensor) -> Tensor:
    return F.silu(x)


@torch.library.custom_op("ascend_grad::silu_backward", mutates_args=())
def silu_backward(grad_output: Tensor, x: Tensor) -> Tensor:
    return torch.ops.aten.silu_backward(grad_output, x)


@torch.library.custom_op("ascend_grad::mish", mutates_args=())
def mish(x: Tensor) -> Tensor:
    return F.mish(x)


@torch.library.custom_op("ascend_grad::mish_backward", mutates_args=())
def mish_backward(grad_output: Tensor, x: Tensor) -> Tensor:
    return torch.ops.aten.mish_backward(grad_output, x)


@torch.library.custom_op("ascend_grad::group_norm_swish", mutates_args=())
def group_norm_swish(
    x: Tensor, weight: Tensor | None, bias: Tensor | None, num_groups: int, eps: float
) -> tuple[Tensor, Tensor, Tensor]:
    N, C, HxW = _sizes(x)
    z, mean, rstd = torch.ops.aten.native_group_norm(x, weight, bias, N, C, HxW, num_groups, eps)
    return F.silu(z), mean, rstd


@torch.library.custom_op("ascend_grad::group_norm_swish_grad", mutates_args=())
def group_norm_swish_grad(
    dy: Tensor, mean: Tensor, rstd: Tensor, x: Tensor, weight: Tensor | None, bias: Tensor | None,
    num_groups: int, output_mask: list[bool],
) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, dgamma, dbeta); an output the mask does not ask for is zeros (as GroupNormSwishGrad)."""
    N, C, HxW = _sizes(x)
    shape = (N, num_groups, -1)
    xhat = ((x.reshape(shape) - mean.reshape(N, num_groups, 1)) * rstd.reshape(N, num_groups, 1)).reshape(x.shape)
    per_channel = (1, C) + (1,) * (x.dim() - 2)
    z = xhat
    if weight is not None:
        z = z * weight.reshape(per_channel)
    if bias is not None:
        z = z + bias.reshape(per_channel)
    g = torch.ops.aten.silu_backward(dy, z.to(dy.dtype))
    # all three asked of ATen (an output it skips is an undefined tensor, which a custom op cannot
    # return), with gamma = 1 written out (torch 2.13's kernel fails on gamma None: "tensor does not
    # have a device")
    gamma = weight if weight is not None else x.new_ones(C)
    dx, dgamma, dbeta = torch.ops.aten.native_group_norm_backward(g, x, mean, rstd, gamma, N, C, HxW, num_groups,
                                                                   [True, True, True])
    zeros = x.new_zeros(C) if weight is None else weight.new_zeros(C)
    return (dx if output_mask[0] else torch.zeros_like(x), dgamma if output_mask[1] and weight is not None else zeros,
            dbeta if output_mask[2] else zeros.clone())


@silu.register_fake
@mish.register_fake
def _(x):
    return torch.empty_like(x)


@silu_backward.register_fake
@mish_backward.register_fake
def _(grad_output, x):
    return torch.empty_like(x)


@group_norm_swish.register_fake
def _(x, weight, bias, num_groups, eps):
    stats = x.new_empty((x.shape[0], num_groups))
    return torch.empty_like(x), stats, torch.empty_like(stats)


@group_norm_swish_grad.register_fake
def _(dy, mean, rstd, x, weight, bias, num_groups, output_mask):
    C = x.shape[1]
    params = (x if weight is None else weight).new_empty(C)
    return torch.empty_like(x), params, torch.empty_like(params)


def _save_input(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


silu.register_autograd(lambda ctx, dy: silu_backward(dy, ctx.saved_tensors[0]), setup_context=_save_input)
mish.register_autograd(lambda ctx, dy: mish_backward(dy, ctx.saved_tensors[0]), setup_context=_save_input)


def _group_norm_setup(ctx, inputs, output):
    x, weight, bias, num_groups, _ = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, weight, bias, mean, rstd)
    ctx.num_groups = num_groups


def _group_norm_backward(ctx, dy, _dmean, _drstd):
    x, weight, bias, mean, rstd = ctx.saved_tensors
    mask = [bool(m) for m in ctx.needs_input_grad[:3]]
    dx, dgamma, dbeta = group_norm_swish_grad(dy, mean, rstd, x, weight, bias, ctx.num_groups, mask)
    return dx if mask[0] else None, dgamma if mask[1] else None, dbeta if mask[2] else None, None, None


group_norm_swish.register_autograd(_group_norm_backward, setup_context=_group_norm_setup)


# ---- the ONNX side (translations for torch.onnx's custom_translation_table)


def silu_onnx(x):
    return op.Mul(x, op.Sigmoid(x))


def _in_op_set(*values) -> bool:
    return all(v.dtype in FLOAT_TYPES for v in values)


def silu_backward_onnx(grad_output, x):
    if not _in_op_set(grad_output, x):  # float64: the math, as ATen computes it
        s = op.Sigmoid(x)
        one = op.CastLike(1.0, x)
        return op.Mul(grad_output, op.Mul(s, op.Add(one, op.Mul(x, op.Sub(one, s)))))
    return ascend.SiluBackward(grad_output, x)


def mish_onnx(x):
    """x * tanh(softplus(x)), softplus as PyTorch's decomposition writes it: x above 20, else
    log(1 + exp(x)). onnxruntime's Softplus kernel is 3.7x slower than these five passes (2M
    elements: 4.8 against 1.3 ms, 1 thread, AMD EPYC)."""
    softplus = op.Where(op.Greater(x, op.CastLike(20.0, x)), x, op.Log(op.Add(op.CastLike(1.0, x), op.Exp(x))))
    return op.Mul(x, op.Tanh(softplus))


def mish_backward_onnx(grad_output, x):
    if not _in_op_set(grad_output, x):  # float64: the math, tanh(softplus(x)) + x sigmoid(x) (1 - tanh^2)
        one = op.CastLike(1.0, x)
        # softplus = max(x, 0) + log(1 + exp(-|x|)): no overflow (and onnxruntime has no float64 Softplus)
        t = op.Tanh(op.Add(op.Max(x, op.CastLike(0.0, x)), op.Log(op.Add(one, op.Exp(op.Neg(op.Abs(x)))))))
        return op.Mul(grad_output, op.Add(t, op.Mul(op.Mul(x, op.Sigmoid(x)), op.Sub(one, op.Mul(t, t)))))
    return ascend.MishBackward(grad_output, x)


def _affine_or_default(x, value, fill: float):
    """GroupNorm without affine parameters: gamma = ones(C), beta = zeros(C), in x's dtype."""
    if value is not None:
        return value
    C = op.Shape(x, start=1, end=2)
    return op.CastLike(op.ConstantOfShape(C, value=_float_tensor(fill)), x)


def _float_tensor(value: float):
    import onnx

    return onnx.helper.make_tensor("value", onnx.TensorProto.FLOAT, [1], [value])


def group_norm_swish_onnx(x, weight, bias, num_groups: int, eps: float):
    gamma, beta = _affine_or_default(x, weight, 1.0), _affine_or_default(x, bias, 0.0)
    return ascend.GroupNormSwish(x, gamma, beta, num_groups=num_groups, eps=eps)


def group_norm_swish_grad_onnx(dy, mean, rstd, x, weight, bias, num_groups: int, output_mask):
    gamma, beta = _affine_or_default(x, weight, 1.0), _affine_or_default(x, bias, 0.0)
    return ascend.GroupNormSwishGrad(
        dy, mean, rstd, x, gamma, beta, num_groups=num_groups,
        dgamma_is_require=int(bool(output_mask[1]) and weight is not None), dbeta_is_require=int(bool(output_mask[2])),
    )


TABLE = {
    # ATen's own backward ops, where a graph holds them (a backward-only graph, a direct call)
    torch.ops.aten.silu_backward.default: silu_backward_onnx,
    torch.ops.aten.mish_backward.default: mish_backward_onnx,
    torch.ops.ascend_grad.silu.default: silu_onnx,
    torch.ops.ascend_grad.silu_backward.default: silu_backward_onnx,
    torch.ops.ascend_grad.mish.default: mish_onnx,
    torch.ops.ascend_grad.mish_backward.default: mish_backward_onnx,
    torch.ops.ascend_grad.group_norm_swish.default: group_norm_swish_onnx,
    torch.ops.ascend_grad.group_norm_swish_grad.default: group_norm_swish_grad_onnx,
}
