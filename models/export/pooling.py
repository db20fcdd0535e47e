"""The pooling and resampling family: the backward of avg/max/adaptive pools and of upsampling, which
torch.onnx (torch 2.13) cannot export, and the forwards it gets wrong (avg pools with
divisor_override) or lacks (_adaptive_avg_pool3d, adaptive max pools whose bins overlap).

Every pool and resampling op but the max pools is linear and separable: along each spatial axis it
is a matrix M (out, in), and its backward is grad_output multiplied along each axis by M (out -> in).
Sizes are static, so each M is a constant, and we take it from ATen itself: the op (its 1-D form,
with that axis's arguments) applied to the identity in float64 (`_axis_matrix`), so window bounds,
divisors, clamps and index rounding are ATen's by construction. `_along_axes` applies the matrices,
in the op onnxruntime runs fastest for each structure: block sums (nearest upsampling by an integer
factor) as an AveragePool, block spreads (pools with kernel == stride) as a nearest Resize, any
other matrix as a MatMul.

The max pools' backward puts grad_output where the forward's indices say (`_scatter_to_indices`).
pixel_shuffle and pixel_unshuffle (each the other's backward) are here for speed: torch's
decomposition of them is a 6-D Transpose, 2-6x slower in onnxruntime than DepthToSpace /
SpaceToDepth.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
import torch
from onnxscript import opset18 as op


def _ints(values):
    return op.Constant(value_ints=list(values))


def _static_sizes(sizes, what: str) -> list[int]:
    """Spatial sizes as Python ints, or a NotImplementedError naming them."""
    sizes = list(sizes)
    if not all(isinstance(s, int) for s in sizes):
        raise NotImplementedError(f"{what} must be static (got {sizes}); only the batch size may be symbolic")
    return sizes


def _input_sizes(value, rank: int, what: str) -> list[int]:
    """The last `rank` sizes of a tensor argument (its spatial sizes)."""
    if value.shape is None:
        raise NotImplementedError(f"{what}: the shape is unknown")
    return _static_sizes(list(value.shape)[-rank:], f"{what}: the spatial sizes")


# ---- the matrix of a separable op along one axis, and the backward along all axes


def _axis_matrix(forward, size: int) -> np.ndarray:
    """(out, in) float64: the matrix of a linear op along one axis of `size` inputs, as ATen computes
    it. forward(x) applies the op's 1-D form to x (size, 1, size): `size` batches of one channel
    holding the unit inputs e_i (a 2-D op runs on x.unsqueeze(-1), its other axis of size 1 and
    left alone), so batch i of the result is column i of M."""
    identity = torch.eye(size, dtype=torch.float64)
    with torch.no_grad():
        out = forward(identity.reshape(size, 1, size))
    return out.reshape(size, -1).T.numpy()


def _summed_blocks(m: np.ndarray) -> tuple[int, float] | None:
    """(s, w) when m (a, b) sums blocks: value_b[i] = w * (value_a[i*s] + ... + value_a[i*s + s - 1])
    (the backward of nearest upsampling by an integer factor; forward pools with kernel == stride)."""
    a, b = m.shape
    s, w = a // b, m[0, 0]
    if a != s * b or w == 0:
        return None
    return (s, float(w)) if np.array_equal(m, np.kron(np.eye(b), np.full((s, 1), w))) else None


def _spread_blocks(m: np.ndarray) -> tuple[int, float] | None:
    """(k, w) when m (a, b) spreads each value over a block: value_b[i] = w * value_a[i // k] for
    i < a * k, 0 past that (the backward of a pool whose windows are disjoint: kernel == stride, no
    padding)."""
    a, b = m.shape
    k, w = b // a, m[0, 0]
    if k < 1 or w == 0:
        return None
    blocks = np.kron(np.eye(a), np.full((1, k), w))
    return (k, float(w)) if np.array_equal(m[:, : a * k], blocks) and not m[:, a * k :].any() else None


def _constant(array, dtype: ir.DataType | None):
    return op.Constant(value=ir.tensor(np.ascontiguousarray(array).astype(dtype.numpy() if dtype else np.float32)))


def _unbatched(value, rank: int) -> bool:
    """ATen's pools also take (C, *spatial) inputs: then (1, C, *spatial) in between."""
    return value.shape is not None and len(value.shape) == rank + 1


def _along_axes(value, matrices: list[np.ndarray]):
    """value (N, C, *a) -> (N, C, *b): along spatial axis k, matrices[k] (a_k, b_k) takes
    value[..., j, ...] to sum over j of value[..., j, ...] * matrices[k][j, i]. For a backward,
    matrices[k] is the op's M (out, in); for a forward, M.T. N and C may be symbolic.

    The maps along different axes commute, so the structured ones go together, each in the op
    onnxruntime runs fastest (measured against Reshape + ReduceSum and Expand, 2-8x slower):
    block sums as one AveragePool (times the block size), then the dense axes as a MatMul each, then
    block spreads as one nearest Resize (and zeros for the inputs no block reaches)."""
    rank = len(matrices)
    given = value.dtype
    if unbatched := _unbatched(value, rank):
        value = op.Unsqueeze(value, _ints([0]))
    if given == ir.DataType.FLOAT16:  # computed in float32, rounded once at the end
        value = op.Cast(value, to=ir.DataType.FLOAT)
    dtype = ir.DataType.FLOAT if given == ir.DataType.FLOAT16 else given
    structured = dtype == ir.DataType.FLOAT  # onnxruntime's CPU Resize takes no double: MatMuls then
    summed = [_summed_blocks(m) if structured else None for m in matrices]
    spread = [None if summed[k] or not structured else _spread_blocks(m) for k, m in enumerate(matrices)]
    sizes = [m.shape[0] for m in matrices]
    scale = math.prod(s * w for s, w in filter(None, summed)) * math.prod(w for _, w in filter(None, spread))

    if any(s and s != 1 for s, _ in filter(None, summed)):
        kernel = [plan[0] if plan else 1 for plan in summed]
        value = op.AveragePool(value, kernel_shape=kernel, strides=kernel)
        sizes = [size // k for size, k in zip(sizes, kernel)]
    if scale != 1.0:  # the blocks' weights, once, on the tensor before it spreads
        value = op.Mul(value, _constant(np.array(scale), dtype))
    for k in reversed(range(rank)):  # the dense axes, the last first (it needs no view)
        if summed[k] or spread[k]:
            continue
        m = matrices[k]
        a, b = m.shape
        after = math.prod(sizes[k + 1 :])
        sizes[k] = b
        if k == rank - 1:  # the last axis: (..., a) @ (a, b)
            value = op.MatMul(value, _constant(m, dtype))
        else:  # (b, a) @ (N, -1, a, after)
            value = op.MatMul(_constant(m.T, dtype), op.Reshape(value, _ints([0, -1, a, after])))
            value = op.Reshape(value, _ints([0, -1, *sizes]))
    if any(k != 1 for k, _ in filter(None, spread)):
        factors = [1.0, 1.0] + [float(plan[0]) if plan else 1.0 for plan in spread]
        value = op.Resize(value, None, op.Constant(value_floats=factors), mode="nearest",
                          coordinate_transformation_mode="asymmetric", nearest_mode="floor")  # i // k, exactly
        sizes = [size * int(f) for size, f in zip(sizes, factors[2:])]
    missing = [m.shape[1] - size for m, size in zip(matrices, sizes)]
    if any(missing):  # inputs past the last block
        value = op.Pad(value, _ints([0] * (rank + 2) + [0, 0, *missing]))
    if given == ir.DataType.FLOAT16:
        value = op.Cast(value, to=given)
    return op.Squeeze(value, _ints([0])) if unbatched else value


# ---- average pools: each axis a window average, the divisor a product over the axes


def _per_axis(values, rank: int) -> list[int]:
    """ATen's int[2] / int[3] arguments: one value means the same on every axis."""
    values = list(values)
    return values * rank if len(values) == 1 else values


def _avg_pool_matrices(self, kernel_size, stride, padding, ceil_mode, count_include_pad, sums: bool, rank: int,
                       what: str) -> list[np.ndarray]:
    """Per axis: avg_pool2d with this axis's kernel, stride and padding and a kernel of 1 along the
    other. Its divisor is the kernel size, clipped at the padded edge (count_include_pad) or at the
    input's edge (not); ATen's 2-D and 3-D divisors are the products of these. `sums`: the window
    sums instead (a divisor of 1), for divisor_override."""
    sizes = _input_sizes(self, rank, what)
    kernel_size = _per_axis(kernel_size, rank)
    stride = _per_axis(stride, rank) if stride else kernel_size  # ATen: no stride means the kernel size
    padding = _per_axis(padding, rank)
    return [_axis_matrix(lambda x, k=k, s=s, p=p: torch.ops.aten.avg_pool2d(
                x.unsqueeze(-1), [k, 1], [s, 1], [p, 0], ceil_mode, count_include_pad, 1 if sums else None), n)
            for n, k, s, p in zip(sizes, kernel_size, stride, padding)]


def _avg_pool_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                       divisor_override, rank: int, what: str):
    matrices = _avg_pool_matrices(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                  bool(divisor_override), rank, what)
    grad_input = _along_axes(grad_output, matrices)
    if divisor_override:
        grad_input = op.Mul(grad_input, _constant(np.array(1.0 / divisor_override), grad_output.dtype))
    return grad_input


def avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override=None):
    """avg_pool1d's too (ATen runs it as a 2-D pool of height 1)."""
    return _avg_pool_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                              divisor_override, 2, "avg_pool2d_backward")


