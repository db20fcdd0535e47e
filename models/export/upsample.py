"""Upsampling as our own ops in the training IR, so the joint graph reaches pooling.py's backward
translations.

torch registers Python kernels for the Autograd and CompositeImplicitAutograd keys of the upsample
ops (torch/_decomp/decompositions.py): AOTAutograd's trace turns F.interpolate into index /
index_put before autograd sees it, whatever the decomposition table says, and the ONNX graph holds
Gather / ScatterND (nearest 2x backward at 0.5x PyTorch's speed). So, as SiLU is (substitute.py),
every `upsample_*.vec` node of the training IR that this module can prove identical becomes

    ascend_grad::upsample(x, output_size, scales, mode, align_corners)
        backward  ascend_grad::upsample_backward(dy, output_size, input_size, scales, mode, align_corners)

with mode nearest, nearest-exact, linear (1-D to 3-D) or cubic (2-D), output_size and input_size
the static spatial sizes, scales the .vec's scale_factors (None when a size was given). Eagerly,
each runs ATen's own kernel. The backward's translation is pooling.py's (per-axis matrices read
off ATen). The forward is one Resize, as torch.onnx writes it, where that Resize is ATen's op:
checked at export along every axis against the matrix ATen itself computes (ATen copies when the
size does not change, whatever the scale; a nearest index is floorf(i * (1/s)) and may differ from
Resize's i / s in the last bit). Otherwise it is that matrix: a Gather of ATen's indices (nearest)
or pooling.py's MatMuls (linear, cubic), also for float64, which onnxruntime's Resize lacks.

Left alone, as PyTorch spells them: antialiased upsampling (`_upsample_*_aa`: no backward
translation); symbolic spatial sizes; dtypes other than float32 / float16 / bfloat16 / float64; arguments this module does
not know; and sizes where ATen's forward or backward kernel is not what the per-axis matrices say
(checked at export, `_placing_scales`: an axis that keeps its size under a scale other than 1, in
nearest 1-D / 3-D and in bicubic, whose backward kernels copy such an axis while the forwards
interpolate).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import NamedTuple

import numpy as np
import onnx_ir as ir
import torch
from onnxscript import opset18 as op
from torch import Tensor, fx

from ascend_grad.models.export import pooling

aten = torch.ops.aten
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
INTERPOLATING = ("linear", "cubic")  # the modes that take align_corners
CUBIC_A = -0.75  # ATen's (and torch.onnx's) cubic convolution coefficient


class Family(NamedTuple):
    forward: object  # the ATen op, .default overload: (x, output_size, [align_corners], *scales)
    backward: object  # its backward: (dy, output_size, input_size, [align_corners], *scales)
    translation: object  # pooling.py's translation of that backward


FAMILIES = {
    ("nearest", 1): Family(aten.upsample_nearest1d.default, aten.upsample_nearest1d_backward.default,
                           pooling.upsample_nearest1d_backward),
    ("nearest", 2): Family(aten.upsample_nearest2d.default, aten.upsample_nearest2d_backward.default,
                           pooling.upsample_nearest2d_backward),
    ("nearest", 3): Family(aten.upsample_nearest3d.default, aten.upsample_nearest3d_backward.default,
                           pooling.upsample_nearest3d_backward),
    ("nearest-exact", 1): Family(aten._upsample_nearest_exact1d.default, aten._upsample_nearest_exact1d_backward.default,
                                 pooling.upsample_nearest_exact1d_backward),
    ("nearest-exact", 2): Family(aten._upsample_nearest_exact2d.default, aten._upsample_nearest_exact2d_backward.default,
                                 pooling.upsample_nearest_exact2d_backward),
    ("nearest-exact", 3): Family(aten._upsample_nearest_exact3d.default, aten._upsample_nearest_exact3d_backward.default,
                                 pooling.upsample_nearest_exact3d_backward),
    ("linear", 1): Family(aten.upsample_linear1d.default, aten.upsample_linear1d_backward.default,
                          pooling.upsample_linear1d_backward),
    ("linear", 2): Family(aten.upsample_bilinear2d.default, aten.upsample_bilinear2d_backward.default,
                          pooling.upsample_bilinear2d_backward),
    ("linear", 3): Family(aten.upsample_trilinear3d.default, aten.upsample_trilinear3d_backward.default,
                          pooling.upsample_trilinear3d_backward),
    ("cubic", 2): Family(aten.upsample_bicubic2d.default, aten.upsample_bicubic2d_backward.default,
                         pooling.upsample_bicubic2d_backward),
}

# the training IR's upsample nodes (F.interpolate, nn.Upsample) -> (mode, rank)
VEC = {
    aten.upsample_nearest1d.vec: ("nearest", 1),
    aten.upsample_nearest2d.vec: ("nearest", 2),
    aten.upsample_nearest3d.vec: ("nearest", 3),
    aten._upsample_nearest_exact1d.vec: ("nearest-exact", 1),
    aten._upsample_nearest_exact2d.vec: ("nearest-exact", 2),
    aten._upsample_nearest_exact3d.vec: ("nearest-exact", 3),
    aten.upsample_linear1d.vec: ("linear", 1),
    aten.upsample_bilinear2d.vec: ("linear", 2),
    aten.upsample_trilinear3d.vec: ("linear", 3),
    aten.upsample_bicubic2d.vec: ("cubic", 2),
}


# pooling.py's 1-D form of each mode, (x, out, scale) given align_corners: the per-axis matrices
AXIS_OPS = {"nearest": lambda align_corners: pooling._nearest, "nearest-exact": lambda align_corners: pooling._nearest_exact,
            "linear": pooling._linear, "cubic": pooling._cubic}


def _corners(mode: str, align_corners: bool) -> tuple:
    return (align_corners,) if mode in INTERPOLATING else ()


def _per_axis(scales, rank: int) -> list:
    return list(scales) if scales is not None else [None] * rank


# ---- the torch side


@torch.library.custom_op("ascend_grad::upsample", mutates_args=())
def upsample(x: Tensor, output_size: list[int], scales: list[float] | None, mode: str, align_corners: bool) -> Tensor:
    """What `upsample_<mode>.vec(x, size or None, [align_corners], scale_factors)` computes: ATen's
    .vec resolves the size, then calls the op with these scales (they place the samples)."""
    rank = len(output_size)
    family = FAMILIES[mode, rank]
    return family.forward(x, output_size, *_corners(mode, align_corners), *_per_axis(scales, rank))


@torch.library.custom_op("ascend_grad::upsample_backward", mutates_args=())
def upsample_backward(grad_output: Tensor, output_size: list[int], input_size: list[int], scales: list[float] | None,
                      mode: str, align_corners: bool) -> Tensor:
    """input_size: the spatial sizes only (the batch may be symbolic)."""
    rank = len(output_size)
    family = FAMILIES[mode, rank]
    full = [*grad_output.shape[:2], *input_size]
    return family.backward(grad_output, output_size, full, *_corners(mode, align_corners), *_per_axis(scales, rank))


@upsample.register_fake
def _(x, output_size, scales, mode, align_corners):
    return x.new_empty((*x.shape[:2], *output_size))


@upsample_backward.register_fake
def _(grad_output, output_size, input_size, scales, mode, align_corners):
    return grad_output.new_empty((*grad_output.shape[:2], *input_size))


def _setup(ctx, inputs, output):
    x, output_size, scales, mode, align_corners = inputs
    ctx.call = (output_size, list(x.shape[2:]), scales, mode, align_corners)


upsample.register_autograd(lambda ctx, dy: (upsample_backward(dy, *ctx.call), None, None, None, None),
                           setup_context=_setup)


# ---- the training IR: which nodes are provably this op


def _arguments(node: fx.Node) -> tuple | None:
    """(x, output_size, scales, mode, align_corners) for our op, or None when the node is not
    provably the same computation."""
    mode, rank = VEC[node.target]
    names = [a.name for a in node.target._schema.arguments]
    given = dict(zip(names, node.args))
    if set(node.kwargs) - set(names):
        return None
    given.update(node.kwargs)
    x, size, scales = given.get("input"), given.get("output_size"), given.get("scale_factors")
    value, result = (x.meta.get("val") if isinstance(x, fx.Node) else None), node.meta.get("val")
    if not isinstance(value, torch.Tensor) or not isinstance(result, torch.Tensor):
        return None
    if value.dtype not in DTYPES or value.dim() != rank + 2:  # unbatched: ATen takes none through .vec
        return None
    output_size = list(result.shape[2:])
    if not all(type(s) is int for s in [*value.shape[2:], *output_size]):  # symbolic spatial sizes
        return None
    if (size is None) == (scales is None):  # ATen wants exactly one
        return None
    if size is not None and list(size) != output_size:
        return None
    if scales is not None and (len(scales) != rank or not all(isinstance(s, (int, float)) for s in scales)):
        return None
    align_corners = given.get("align_corners", False)
    if not isinstance(align_corners, bool):
        return None
    scales = None if scales is None else [float(s) for s in scales]
    found, scales = _placing_scales(mode, list(value.shape[2:]), output_size, scales, align_corners)
    if not found:
        return None
    return x, output_size, scales, mode, align_corners


def _placing_scales(mode: str, sizes, output_size, scales, align_corners: bool) -> tuple[bool, list | None]:
    """(found, scales) for our op: the given scales, or those with 1.0 on every axis whose size does
    not change, whichever gives the same forward and backward as ATen's op with the given scales,
    and for which the translations' per-axis matrices (pooling.py reads each off the op's 1-D form)
    compose to that forward, and their transposes to that backward. Checked on one random input and
    gradient in float64: ATen's kernels disagree at some sizes. Nearest 2-D copies an axis whose
    size does not change whatever its scale, the 1-D kernel applies the scale; bicubic's backward
    copies when no size changes, its forward applies the scales (not the adjoint of the forward)."""
    rank = len(sizes)
    family, corners = FAMILIES[mode, rank], _corners(mode, align_corners)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 1, *sizes, dtype=torch.float64, generator=g)
    dy = torch.randn(1, 1, *output_size, dtype=torch.float64, generator=g)

    def aten(s):
        return (family.forward(x, output_size, *corners, *_per_axis(s, rank)),
                family.backward(dy, output_size, [1, 1, *sizes], *corners, *_per_axis(s, rank)))

    def along_axes(value, matrices):  # value[..., j, ...] -> sum over j of matrix[i, j] value[..., j, ...], per axis
        for k, matrix in enumerate(matrices):
            value = torch.movedim(torch.tensordot(value, torch.from_numpy(matrix), dims=([2 + k], [1])), -1, 2 + k)
        return value

    def same(a, b):
        return bool(torch.allclose(a, b, rtol=0, atol=1e-12 * max(float(b.abs().max()), 1.0)))

    with torch.no_grad():
        want = aten(scales)
        candidates = [scales] + ([[1.0 if n == m else s for n, m, s in zip(sizes, output_size, scales)]] if scales else [])
        for candidate in candidates:
            matrices = _matrices(sizes, output_size, candidate, mode, align_corners)
            got = (along_axes(x, matrices), along_axes(dy, [m.T for m in matrices]))
            if all(map(same, got, want)) and all(map(same, aten(candidate), want)):
                return True, candidate
    return False, None


def substitute(graph_module: fx.GraphModule) -> Counter:
    """Rewrite the training-IR graph in place; returns how many upsamplings of each mode became ours."""
    graph = graph_module.graph
    done: Counter = Counter()
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in VEC:
            continue
        args = _arguments(node)
        if args is None:
            continue
        with graph.inserting_before(node):
            new = graph.call_function(torch.ops.ascend_grad.upsample.default, args)
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        done[f"upsample {args[3]}"] += 1
    graph.lint()
    graph_module.recompile()
    return done


# ---- the ONNX side


def _matrices(sizes, output_size, scales, mode: str, align_corners: bool) -> list[np.ndarray]:
    """Per axis, the (out, in) matrix ATen's op applies (pooling.py reads it off ATen itself)."""
    axis_op = AXIS_OPS[mode](align_corners)
    return [pooling._axis_matrix(lambda t, m=m, s=s: axis_op(t, m, s), n)
            for n, m, s in zip(sizes, output_size, _per_axis(scales, len(sizes)))]


