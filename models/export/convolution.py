"""The convolution family: `aten.convolution_backward`, the gradient of every Conv and ConvTranspose
(1-D, 2-D, 3-D; any stride, padding, dilation, groups), which torch.onnx (torch 2.13) cannot export.

ATen's convolution, per spatial axis with kernel k, stride s, padding p, dilation d:

    y[n, o, Y] = sum over the i of o's group and the taps a of  x[n, i, s*Y + d*a - p] * w[o, i, a]

so S_out = (S + 2p - d(k - 1) - 1) // s + 1 (input rows past the last window get no gradient). A
transposed convolution is the adjoint of that map: its grad_input is that Conv of grad_output, and
its grad_weight is the plain convolution's with input and grad_output swapped.

onnxruntime has no weight-gradient kernel, so the taps' windows are materialised (Slice) and GEMMs
sum over K = N * S. How, per case, was chosen by timing the alternatives in onnxruntime 1.32 on an
AMD EPYC (Zen 5) core, the weight a graph input (numbers in each function's docstring):
- stride 1 with C_out < C_in, or C_out == C_in on images of 256 positions or fewer, or depthwise:
  both gradients from one set of windows of grad_output (_gradients_from_output_windows);
- otherwise grad_weight from the windows of the input (_weight_gradient; 2-D strided windows from
  the input's SpaceToDepth phases), and grad_input a Conv with the flipped weight (stride 1,
  C_in >= C_out) or the ConvTranspose (_input_gradient).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

import torch
from onnx_ir import DataType
from onnxscript import opset18 as op

_TO_END = 2**63 - 1  # a Slice end: up to the end of the axis
_TO_START = -(2**63)  # a Slice end with step -1: down to the start of the axis
# onnxruntime's CPU kernels for Conv, MatMul, Gemm have no bfloat16, and its float16 ones sum in
# float16 (a K = N * H * W reduction would lose the 1e-3 bound): both are computed in float32.
_IN_FLOAT32 = {DataType.FLOAT16, DataType.BFLOAT16}


def _ints(values):
    return op.Constant(value_ints=[int(v) for v in values])


def _sizes(value) -> list[int | None]:
    """value's dimensions, None where symbolic."""
    return [d if isinstance(d, int) else None for d in value.shape]