def avg_pool3d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override=None):
    return _avg_pool_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                              divisor_override, 3, "avg_pool3d_backward")


def _avg_pool(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, rank: int,
              torchlib_function, what: str):
    """The forward: torch.onnx's own AveragePool, except with divisor_override, which it ignores (the
    result would be window sum / kernel size): the window sums of the matrices above, divided."""
    if not divisor_override:
        return torchlib_function(self, kernel_size, stride, padding, ceil_mode, count_include_pad)
    matrices = _avg_pool_matrices(self, kernel_size, stride, padding, ceil_mode, count_include_pad, True, rank, what)
    sums = _along_axes(self, [m.T for m in matrices])
    return op.Mul(sums, _constant(np.array(1.0 / divisor_override), self.dtype))


def avg_pool2d(self, kernel_size, stride=(), padding=(0, 0), ceil_mode=False, count_include_pad=True, divisor_override=None):
    from onnxscript.function_libs.torch_lib.ops.nn import aten_avg_pool2d

    return _avg_pool(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2,
                     aten_avg_pool2d, "avg_pool2d")


def avg_pool3d(self, kernel_size, stride=(), padding=(0, 0, 0), ceil_mode=False, count_include_pad=True, divisor_override=None):
    from onnxscript.function_libs.torch_lib.ops.nn import aten_avg_pool3d

    return _avg_pool(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3,
                     aten_avg_pool3d, "avg_pool3d")