def _cubic_weights(t: float) -> list[float]:
    """The 4 taps' weights at floor(x) - 1 .. floor(x) + 2 for t = x - floor(x)."""

    def near(d):  # |d| <= 1
        return ((CUBIC_A + 2) * d - (CUBIC_A + 3)) * d * d + 1

    def far(d):  # 1 < |d| < 2
        return ((CUBIC_A * d - 5 * CUBIC_A) * d + 8 * CUBIC_A) * d - 4 * CUBIC_A

    return [far(1 + t), near(t), near(1 - t), far(2 - t)]


def _resize_matrix(n: int, m: int, scale: float, mode: str, align_corners: bool) -> np.ndarray:
    """(m, n): what ONNX Resize (linear or cubic, half_pixel or align_corners, cubic_coeff_a -0.75,
    exclude_outside 0) computes along an axis of n inputs resized to m by `scale`."""
    matrix = np.zeros((m, n))
    for i in range(m):
        if align_corners:
            x = i * (n - 1) / (m - 1) if m > 1 else 0.0
        else:
            x = (i + 0.5) / scale - 0.5
        if mode == "linear":
            x = min(max(x, 0.0), n - 1.0)
            low = math.floor(x)
            matrix[i, low] += 1 - (x - low)
            matrix[i, min(low + 1, n - 1)] += x - low
        else:  # taps past an edge read the edge
            low = math.floor(x)
            for tap, w in zip(range(low - 1, low + 3), _cubic_weights(x - low)):
                matrix[i, min(max(tap, 0), n - 1)] += w
    return matrix