@dataclass(frozen=True)
class _Geometry:
    """A convolution's static description; per spatial axis: kernel, stride, padding, dilation."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int

    @property
    def rank(self) -> int:
        return len(self.kernel)

    @property
    def spatial(self) -> list[int]:
        return list(range(2, 2 + self.rank))

    @property
    def taps(self) -> list[tuple[int, ...]]:
        """The kernel positions, row-major (the order of a weight's trailing axes)."""
        return list(product(*(range(k) for k in self.kernel)))

    def conv_attributes(self) -> dict:
        return {"strides": list(self.stride), "dilations": list(self.dilation), "group": self.groups}


def convolution_backward(
    grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    """grad_input, grad_weight, grad_bias of `convolution(input, weight, bias, stride, padding,
    dilation, transposed, output_padding, groups)`. An output whose output_mask entry is False is
    not computed; torch.onnx needs a value in its place (None fails in the exporter), so it gets a
    constant that nothing reads, which the exporter's optimizer and onnxruntime drop."""
    dtype = input.dtype
    if dtype in _IN_FLOAT32:
        grad_output, input, weight = (_as_float32(v) for v in (grad_output, input, weight))
    elif dtype != DataType.FLOAT:
        raise NotImplementedError(f"convolution_backward: dtype {dtype} (onnxruntime's CPU Conv takes float32, float16)")
    if not all(isinstance(v, int) for v in weight.shape) or len(weight.shape) not in (3, 4, 5):
        raise NotImplementedError(f"convolution_backward: a weight of shape {weight.shape} (1-D to 3-D, static sizes)")
    geometry = _Geometry(tuple(weight.shape[2:]), tuple(stride), tuple(padding), tuple(dilation), groups)
    want_input, want_weight, want_bias = output_mask
    grad_input = grad_weight = grad_bias = None
    if transposed:  # the adjoint: the plain convolution's formulas with input and grad_output swapped
        if want_input:
            grad_input = _transposed_input_gradient(grad_output, weight, geometry, output_padding)
        if want_weight:
            grad_weight = _weight_gradient(input, grad_output, geometry)
    elif want_input and want_weight and _windows_of_grad_output_pay(grad_output, input, geometry):
        grad_input, grad_weight = _gradients_from_output_windows(grad_output, input, weight, geometry)
    else:
        if want_input:
            grad_input = _input_gradient(grad_output, weight, input, geometry)
        if want_weight:
            grad_weight = _weight_gradient(grad_output, input, geometry)
    if want_bias:
        grad_bias = op.ReduceSum(grad_output, _ints([0, *geometry.spatial]), keepdims=0)
    return tuple(
        op.Constant(value_float=0.0) if v is None else op.Cast(v, to=dtype) if dtype in _IN_FLOAT32 else v
        for v in (grad_input, grad_weight, grad_bias)
    )


def _as_float32(value):
    cast = op.Cast(value, to=DataType.FLOAT)
    cast.shape = value.shape  # the sizes the plan reads
    return cast


# ---- windows


def _windows(value, starts, extent, steps, axis: int, pads=None, axes=None):
    """value (padded by `pads`, ONNX Pad order, when given) sliced on `axes` (default: the trailing
    len(steps)) from each of `starts` (one list per tap) over `extent` with `steps`, the slices
    stacked on a new axis `axis`."""
    slices = _slices(value, starts, extent, steps, pads, axes)
    return op.Concat(*[op.Unsqueeze(s, _ints([axis])) for s in slices], axis=axis)


def _slices(value, starts, extent, steps, pads=None, axes=None):
    """The windows of _windows, one value each."""
    if pads is not None and any(pads):
        value = op.Pad(value, _ints(pads))
    axes = _ints(range(-len(steps), 0) if axes is None else axes)
    step = _ints(steps)
    slices = []
    for start in starts:
        stop = [b + e for b, e in zip(start, extent)] if isinstance(extent, list) else op.Add(_ints(start), extent)
        stop = _ints(stop) if isinstance(stop, list) else stop
        slices.append(op.Slice(value, _ints(start), stop, axes, step))
    return slices


def _channels_first(value):
    """(N, C, *S) -> (C, N, *S)."""
    return op.Transpose(value, perm=[1, 0, *range(2, len(value.shape))])


def _gemm_over_k(rows, m: int, columns, p: int, shape):
    """rows (g, m, K) x columns (g, p, K) summed over K -> (g, m, p), reshaped to `shape`. The operand
    with fewer rows is the one transposed: MLAS packs that one, and packing the (K, 288) windows of
    a 32-channel conv cost more than the product (4.5 ms against 2.8 ms for (8, 32, 64, 64)). A
    single row goes first whatever the other's size: MLAS runs that as a GEMV (depthwise, (64, 1, K)
    against (64, 9, K) with K = 8192: 0.23 ms, against 1.29 ms the other way round)."""
    if m == 1 or (m >= p and p != 1):
        product_ = op.MatMul(rows, op.Transpose(columns, perm=[0, 2, 1]))
    else:
        product_ = op.Transpose(op.MatMul(columns, op.Transpose(rows, perm=[0, 2, 1])), perm=[0, 2, 1])
    return op.Reshape(product_, _ints(shape))


# ---- grad_weight from windows of the input


def _weight_gradient(grad_output, input, geometry: _Geometry):
    """grad_weight[o, i, a] = sum over n, Y of grad_output[n, o, Y] * padded_input[n, G(o) + i, s*Y + d*a]
    (G(o): the first input channel of o's group): (C_out, C_in / groups, *kernel), from the windows
    of the input, one per tap, each (C_in, K) with K = N * S_out, against grad_output as (C_out, K).
    With 16 or more input channels per group, one GEMM per tap and window (conv 32->32 k3 p1
    (8, 32, 64, 64): 10.3 -> 8.4 ms, the Concat of 38 MB of windows gone); with fewer, the windows
    concatenated and one GEMM (a conv's first layer, 3->32 k3 s2 (8, 3, 64, 64): 0.20 ms, 0.58 ms
    with nine GEMMs of 3 rows)."""
    g, c_out, c_in = geometry.groups, grad_output.shape[1], input.shape[1]
    extent = _extent(grad_output, geometry)
    sizes = _sizes(input)[2:]
    if isinstance(extent, list) and all(v is not None for v in sizes):  # pad the end only as far as the last window reaches
        end = [max(0, d * (k - 1) + e - n - p) for k, d, e, n, p in
               zip(geometry.kernel, geometry.dilation, extent, sizes, geometry.padding)]
    else:
        end = list(geometry.padding)
    pads = [0, 0, *geometry.padding, 0, 0, *end]
    stride = geometry.stride
    if geometry.rank == 2 and stride[0] == stride[1] > 1 and isinstance(extent, list) and all(v is not None for v in sizes):
        slices = _phase_windows(_channels_first(input), pads, sizes, _sizes(grad_output)[2:], geometry)
    else:
        starts = [[d * a for d, a in zip(geometry.dilation, tap)] for tap in geometry.taps]
        slices = _slices(_channels_first(input), starts, extent, stride, pads)
    rows = op.Reshape(_channels_first(grad_output), _ints([g, c_out // g, -1]))
    if c_in // g >= 16:  # one GEMM per tap, against each window as sliced: no Concat of the windows
        products = [_gemm_over_k(rows, c_out // g, op.Reshape(w, _ints([g, c_in // g, -1])), c_in // g, [g, c_out // g, c_in // g, 1])
                    for w in slices]
        return op.Reshape(op.Concat(*products, axis=3), _ints([c_out, c_in // g, *geometry.kernel]))
    taps = len(geometry.taps)
    windows = op.Concat(*[op.Unsqueeze(w, _ints([1])) for w in slices], axis=1)
    windows = op.Reshape(windows, _ints([g, c_in // g * taps, -1]))
    return _gemm_over_k(rows, c_out // g, windows, c_in // g * taps, [c_out, c_in // g, *geometry.kernel])


def _phase_windows(value, pads, sizes, out_sizes, geometry: _Geometry):
    """The strided windows of a 2-D value (C, N, H, W) with stride s on both axes, taken from its
    s * s phases (SpaceToDepth of the padded value, rounded up to multiples of s), where each window
    is a slice with step 1: rows copied whole instead of one float at a time (conv 128->128 k3 s2
    p1 (2, 128, 32, 32): the 9 windows take 0.25 ms instead of 0.44)."""
    s = geometry.stride[0]
    padded = [n + pads[2 + axis] + pads[6 + axis] for axis, n in enumerate(sizes)]
    pads = [*pads[:6], *[e + (-h) % s for e, h in zip(pads[6:], padded)]]
    phases = op.SpaceToDepth(op.Pad(value, _ints(pads)), blocksize=s)  # (C, s * s * N, H/s, W/s)
    phases = op.Reshape(phases, _ints([0, s, s, -1, *[(h + (-h) % s) // s for h in padded]]))
    starts = [[geometry.dilation[0] * a % s, geometry.dilation[1] * b % s, geometry.dilation[0] * a // s,
               geometry.dilation[1] * b // s] for a, b in geometry.taps]
    return _slices(phases, starts, [1, 1, *out_sizes], [1, 1, 1, 1], axes=[1, 2, 4, 5])


def _extent(grad_output, geometry: _Geometry):
    """Per spatial axis, the span s * (S_out - 1) + 1 that a window covers in the padded input (ints
    when grad_output's sizes are static, else a tensor)."""
    sizes = _sizes(grad_output)[2:]
    if all(v is not None for v in sizes):
        return [s * (n - 1) + 1 for s, n in zip(geometry.stride, sizes)]
    ones = _ints([1] * geometry.rank)
    return op.Add(op.Mul(_ints(geometry.stride), op.Sub(op.Shape(grad_output, start=2), ones)), ones)


# ---- grad_input and grad_weight from windows of grad_output (stride 1)


def _windows_of_grad_output_pay(grad_output, input, geometry: _Geometry) -> bool:
    """With stride 1, both gradients are GEMMs against one set of windows of grad_output over the
    input's positions, instead of the input's windows for grad_weight plus onnxruntime's own im2col
    inside the Conv for grad_input. Measured (1 thread, ms, against windows of the input + Conv):
    conv 64->4 k3 p1 (8, 64, 32, 32) 0.54 against 2.7 (fewer windows: C_out < C_in); 512->512 at
    (2, 512, 8, 8) 7.4 against 12.0, 256->256 at (4, 256, 8, 8) 2.9 against 3.9, 320->320 at
    (2, 320, 16, 16) 8.7 against 9.9 (small images: one GEMM over N * H * W where onnxruntime's Conv
    runs one per image); depthwise 3x3 (8, 64, 32, 32) 2.3 against 2.8 (onnxruntime's grouped Conv
    is an im2col and a GEMM per channel). At 32x32 and above with C_out == C_in, and whenever
    C_out > C_in (more windows: 128->256 at 16x16 3.0 against 2.8), the Conv or ConvTranspose is as
    fast or faster."""
    c_out, c_in = grad_output.shape[1], input.shape[1]
    sizes = _sizes(input)[2:]
    if not all(v is not None for v in sizes) or any(s != 1 for s in geometry.stride):
        return False
    return c_out < c_in or (c_out == c_in and (math.prod(sizes) <= 256 or geometry.groups == c_in))


def _gradients_from_output_windows(grad_output, input, weight, geometry: _Geometry):
    """windows[a, o, n, X] = grad_output[n, o, X + p - d*a] (0 outside) at the input's positions X:
        grad_input[n, i, X] = sum over o, a of weight[o, i, a] * windows[a, o, n, X]
        grad_weight[o, i, a] = sum over n, X of windows[a, o, n, X] * input[n, i, X]
    per group, with K = N * S as one GEMM dimension: windows (g, taps * C_out/g, K)."""
    g, c_out, c_in = geometry.groups, grad_output.shape[1], input.shape[1]
    c_out_g, c_in_g, taps = c_out // g, c_in // g, len(geometry.taps)
    sizes = _sizes(input)[2:]
    lead = [max(0, d * (k - 1) - p) for k, p, d in zip(geometry.kernel, geometry.padding, geometry.dilation)]
    starts = [[p - d * a + q for a, p, d, q in zip(tap, geometry.padding, geometry.dilation, lead)] for tap in geometry.taps]
    grouped = op.Reshape(_channels_first(grad_output), _ints([g, c_out_g, -1, *_sizes(grad_output)[2:]]))
    windows = _windows(grouped, starts, sizes, [1] * geometry.rank, axis=1, pads=[0, 0, 0, *lead, 0, 0, 0, *lead])
    windows = op.Reshape(windows, _ints([g, taps * c_out_g, -1]))
    # weight (C_out, C_in/g, taps) -> per group (C_in/g, taps * C_out/g), one transpose of a matrix
    # per group (onnxruntime's Transpose moving 9-float blocks instead, (1, 0, 2) of (512, 512, 9),
    # takes 1.4 ms; this 0.25)
    matrix = op.Transpose(op.Reshape(weight, _ints([g, c_out_g, c_in_g * taps])), perm=[0, 2, 1])
    rows = op.MatMul(op.Reshape(matrix, _ints([g, c_in_g, taps * c_out_g])), windows)  # (g, C_in/g, K)
    grad_input = op.Transpose(op.Reshape(rows, _ints([c_in, -1, *sizes])), perm=[1, 0, *geometry.spatial])
    x_rows = op.Reshape(_channels_first(input), _ints([g, c_in_g, -1]))
    product_ = _gemm_over_k(windows, taps * c_out_g, x_rows, c_in_g, [g, taps, c_out_g * c_in_g])
    grad_weight = op.Reshape(op.Transpose(product_, perm=[0, 2, 1]), _ints([c_out, c_in_g, *geometry.kernel]))
    return grad_input, grad_weight


# ---- grad_input


def _input_gradient(grad_output, weight, input, geometry: _Geometry):
    """grad_input of a plain convolution: with stride 1 and C_in >= C_out, the Conv of grad_output
    with the flipped, transposed weight (conv 128->128 k3 p1 (2, 128, 32, 32): 2.6 ms against 2.8
    for the ConvTranspose, and onnxruntime's NCHWc kernels take it when the weight is an
    initializer: 2.2 ms); else the ConvTranspose with the same weight, whose GEMM runs over C_out
    and whose col2im is C_in wide (conv 4->64 k3 p1 (8, 4, 32, 32): the whole backward 0.5 ms,
    1.2 ms with the Conv, which im2cols 64 channels)."""
    c_out, c_in = weight.shape[0], input.shape[1]
    reach = [d * (k - 1) - p for k, p, d in zip(geometry.kernel, geometry.padding, geometry.dilation)]
    if all(s == 1 for s in geometry.stride) and c_in >= c_out and min(reach) >= 0:
        return op.Conv(grad_output, _flipped_transposed(weight, geometry), pads=reach * 2, **geometry.conv_attributes())
    sizes = _sizes(input)[2:]
    if all(v is not None for v in sizes):
        # rows past the last window: uncropped at the end (fewer end pads), or zeros (output_padding)
        spare = [n + 2 * p - d * (k - 1) - 1 - (n + 2 * p - d * (k - 1) - 1) // s * s
                 for n, k, s, p, d in zip(sizes, geometry.kernel, geometry.stride, geometry.padding, geometry.dilation)]
        return op.ConvTranspose(
            grad_output, weight, pads=[*geometry.padding, *[max(p - r, 0) for p, r in zip(geometry.padding, spare)]],
            output_padding=[max(r - p, 0) for p, r in zip(geometry.padding, spare)], **geometry.conv_attributes(),
        )
    # symbolic sizes: crop nothing at the end, reach at least the input's size, cut to it
    full = op.ConvTranspose(
        grad_output, weight, pads=[*geometry.padding, *[0] * geometry.rank],
        output_padding=[s - 1 for s in geometry.stride], **geometry.conv_attributes(),
    )
    return op.Slice(full, _ints([0] * geometry.rank), op.Shape(input, start=2), _ints(geometry.spatial))


def _flipped_transposed(weight, geometry: _Geometry):
    """weight (C_out, C_in/g, *k) -> (C_in, C_out/g, *k) with the taps reversed: the adjoint's weight.
    Spelled with transposes that move whole rows ((C_out, C_in/g, taps) -> (C_out, taps, C_in/g),
    then per group (C_out/g * taps, C_in/g) -> (C_in/g, C_out/g * taps)): onnxruntime's Transpose
    (1, 0, 2, 3), moving 9-float blocks, takes 1.4 ms on a 512 x 512 x 3 x 3 weight; these two
    0.2 ms each. (A weight that is an initializer is folded to a constant at session start.)"""
    c_out, c_in_g = weight.shape[0], weight.shape[1]
    g, taps = geometry.groups, len(geometry.taps)
    by_tap = op.Transpose(op.Reshape(weight, _ints([c_out, c_in_g, taps])), perm=[0, 2, 1])
    flipped = op.Slice(by_tap, _ints([-1]), _ints([_TO_START]), _ints([1]), _ints([-1]))
    rows = op.Reshape(flipped, _ints([g, c_out // g * taps, c_in_g]))
    return op.Reshape(op.Transpose(rows, perm=[0, 2, 1]), _ints([g * c_in_g, c_out // g, *geometry.kernel]))


def _transposed_input_gradient(grad_output, weight, geometry: _Geometry, output_padding):
    """grad_input of a transposed convolution: the plain Conv of grad_output. Its size is the
    input's, plus output_padding // stride rows when output_padding >= stride (dilation > stride)."""
    result = op.Conv(grad_output, weight, pads=list(geometry.padding) * 2, **geometry.conv_attributes())
    extra = [q // s for q, s in zip(output_padding, geometry.stride)]
    if any(extra):
        ends = [-e if e else _TO_END for e in extra]
        result = op.Slice(result, _ints([0] * geometry.rank), _ints(ends), _ints(geometry.spatial))
    return result


TABLE = {torch.ops.aten.convolution_backward.default: convolution_backward}