# ---- adaptive average pools: output o averages inputs floor(o * in / out) .. ceil((o + 1) * in / out) - 1


def _adaptive_avg_pool_matrices(sizes, output_size) -> list[np.ndarray]:
    return [_axis_matrix(lambda x, m=m: torch.ops.aten._adaptive_avg_pool2d(x.unsqueeze(-1), [m, 1]), n)
            for n, m in zip(sizes, output_size)]


def adaptive_avg_pool2d_backward(grad_output, self):
    """adaptive_avg_pool1d's too (ATen runs it as 2-D)."""
    sizes = _input_sizes(self, 2, "_adaptive_avg_pool2d_backward")
    output_size = _input_sizes(grad_output, 2, "_adaptive_avg_pool2d_backward: grad_output")
    return _along_axes(grad_output, _adaptive_avg_pool_matrices(sizes, output_size))


def adaptive_avg_pool3d_backward(grad_output, self):
    sizes = _input_sizes(self, 3, "_adaptive_avg_pool3d_backward")
    output_size = _input_sizes(grad_output, 3, "_adaptive_avg_pool3d_backward: grad_output")
    return _along_axes(grad_output, _adaptive_avg_pool_matrices(sizes, output_size))


def adaptive_avg_pool3d(self, output_size):
    """The forward, which torch.onnx lacks: the same matrices, transposed (in -> out)."""
    sizes = _input_sizes(self, 3, "_adaptive_avg_pool3d")
    output_size = _static_sizes(output_size, "_adaptive_avg_pool3d: output_size")
    return _along_axes(self, [m.T for m in _adaptive_avg_pool_matrices(sizes, output_size)])