def _block_factors(matrices) -> list[int] | None:
    """k per axis when every matrix is nearest upsampling by an integer factor (output i reads
    input i // k): Resize's asymmetric floor computes i / k exactly."""
    factors = []
    for m in matrices:
        out, n = m.shape
        if out % n:
            return None
        k = out // n
        if not np.array_equal(m, np.kron(np.eye(n), np.ones((k, 1)))):
            return None
        factors.append(k)
    return factors


def _floors_to(n: int, scale: float, m: int) -> bool:
    """Resize's output size floor(n * scale) is m however a runtime rounds: the float32 scale it
    holds times n is exactly m, or clear of every integer (onnx's shape inference computes it in
    double, onnxruntime in float: 10 * 0.7f is 6.99999988 or 7)."""
    product = float(np.float32(scale)) * n  # exact in float64
    return product == m or m + 1e-4 < product < m + 1 - 1e-4


def _resize(x, sizes, output_size, scales, mode: str, align_corners: bool, matrices):
    """The Resize that computes ATen's matrices, or None. It takes the scales when they give the
    output sizes whatever the rounding (they place the samples, as in ATen), else the sizes (then
    out / in places them)."""
    if mode not in INTERPOLATING:
        factors = _block_factors(matrices)
        if factors is None:
            return None
        return op.Resize(x, None, op.Constant(value_floats=[1.0, 1.0, *map(float, factors)]), mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    exact = scales is not None and all(_floors_to(n, s, m) for n, m, s in zip(sizes, output_size, scales))
    used = scales if exact else [m / n for n, m in zip(sizes, output_size)]
    for matrix, n, m, s in zip(matrices, sizes, output_size, used):
        if np.abs(_resize_matrix(n, m, s, mode, align_corners) - matrix).max() > 1e-6:
            return None
        if m == n and not np.array_equal(matrix, np.eye(n)):  # onnxruntime copies then, whatever the scale
            return None
    transform = "align_corners" if align_corners else "half_pixel"
    if exact:
        return op.Resize(x, None, op.Constant(value_floats=[1.0, 1.0, *scales]), mode=mode,
                         coordinate_transformation_mode=transform, cubic_coeff_a=CUBIC_A)
    shape = op.Concat(op.Shape(x, start=0, end=2), pooling._ints(output_size), axis=0)
    return op.Resize(x, None, None, shape, mode=mode, coordinate_transformation_mode=transform, cubic_coeff_a=CUBIC_A)


def _gather_nearest(x, matrices):
    """Nearest upsampling as one Gather per axis of the indices ATen reads (each row of its matrix
    holds one 1): exact in any dtype."""
    for k, m in enumerate(matrices):
        x = op.Gather(x, op.Constant(value=ir.tensor(m.argmax(axis=1).astype(np.int64))), axis=2 + k)
    return x


def upsample_onnx(x, output_size, scales, mode: str, align_corners: bool):
    rank = len(output_size)
    sizes = pooling._input_sizes(x, rank, f"ascend_grad::upsample ({mode})")
    matrices = _matrices(sizes, list(output_size), scales, mode, align_corners)
    given = x.dtype
    if given in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16):  # computed in float32, rounded once, as ATen
        x = op.Cast(x, to=ir.DataType.FLOAT)
    y = None
    if given != ir.DataType.DOUBLE:  # onnxruntime's Resize takes no double
        y = _resize(x, sizes, list(output_size), scales, mode, align_corners, matrices)
    if y is None:
        y = _gather_nearest(x, matrices) if mode not in INTERPOLATING else pooling._along_axes(x, [m.T for m in matrices])
    return op.Cast(y, to=given) if given in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16) else y


def upsample_backward_onnx(grad_output, output_size, input_size, scales, mode: str, align_corners: bool):
    """pooling.py's translation of ATen's backward op (bfloat16 through float32: onnxruntime has no
    bfloat16 MatMul, AveragePool or Resize)."""
    rank = len(output_size)
    translation = FAMILIES[mode, rank].translation
    bfloat16 = grad_output.dtype == ir.DataType.BFLOAT16
    if bfloat16:
        grad_output = op.Cast(grad_output, to=ir.DataType.FLOAT)
    grad_input = translation(grad_output, list(output_size), list(input_size), *_corners(mode, align_corners),
                             *_per_axis(scales, rank))
    return op.Cast(grad_input, to=ir.DataType.BFLOAT16) if bfloat16 else grad_input


TABLE = {
    torch.ops.ascend_grad.upsample.default: upsample_onnx,
    torch.ops.ascend_grad.upsample_backward.default: upsample_backward_onnx,
}
