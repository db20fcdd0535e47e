"""The convolution family: `aten.convolution_backward`, the gradient of every Conv, which torch.onnx
(torch 2.13) cannot export."""

from __future__ import annotations

import torch
from onnxscript import opset18 as op

_TO_END = 2**63 - 1  # a Slice end: up to the end of the axis
_TO_START = -(2**63)  # a Slice end with step -1: down to the start of the axis


def _ints(values):
    return op.Constant(value_ints=list(values))


def _windows(value, offsets, channels):
    """(C, N, H', W') -> (len(offsets) * C, N * H * W): the windows value[:, :, y0 : H' + y1, x0 : W' + x1]
    for each ((y0, x0), (y1, x1)) in offsets (y1, x1 <= 0), one after the other."""
    windows = [
        op.Slice(value, _ints(begin), _ints([e or _TO_END for e in end]), _ints([2, 3])) for begin, end in offsets
    ]
    return op.Reshape(op.Concat(*windows, axis=0), _ints([len(offsets) * channels, -1]))


def _rows(value, channels):
    """(N, C, H, W) -> (C, N * H * W)."""
    return op.Reshape(op.Transpose(value, perm=[1, 0, 2, 3]), _ints([channels, -1]))


def convolution_backward(
    grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    """grad_input, grad_weight, grad_bias of a plain 2-D convolution (stride 1, dilation 1, groups 1).

    grad_weight[o, i, a, b] = sum over n, y, x of grad_output[n, o, y, x] * padded_input[n, i, y + a, x + b]
    is one GEMM over n, y, x: the kh * kw shifted windows of whichever of input and grad_output has
    fewer channels, stacked, against the other (onnxruntime runs the Conv with grad_output as a
    Hout x Wout kernel, the textbook spelling, several times slower). grad_input is a Conv of
    grad_output with the flipped, transposed weight when it has more channels than grad_output (where
    onnxruntime's ConvTranspose is slow), else the ConvTranspose.
    """
    if transposed or groups != 1 or len(stride) != 2 or any(v != 1 for v in [*stride, *dilation]):
        raise NotImplementedError("convolution_backward: only 2-D convolutions with stride 1, dilation 1, groups 1")
    pads = list(padding) * 2
    grad_bias = op.ReduceSum(grad_output, _ints([0, 2, 3]), keepdims=0)
    shape = list(weight.shape) if weight.shape is not None else []
    if len(shape) != 4 or not all(isinstance(d, int) for d in shape):  # sizes unknown: the textbook spelling
        grad_input = op.ConvTranspose(grad_output, weight, pads=pads)
        # dW[o, i] = sum_n x[n, i] (*) dy[n, o]: a convolution over the batch with batch and channels swapped
        swapped = op.Conv(op.Transpose(input, perm=[1, 0, 2, 3]), op.Transpose(grad_output, perm=[1, 0, 2, 3]), pads=pads)
        return grad_input, op.Transpose(swapped, perm=[1, 0, 2, 3]), grad_bias
    c_out, c_in, kh, kw = shape
    ph, pw = padding
    taps = [(a, b) for a in range(kh) for b in range(kw)]

    if c_in <= c_out:  # windows of the padded input, Hout x Wout each: (kh * kw * c_in, K) against (c_out, K)
        padded = op.Transpose(input, perm=[1, 0, 2, 3])
        if ph or pw:
            padded = op.Pad(padded, _ints([0, 0, ph, pw, 0, 0, ph, pw]))
        windows = _windows(padded, [((a, b), (a - kh + 1, b - kw + 1)) for a, b in taps], c_in)
        product = op.Gemm(windows, _rows(grad_output, c_out), transB=1)  # (kh * kw * c_in, c_out)
        grad_weight = op.Transpose(op.Reshape(product, _ints([kh, kw, c_in, c_out])), perm=[3, 2, 0, 1])
    else:  # windows of grad_output over the input's H x W, grad_output[n, o, y + ph - a, x + pw - b]
        # (0 outside): (kh * kw * c_out, K) against (c_in, K)
        qh, qw = max(0, kh - 1 - ph), max(0, kw - 1 - pw)  # zeros needed around grad_output
        framed = op.Transpose(grad_output, perm=[1, 0, 2, 3])
        if qh or qw:
            framed = op.Pad(framed, _ints([0, 0, qh, qw, 0, 0, qh, qw]))
        offsets = [((ph - a + qh, pw - b + qw), (kh - 1 - a - ph - qh, kw - 1 - b - pw - qw)) for a, b in taps]
        product = op.Gemm(_windows(framed, offsets, c_out), _rows(input, c_in), transB=1)  # (kh * kw * c_out, c_in)
        grad_weight = op.Transpose(op.Reshape(product, _ints([kh, kw, c_out, c_in])), perm=[2, 3, 0, 1])

    if c_in > c_out and ph < kh and pw < kw:
        flipped = op.Slice(weight, _ints([-1, -1]), _ints([_TO_START, _TO_START]), _ints([2, 3]), _ints([-1, -1]))
        full = [kh - 1 - ph, kw - 1 - pw] * 2
        grad_input = op.Conv(grad_output, op.Transpose(flipped, perm=[1, 0, 2, 3]), pads=full)
    else:
        grad_input = op.ConvTranspose(grad_output, weight, pads=pads)
    return grad_input, grad_weight, grad_bias


TABLE = {torch.ops.aten.convolution_backward.default: convolution_backward}