# ---- max pools: the gradient goes to the input position each output's index names


def _scatter_to_indices(grad_output, self, indices, rank: int, disjoint: bool, what: str):
    """grad_input[n, c].flat[indices[n, c, o]] += grad_output[n, c, o]: ATen's indices are flat
    positions in each (n, c) plane of the (unpadded) input. When the windows are disjoint no position
    is named twice and MaxUnpool places the values (4x faster than ScatterElements, measured); it
    takes indices over the whole tensor, so each plane's offset (n * C + c) * plane is added first.
    Overlapping windows may name a position more than once: ScatterElements sums them."""
    sizes = _input_sizes(self, rank, what)
    dtype = grad_output.dtype
    if unbatched := _unbatched(grad_output, rank):
        grad_output, indices = op.Unsqueeze(grad_output, _ints([0])), op.Unsqueeze(indices, _ints([0]))
    plane = math.prod(sizes)
    batch_channels = op.Slice(op.Shape(grad_output), _ints([0]), _ints([2]))
    if disjoint and dtype in (ir.DataType.FLOAT, ir.DataType.FLOAT16):  # onnxruntime's MaxUnpool: not double
        count = op.ReduceProd(batch_channels, keepdims=0)
        starts = op.Mul(op.Range(op.Constant(value_int=0), count, op.Constant(value_int=1)), op.Constant(value_int=plane))
        offsets = op.Reshape(starts, op.Concat(batch_channels, _ints([1] * rank), axis=0))
        output_shape = op.Concat(batch_channels, _ints(sizes), axis=0)
        grad_input = op.MaxUnpool(grad_output, op.Add(indices, offsets), output_shape, kernel_shape=[1] * rank)
    else:
        summed = ir.DataType.FLOAT if dtype == ir.DataType.FLOAT16 else dtype  # onnxruntime sums no float16 here
        flat_grad = op.Reshape(op.Cast(grad_output, to=summed) if summed != dtype else grad_output, _ints([0, 0, -1]))
        flat_indices = op.Reshape(indices, _ints([0, 0, -1]))
        zeros = op.Expand(_constant(np.zeros(1), summed), op.Concat(batch_channels, _ints([plane]), axis=0))
        grad_input = op.ScatterElements(zeros, flat_indices, flat_grad, axis=2, reduction="add")
        grad_input = op.Reshape(op.Cast(grad_input, to=dtype) if summed != dtype else grad_input, _ints([0, 0, *sizes]))
    return op.Squeeze(grad_input, _ints([0])) if unbatched else grad_input


def _max_pool_backward(grad_output, self, kernel_size, stride, dilation, indices, rank: int, what: str):
    kernel_size = _per_axis(kernel_size, rank)
    stride = _per_axis(stride, rank) if stride else kernel_size
    dilation = _per_axis(dilation, rank)
    disjoint = all((k - 1) * d + 1 <= s for k, s, d in zip(kernel_size, stride, dilation))  # window extent <= stride
    return _scatter_to_indices(grad_output, self, indices, rank, disjoint, what)


def max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices):
    """max_pool1d's too (ATen runs it as 2-D). torch.onnx would decompose it into the ScatterElements
    spelling; ours also takes MaxUnpool's when the windows are disjoint."""
    return _max_pool_backward(grad_output, self, kernel_size, stride, dilation, indices, 2, "max_pool2d_with_indices_backward")


def max_pool3d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices):
    return _max_pool_backward(grad_output, self, kernel_size, stride, dilation, indices, 3, "max_pool3d_with_indices_backward")


def _adaptive_max_pool_backward(grad_output, self, indices, rank: int, what: str):
    sizes = _input_sizes(self, rank, what)
    output_size = _input_sizes(grad_output, rank, f"{what}: grad_output")
    disjoint = all(n % m == 0 for n, m in zip(sizes, output_size))  # else neighbouring bins share an input
    return _scatter_to_indices(grad_output, self, indices, rank, disjoint, what)


def adaptive_max_pool2d_backward(grad_output, self, indices):
    """adaptive_max_pool1d's too (ATen runs it as 2-D)."""
    return _adaptive_max_pool_backward(grad_output, self, indices, 2, "adaptive_max_pool2d_backward")


def adaptive_max_pool3d_backward(grad_output, self, indices):
    return _adaptive_max_pool_backward(grad_output, self, indices, 3, "adaptive_max_pool3d_backward")


def _adaptive_max_pool(self, output_size, rank: int, what: str):
    """(values, indices) of an adaptive max pool, which torch.onnx exports only when the bins divide
    the input: output o along an axis of n inputs and m outputs takes the max over its bin
    floor(o * n / m) .. ceil((o + 1) * n / m) - 1, and its index is the first position holding it,
    scanning the bin row by row as ATen does (ArgMax keeps the first).

    The bins are gathered along each axis, each padded to the widest by repeating its last position
    (a repeat follows its original in the scan, so neither the max nor its first position changes),
    then flattened: (N, C, *output_size, window)."""
    sizes = _input_sizes(self, rank, what)
    output_size = _static_sizes(output_size, f"{what}: output_size")
    tables = []  # per axis, (m, width): the input positions of each bin
    unbatched = _unbatched(self, rank)
    windows = op.Unsqueeze(self, _ints([0])) if unbatched else self
    for k in reversed(range(rank)):
        n, m = sizes[k], output_size[k]
        bins = [(o * n // m, -(-(o + 1) * n // m)) for o in range(m)]
        width = max(end - start for start, end in bins)
        tables.insert(0, np.array([[min(start + j, end - 1) for j in range(width)] for start, end in bins]))
        windows = op.Gather(windows, op.Constant(value=ir.tensor(tables[0])), axis=2 + k)  # axis k -> (m, width)
    # (N, C, m_1, w_1, ..., m_d, w_d) -> (N, C, m_1, ..., m_d, w_1 * ... * w_d)
    perm = [0, 1] + [2 + 2 * k for k in range(rank)] + [3 + 2 * k for k in range(rank)]
    window = math.prod(t.shape[1] for t in tables)
    windows = op.Reshape(op.Transpose(windows, perm=perm), _ints([0, 0, *output_size, window]))
    values = op.ReduceMax(windows, _ints([-1]), keepdims=0)
    first = op.ArgMax(windows, axis=-1, keepdims=0, select_last_index=0)
    # positions[o, j]: the flat input position of element j of output o's window
    positions = np.zeros((*output_size, window), dtype=np.int64)
    for o in np.ndindex(*output_size):
        bin_axes = np.meshgrid(*[tables[k][o[k]] for k in range(rank)], indexing="ij")
        positions[o] = np.ravel_multi_index(bin_axes, sizes).reshape(-1)
    base = (np.arange(math.prod(output_size)) * window).reshape(output_size)  # where output o's row starts
    indices = op.Gather(op.Constant(value=ir.tensor(positions.reshape(-1))), op.Add(first, op.Constant(value=ir.tensor(base))))
    if unbatched:
        return op.Squeeze(values, _ints([0])), op.Squeeze(indices, _ints([0]))
    return values, indices


def adaptive_max_pool2d(self, output_size):
    """adaptive_max_pool1d's too (ATen runs it as 2-D)."""
    return _adaptive_max_pool(self, output_size, 2, "adaptive_max_pool2d")


def adaptive_max_pool3d(self, output_size):
    return _adaptive_max_pool(self, output_size, 3, "adaptive_max_pool3d")


# ---- upsampling: each axis resampled by its own 1-D rule (nearest, nearest-exact, linear, cubic)


def _upsample_backward(grad_output, output_size, input_size, axis_op, scales, what: str):
    """axis_op(x, out, scale) is the op's 1-D form on x (in, 1, in)."""
    rank = len(output_size)
    output_size = _static_sizes(output_size, f"{what}: output_size")
    sizes = _static_sizes(list(input_size)[-rank:], f"{what}: input_size")
    matrices = [_axis_matrix(lambda x, m=m, s=s: axis_op(x, m, s), n) for n, m, s in zip(sizes, output_size, scales)]
    return _along_axes(grad_output, matrices)


def _nearest(x, out, scale):
    return torch.ops.aten.upsample_nearest1d(x, [out], scale)


def _nearest_exact(x, out, scale):
    return torch.ops.aten._upsample_nearest_exact1d(x, [out], scale)


def _linear(align_corners):
    return lambda x, out, scale: torch.ops.aten.upsample_linear1d(x, [out], align_corners, scale)


def _cubic(align_corners):  # ATen has no 1-D bicubic: the 2-D one, one input and output wide
    return lambda x, out, scale: torch.ops.aten.upsample_bicubic2d(x.unsqueeze(-1), [out, 1], align_corners, scale, None)


def upsample_nearest1d_backward(grad_output, output_size, input_size, scales=None):
    return _upsample_backward(grad_output, output_size, input_size, _nearest, [scales], "upsample_nearest1d_backward")


def upsample_nearest2d_backward(grad_output, output_size, input_size, scales_h=None, scales_w=None):
    return _upsample_backward(grad_output, output_size, input_size, _nearest, [scales_h, scales_w],
                              "upsample_nearest2d_backward")


def upsample_nearest3d_backward(grad_output, output_size, input_size, scales_d=None, scales_h=None, scales_w=None):
    return _upsample_backward(grad_output, output_size, input_size, _nearest, [scales_d, scales_h, scales_w],
                              "upsample_nearest3d_backward")


def upsample_nearest_exact1d_backward(grad_output, output_size, input_size, scales=None):
    return _upsample_backward(grad_output, output_size, input_size, _nearest_exact, [scales],
                              "_upsample_nearest_exact1d_backward")


def upsample_nearest_exact2d_backward(grad_output, output_size, input_size, scales_h=None, scales_w=None):
    return _upsample_backward(grad_output, output_size, input_size, _nearest_exact, [scales_h, scales_w],
                              "_upsample_nearest_exact2d_backward")


def upsample_nearest_exact3d_backward(grad_output, output_size, input_size, scales_d=None, scales_h=None, scales_w=None):
    return _upsample_backward(grad_output, output_size, input_size, _nearest_exact, [scales_d, scales_h, scales_w],
                              "_upsample_nearest_exact3d_backward")


def upsample_linear1d_backward(grad_output, output_size, input_size, align_corners, scales=None):
    return _upsample_backward(grad_output, output_size, input_size, _linear(align_corners), [scales],
                              "upsample_linear1d_backward")


def upsample_bilinear2d_backward(grad_output, output_size, input_size, align_corners, scales_h=None, scales_w=None):
    return _upsample_backward(grad_output, output_size, input_size, _linear(align_corners), [scales_h, scales_w],
                              "upsample_bilinear2d_backward")


def upsample_trilinear3d_backward(grad_output, output_size, input_size, align_corners, scales_d=None, scales_h=None,
                                  scales_w=None):
    return _upsample_backward(grad_output, output_size, input_size, _linear(align_corners),
                              [scales_d, scales_h, scales_w], "upsample_trilinear3d_backward")


def upsample_bicubic2d_backward(grad_output, output_size, input_size, align_corners, scales_h=None, scales_w=None):
    return _upsample_backward(grad_output, output_size, input_size, _cubic(align_corners), [scales_h, scales_w],
                              "upsample_bicubic2d_backward")


# ---- pixel shuffle: each the other's backward, so a joint graph holds both when both are here


def _as_4d(self, sizes, onnx_op):
    """onnx_op on (-1, *sizes) for ATen's (*, C, H, W) (any leading dims), then the leading dims back."""
    rank = len(self.shape) if self.shape is not None else 4
    if rank == 4:
        return onnx_op(self)
    flat = op.Reshape(self, _ints([-1, *sizes]))
    result = onnx_op(flat)
    tail = op.Slice(op.Shape(result), _ints([1]), _ints([4]))
    return op.Reshape(result, op.Concat(op.Slice(op.Shape(self), _ints([0]), _ints([-3])), tail, axis=0))


def pixel_shuffle(self, upscale_factor):
    """(*, C r^2, H, W) -> (*, C, H r, W r), out[c, h r + i, w r + j] = in[c r^2 + i r + j, h, w]:
    DepthToSpace in CRD order, as fast as PyTorch (torch's decomposition, a 6-D Transpose, runs 2.3x
    slower in onnxruntime)."""
    sizes = _input_sizes(self, 3, "pixel_shuffle")
    return _as_4d(self, sizes, lambda x: op.DepthToSpace(x, blocksize=upscale_factor, mode="CRD"))


def pixel_unshuffle(self, downscale_factor):
    """(*, C, H r, W r) -> (*, C r^2, H, W), the inverse. SpaceToDepth numbers the output channels
    (i r + j) C + c; a transpose of that (r^2, C) grid gives ATen's c r^2 + i r + j (together 2x
    faster than PyTorch, 6x than the 6-D Transpose of torch's decomposition)."""
    channels, height, width = _input_sizes(self, 3, "pixel_unshuffle")
    r = downscale_factor

    def unshuffle(x):
        blocks = op.Reshape(op.SpaceToDepth(x, blocksize=r), _ints([0, r * r, channels, -1]))
        return op.Reshape(op.Transpose(blocks, perm=[0, 2, 1, 3]), _ints([0, channels * r * r, height // r, width // r]))

    return _as_4d(self, [channels, height, width], unshuffle)


_aten = torch.ops.aten
TABLE = {
    _aten.avg_pool2d.default: avg_pool2d,
    _aten.avg_pool3d.default: avg_pool3d,
    _aten.avg_pool2d_backward.default: avg_pool2d_backward,
    _aten.avg_pool3d_backward.default: avg_pool3d_backward,
    _aten._adaptive_avg_pool2d_backward.default: adaptive_avg_pool2d_backward,
    _aten._adaptive_avg_pool3d_backward.default: adaptive_avg_pool3d_backward,
    _aten._adaptive_avg_pool3d.default: adaptive_avg_pool3d,
    _aten.max_pool2d_with_indices_backward.default: max_pool2d_with_indices_backward,
    _aten.max_pool3d_with_indices_backward.default: max_pool3d_with_indices_backward,
    _aten.adaptive_max_pool2d.default: adaptive_max_pool2d,
    _aten.adaptive_max_pool3d.default: adaptive_max_pool3d,
    _aten.adaptive_max_pool2d_backward.default: adaptive_max_pool2d_backward,
    _aten.adaptive_max_pool3d_backward.default: adaptive_max_pool3d_backward,
    _aten.upsample_nearest1d_backward.default: upsample_nearest1d_backward,
    _aten.upsample_nearest2d_backward.default: upsample_nearest2d_backward,
    _aten.upsample_nearest3d_backward.default: upsample_nearest3d_backward,
    _aten._upsample_nearest_exact1d_backward.default: upsample_nearest_exact1d_backward,
    _aten._upsample_nearest_exact2d_backward.default: upsample_nearest_exact2d_backward,
    _aten._upsample_nearest_exact3d_backward.default: upsample_nearest_exact3d_backward,
    _aten.upsample_linear1d_backward.default: upsample_linear1d_backward,
    _aten.upsample_bilinear2d_backward.default: upsample_bilinear2d_backward,
    _aten.upsample_trilinear3d_backward.default: upsample_trilinear3d_backward,
    _aten.upsample_bicubic2d_backward.default: upsample_bicubic2d_backward,
    _aten.pixel_shuffle.default: pixel_shuffle,
    _aten.pixel_unshuffle.default: pixel_unshuffle,
}
