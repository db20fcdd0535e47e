"""The pooling and resampling translations (models/export/pooling.py): each ATen op exported alone
by torch.onnx with our TABLE and run in onnxruntime, against the same ATen op in float64 on the same
values; then joint graphs (routes.export_joint) of small modules against autograd in float64.

Each single-op test exports one module computing every variant of a family (one export instead of
one per variant keeps the file fast); a failure names the variant.

Bound: max |out - ref| / max |ref| <= 1e-5 per float32 output (the project's float bound, through
testing.assert_close). Every output is a sum of at most a few dozen float32 terms (a window, a
bin, an interpolation's taps, the outputs naming one input), whose rounding stays near 1e-7
(measured up to 2e-7 single-op, 5e-7 joint). Indices must equal ATen's exactly.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from dataclasses import dataclass

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from ascend_grad.models.export import export_training_graph, pooling  # noqa: E402
from ascend_grad.models.export.reference import torch_step  # noqa: E402
from ascend_grad.models.routes import export_joint  # noqa: E402
from ascend_grad.testing import assert_close, run_onnxruntime  # noqa: E402

TOLERANCE = 1e-5
# by output dtype: float16 outputs are sums in float16 (SPEC's float16 bound); float64 ones exact but for rounding
TOLERANCES = {np.dtype(np.float32): TOLERANCE, np.dtype(np.float16): 1e-3, np.dtype(np.float64): 1e-12}
aten = torch.ops.aten
SIZES = {1: (11,), 2: (9, 10), 3: (6, 7, 5)}  # odd, H != W, not multiples of 8


@dataclass
class Variant:
    """One call: `call(*tensors)` returns a tensor or a tuple of them."""

    name: str
    call: object
    tensors: tuple


class _Calls(nn.Module):
    """forward(*all the variants' tensors) = every variant's outputs, in order."""

    def __init__(self, variants):
        super().__init__()
        self.variants = variants

    def forward(self, *tensors):
        outputs, start = [], 0
        for variant in self.variants:
            result = variant.call(*tensors[start : start + len(variant.tensors)])
            outputs += list(result) if isinstance(result, tuple) else [result]
            start += len(variant.tensors)
        return tuple(outputs)


def export(module, tensors, dynamic_shapes=None):
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(module, tuple(tensors), dynamo=True, dynamic_shapes=dynamic_shapes,
                                    custom_translation_table=pooling.TABLE, verbose=False)
    return program.model_proto


def float64(tensors):
    return [t.double() if t.is_floating_point() else t for t in tensors]


def assert_variants(model, variants):
    """The model's outputs against the variants' float64 ATen results, each output named."""
    tensors = [t for v in variants for t in v.tensors]
    got = list(run_onnxruntime(model, {i.name: t.numpy() for i, t in zip(model.graph.input, tensors)}).values())
    want, names = [], []
    for variant in variants:
        result = variant.call(*float64(variant.tensors))
        results = list(result) if isinstance(result, tuple) else [result]
        want += results
        names += [f"{variant.name}, output {k}" for k in range(len(results))] if len(results) > 1 else [variant.name]
    assert len(got) == len(want)
    for name, g, w in zip(names, got, want):
        if w.is_floating_point():
            assert_close(g, w.numpy(), name, tolerance=TOLERANCES[g.dtype])
        else:
            np.testing.assert_array_equal(g, w.numpy(), err_msg=name)


def check(variants, dtype=torch.float32):
    """Export the variants (their float tensors cast to dtype) at once and check every output."""
    for v in variants:
        v.tensors = tuple(t.to(dtype) if t.is_floating_point() else t for t in v.tensors)
    assert_variants(export(_Calls(variants), [t for v in variants for t in v.tensors]), variants)


def randn(*shape, generator):
    shape = [n for n in shape if n is not None]  # batch None: an unbatched (C, *spatial) input
    return torch.randn(*shape, generator=generator)


def tied(*shape, generator):
    """Small integers: most windows hold their max more than once."""
    return torch.randint(0, 3, [n for n in shape if n is not None], generator=generator).float()


# ---- the variants: each builds its tensors (seeded, batch as given) and the ATen call autograd makes


def avg_pool(rank, kernel, stride, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None, batch=2,
             seed=0):
    """avg_pool{1,2,3}d's backward as autograd calls it: 1-D runs as 2-D of height 1."""
    g = torch.Generator().manual_seed(seed)
    name = f"avg_pool{rank}d k{kernel} s{stride} p{padding}{' ceil' if ceil_mode else ''}" + (
        "" if count_include_pad else " no-pad-count") + (f" divisor {divisor_override}" if divisor_override else "")
    kernel, stride, padding = ([v] * rank if isinstance(v, int) else list(v) for v in (kernel, stride, padding))
    sizes = SIZES[rank]
    if rank == 1:  # (N, C, 1, L): kernel (1, k), stride (1, s), padding (0, p)
        kernel, stride, padding, sizes = [1, *kernel], [1, *stride], [0, *padding], (1, *sizes)
    forward, backward = (aten.avg_pool3d, aten.avg_pool3d_backward) if rank == 3 else (aten.avg_pool2d, aten.avg_pool2d_backward)
    args = (kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    x = randn(batch, 3, *sizes, generator=g)
    grad = randn(*forward(x, *args).shape, generator=g)
    return Variant(name, lambda grad, x: backward.default(grad, x, *args), (grad, x))


def max_pool(rank, kernel, stride, padding=0, dilation=1, ceil_mode=False, ties=False, batch=2, seed=0):
    """max_pool{1,2,3}d's backward with ATen's own indices (1-D runs as 2-D of height 1)."""
    g = torch.Generator().manual_seed(seed)
    name = f"max_pool{rank}d k{kernel} s{stride} p{padding} d{dilation}{' ceil' if ceil_mode else ''}{' ties' if ties else ''}"
    kernel, stride, padding, dilation = ([v] * rank if isinstance(v, int) else list(v)
                                         for v in (kernel, stride, padding, dilation))
    sizes = SIZES[rank]
    if rank == 1:  # (N, C, 1, L)
        kernel, stride, padding, dilation, sizes = [1, *kernel], [1, *stride], [0, *padding], [1, *dilation], (1, *sizes)
    forward, backward = ((aten.max_pool3d_with_indices, aten.max_pool3d_with_indices_backward) if rank == 3
                         else (aten.max_pool2d_with_indices, aten.max_pool2d_with_indices_backward))
    args = (kernel, stride, padding, dilation, ceil_mode)
    x = (tied if ties else randn)(batch, 3, *sizes, generator=g)
    y, indices = forward(x, *args)
    grad = randn(*y.shape, generator=g)
    return Variant(name, lambda grad, x, indices: backward.default(grad, x, *args, indices), (grad, x, indices))


def adaptive_avg_pool(rank, output_size, batch=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    sizes = SIZES[rank] if rank > 1 else (1, *SIZES[1])
    output_size = list(output_size) if rank > 1 else [1, *output_size]
    forward, backward = ((aten._adaptive_avg_pool3d, aten._adaptive_avg_pool3d_backward) if rank == 3
                         else (aten._adaptive_avg_pool2d, aten._adaptive_avg_pool2d_backward))
    x = randn(batch, 3, *sizes, generator=g)
    grad = randn(*forward(x, output_size).shape, generator=g)
    return Variant(f"adaptive_avg_pool{rank}d to {output_size}", lambda grad, x: backward.default(grad, x), (grad, x))


def adaptive_max_pool(rank, output_size, ties=False, batch=2, seed=0):
    """The forward (values and indices) and the backward with ATen's indices."""
    g = torch.Generator().manual_seed(seed)
    sizes = SIZES[rank] if rank > 1 else (1, *SIZES[1])
    output_size = list(output_size) if rank > 1 else [1, *output_size]
    forward, backward = ((aten.adaptive_max_pool3d, aten.adaptive_max_pool3d_backward) if rank == 3
                         else (aten.adaptive_max_pool2d, aten.adaptive_max_pool2d_backward))
    x = (tied if ties else randn)(batch, 3, *sizes, generator=g)
    y, indices = forward(x, output_size)
    grad = randn(*y.shape, generator=g)

    def call(grad, x, indices):
        return (*forward.default(x, output_size), backward.default(grad, x, indices))

    return Variant(f"adaptive_max_pool{rank}d to {output_size}{' ties' if ties else ''}", call, (grad, x, indices))


UPSAMPLE = {  # mode -> {rank: the backward op}; linear is linear / bilinear / trilinear by rank
    "nearest": {1: aten.upsample_nearest1d_backward, 2: aten.upsample_nearest2d_backward, 3: aten.upsample_nearest3d_backward},
    "nearest-exact": {1: aten._upsample_nearest_exact1d_backward, 2: aten._upsample_nearest_exact2d_backward,
                      3: aten._upsample_nearest_exact3d_backward},
    "linear": {1: aten.upsample_linear1d_backward, 2: aten.upsample_bilinear2d_backward, 3: aten.upsample_trilinear3d_backward},
    "bicubic": {2: aten.upsample_bicubic2d_backward},
}


def upsample(mode, rank, size=None, scale=None, align_corners=None, batch=2, seed=0):
    """The backward of F.interpolate(x, size or scale_factor, mode), with the arguments it passes
    (scales when a scale factor is given, none when a size is)."""
    g = torch.Generator().manual_seed(seed)
    in_sizes = SIZES[rank]
    out_sizes = list(size[:rank]) if size else [int(n * scale) for n in in_sizes]
    scales = [scale if size is None else None] * rank
    corners = () if align_corners is None else (align_corners,)
    grad = randn(batch, 3, *out_sizes, generator=g)
    op = UPSAMPLE[mode][rank].default
    name = f"{mode} {rank}-D {'size ' + str(out_sizes) if size else f'x{scale}'}" + (
        "" if align_corners is None else f" align_corners={align_corners}")
    return Variant(name, lambda grad: op(grad, out_sizes, [grad.shape[0], 3, *in_sizes], *corners, *scales), (grad,))


# ---- single ops against ATen


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_avg_pool_backward(rank):
    variants = [
        avg_pool(rank, 2, 2),  # disjoint windows; the odd last row gets no gradient
        avg_pool(rank, 3, 2, 1, ceil_mode=True),  # the last window runs past the padding
        avg_pool(rank, 3, 2, 1, count_include_pad=False),  # divisors count only the input
        avg_pool(rank, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        avg_pool(rank, 3, 1, 1),  # overlapping, stride 1 (Inception's pool branch)
        avg_pool(rank, 4, 3, 2, ceil_mode=True),
    ]
    if rank > 1:
        variants += [
            avg_pool(rank, 3, 2, divisor_override=5),
            avg_pool(rank, 3, 2, 1, ceil_mode=True, count_include_pad=False, divisor_override=2),
            avg_pool(rank, (2, 3, 1)[:rank], (1, 2, 1)[:rank], (1, 0, 0)[:rank]),  # a different kernel per axis
        ]
    check(variants)


@pytest.mark.parametrize("rank", [2, 3])
def test_avg_pool_forward(rank):
    """torch.onnx's AveragePool ignores divisor_override: ours divides the window sums by it."""
    g = torch.Generator().manual_seed(0)
    forward = aten.avg_pool3d if rank == 3 else aten.avg_pool2d
    x = randn(2, 3, *SIZES[rank], generator=g)

    def pool(*args):
        return Variant(f"avg_pool{rank}d {args}", lambda x: forward.default(x, *args), (x,))

    check([
        pool([3] * rank, [2] * rank, [0] * rank, False, True, 5),
        pool([3] * rank, [2] * rank, [1] * rank, True, False, 4),
        pool([3] * rank, [2] * rank, [1] * rank, True, False, None),  # no override: torch.onnx's own
    ])


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_max_pool_backward(rank):
    check([
        max_pool(rank, 2, 2),  # disjoint windows (MaxUnpool)
        max_pool(rank, 5, 1, 2),  # YOLO's SPPF (ScatterElements: a position named by several windows)
        max_pool(rank, 3, 2, dilation=2),
        max_pool(rank, 3, 2, 1, ceil_mode=True),  # ResNet's stem, and a window past the end
        max_pool(rank, 2, 3, ceil_mode=True),  # disjoint, with a gap, and a partial last window
        max_pool(rank, 2, 2, ties=True),  # the gradient goes where ATen's indices say
        max_pool(rank, 3, 1, 1, ties=True),
    ])


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_adaptive_avg_pool_backward(rank):
    divides = {1: (1,), 2: (3, 5), 3: (3, 7, 5)}[rank]  # 1-D: 11 inputs, to 1
    check([
        adaptive_avg_pool(rank, [1] * rank),  # classifier heads (a joint graph holds a mean instead)
        adaptive_avg_pool(rank, divides),
        adaptive_avg_pool(rank, (4, 3, 3)[:rank]),  # bins of different widths, overlapping
        adaptive_avg_pool(rank, (13, 4, 2)[:rank]),  # more outputs than inputs along the first axis
    ])


def test_adaptive_avg_pool3d_forward():
    """torch.onnx has no _adaptive_avg_pool3d: ours."""
    g = torch.Generator().manual_seed(0)
    x = randn(2, 3, *SIZES[3], generator=g)
    check([Variant(f"_adaptive_avg_pool3d to {size}", lambda x, size=size: aten._adaptive_avg_pool3d.default(x, size), (x,))
           for size in ([1, 1, 1], [3, 7, 5], [4, 3, 2], [7, 2, 6])])


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_adaptive_max_pool(rank):
    """Forward values, indices (equal to ATen's, ties included) and the backward."""
    divides = {1: (1,), 2: (3, 5), 3: (3, 7, 5)}[rank]
    check([
        adaptive_max_pool(rank, [1] * rank),
        adaptive_max_pool(rank, divides),
        adaptive_max_pool(rank, (4, 3, 3)[:rank]),  # overlapping bins: torch.onnx has no translation
        adaptive_max_pool(rank, (4, 3, 3)[:rank], ties=True),
        adaptive_max_pool(rank, divides, ties=True),
    ])


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_upsample_nearest_backward(mode):
    check([variant for rank in (1, 2, 3) for variant in [
        upsample(mode, rank, scale=2.0),  # UNet / VAE upsamplers: sums of 2^rank blocks
        upsample(mode, rank, scale=3.0),
        upsample(mode, rank, scale=1.5),
        upsample(mode, rank, size=(13, 17, 11)),
        upsample(mode, rank, size=(4, 6, 3)),  # downsampling: inputs no output reads get 0
    ]])


@pytest.mark.parametrize("align_corners", [False, True])
def test_upsample_linear_backward(align_corners):
    check([variant for rank in (1, 2, 3) for variant in [
        upsample("linear", rank, scale=2.0, align_corners=align_corners),
        upsample("linear", rank, size=(13, 17, 11), align_corners=align_corners),
        upsample("linear", rank, size=(4, 6, 3), align_corners=align_corners),
        upsample("linear", rank, size=(1, 1, 1), align_corners=align_corners),  # one output: its scale is 0 with corners
    ]] + [
        upsample("bicubic", 2, scale=2.0, align_corners=align_corners),
        upsample("bicubic", 2, size=(13, 17), align_corners=align_corners),
        upsample("bicubic", 2, size=(4, 6), align_corners=align_corners),  # taps clamped at both edges
    ])


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
def test_other_dtypes(dtype):
    """onnxruntime lacks some ops in these dtypes (MaxUnpool, Resize in float64; ScatterElements'
    sum in float16): other spellings stand in."""
    check([
        avg_pool(2, 2, 2),
        avg_pool(3, 3, 2, 1, ceil_mode=True),
        max_pool(2, 2, 2),
        max_pool(2, 3, 1, 1),
        adaptive_avg_pool(2, (3, 5)),
        adaptive_max_pool(2, (4, 3)),
        upsample("nearest", 2, scale=2.0),
        upsample("linear", 2, size=(13, 17), align_corners=False),
    ], dtype)


def test_unbatched():
    """ATen's pools also take (C, *spatial) inputs."""
    check([
        avg_pool(2, 2, 2, batch=None),
        avg_pool(3, 3, 2, 1, ceil_mode=True, batch=None),
        max_pool(2, 2, 2, batch=None),
        max_pool(3, 3, 1, 1, batch=None),
        adaptive_avg_pool(2, (4, 3), batch=None),
        adaptive_max_pool(2, (4, 3), batch=None),
        adaptive_max_pool(3, (3, 7, 5), batch=None),
    ])


def test_pixel_shuffle():
    """Each the other's backward; any leading dims."""
    g = torch.Generator().manual_seed(0)

    def call(op, shape, factor):
        x = randn(*shape, generator=g)
        return Variant(f"{op.__name__} {factor} {shape}", lambda x: op(x, factor), (x,))

    check([
        call(aten.pixel_shuffle.default, (2, 12, 5, 7), 2),
        call(aten.pixel_shuffle.default, (2, 18, 5, 7), 3),
        call(aten.pixel_shuffle.default, (8, 5, 7), 2),  # unbatched
        call(aten.pixel_shuffle.default, (2, 3, 8, 5, 7), 2),  # two leading dims
        call(aten.pixel_unshuffle.default, (2, 3, 10, 14), 2),
        call(aten.pixel_unshuffle.default, (2, 2, 9, 6), 3),
        call(aten.pixel_unshuffle.default, (3, 10, 14), 2),
        call(aten.pixel_unshuffle.default, (2, 3, 2, 10, 14), 2),
    ])


# ---- a symbolic batch, symbolic spatial sizes


def test_symbolic_batch():
    """One export with the batch symbolic, run at two batch sizes (every kind of spelling: MatMul,
    AveragePool, Resize, Pad, MaxUnpool, ScatterElements, Gather)."""

    def variants(batch):
        return [
            avg_pool(2, 3, 2, 1, ceil_mode=True, batch=batch),
            avg_pool(2, 2, 2, batch=batch),
            max_pool(2, 2, 2, batch=batch),
            max_pool(3, 3, 1, 1, batch=batch),
            adaptive_avg_pool(2, (4, 3), batch=batch),
            adaptive_max_pool(2, (4, 3), batch=batch),
            upsample("nearest", 2, scale=2.0, batch=batch),
            # (not bilinear / bicubic: PyTorch's own fake kernel of their backward fails on a symbolic
            # input_size, "Expected IntList but got GenericList", before any translation runs)
            upsample("nearest", 2, size=(13, 17), batch=batch),
        ]

    examples = variants(2)
    tensors = [t for v in examples for t in v.tensors]
    batch = torch.export.Dim("batch", min=1)
    model = export(_Calls(examples), tensors, dynamic_shapes={"tensors": tuple({0: batch} for _ in tensors)})
    for n in (2, 3):
        assert_variants(model, variants(n))


def test_symbolic_spatial_sizes_are_refused_by_name():
    g = torch.Generator().manual_seed(0)
    x, grad = randn(2, 3, 9, 10, generator=g), randn(2, 3, 3, 3, generator=g)
    call = Variant("", lambda grad, x: aten._adaptive_avg_pool2d_backward.default(grad, x), (grad, x))
    height, width = torch.export.Dim("height", min=4), torch.export.Dim("width", min=4)
    with pytest.raises(Exception, match=r"_adaptive_avg_pool2d_backward: the spatial sizes must be static"):
        export(_Calls([call]), (grad, x), dynamic_shapes={"tensors": (None, {2: height, 3: width})})


# ---- joint graphs against autograd


class Bias(nn.Module):
    """x + a parameter of x's shape (less the batch), zero: ties in x stay ties, and its gradient
    says which position each gradient reached."""

    def __init__(self, *shape):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(shape))

    def forward(self, x):
        return x + self.bias


class Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class SPPF(nn.Module):
    """YOLOv5/v8's SPPF: one max pool k5 s1 p2 applied three times, the four maps concatenated."""

    def __init__(self, c):
        super().__init__()
        self.conv, self.out = nn.Conv2d(3, c, 1), nn.Conv2d(4 * c, c, 1)
        self.pool = nn.MaxPool2d(5, 1, 2)

    def forward(self, x):
        maps = [self.conv(x)]
        for _ in range(3):
            maps.append(self.pool(maps[-1]))
        return self.out(torch.cat(maps, 1))


def classifier():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                         nn.Conv2d(8, 8, 3, padding=1), nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
                         nn.AdaptiveAvgPool2d((3, 2)), nn.Flatten(), nn.Linear(48, 5))


def decoder():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Upsample(scale_factor=2), nn.Conv2d(8, 8, 3, padding=1),
                         Lambda(lambda x: F.interpolate(x, size=(25, 31), mode="bilinear", align_corners=False)),
                         nn.Conv2d(8, 16, 1), nn.PixelShuffle(2), nn.Conv2d(4, 4, 3), nn.PixelUnshuffle(2),
                         nn.AvgPool2d(2, 2))


def sequence():  # 1-D: every pool ATen runs as 2-D
    return nn.Sequential(Bias(3, 23), nn.AvgPool1d(3, 2, 1, ceil_mode=True), nn.MaxPool1d(2, 2),
                         Bias(3, 6), nn.AdaptiveMaxPool1d(4), Bias(3, 4),
                         Lambda(lambda x: F.interpolate(x, scale_factor=2.5, mode="linear")), nn.AdaptiveAvgPool1d(3))


def volume():
    return nn.Sequential(Bias(3, 6, 7, 5), nn.AvgPool3d(2, 1, 1, count_include_pad=False), nn.MaxPool3d(3, 2, 1),
                         Bias(3, 4, 4, 3), Lambda(lambda x: F.interpolate(x, size=(5, 7, 6), mode="trilinear")),
                         nn.AdaptiveMaxPool3d((3, 4, 4)), Bias(3, 3, 4, 4), nn.AdaptiveAvgPool3d((2, 3, 2)),
                         Lambda(lambda x: F.interpolate(x, scale_factor=2, mode="nearest")))


def ties():
    """Max pools over small integers: the joint graph's forward picks the indices (onnxruntime's
    MaxPool, our adaptive max pool), so its gradients land where ATen's indices say only if the
    forward picks as ATen does."""
    return nn.Sequential(Bias(3, 12, 14), nn.MaxPool2d(2, 2), Bias(3, 6, 7), nn.MaxPool2d(3, 1, 1), Bias(3, 6, 7),
                         nn.AdaptiveMaxPool2d((4, 5)))


JOINTS = {  # name -> (module factory, input, rounded to small integers)
    "classifier": (classifier, (2, 3, 19, 22), False),
    "sppf": (lambda: SPPF(8), (2, 3, 13, 17), False),
    "decoder": (decoder, (2, 3, 7, 9), False),
    "sequence": (sequence, (2, 3, 23), False),
    "volume": (volume, (2, 3, 6, 7, 5), False),
    "ties": (ties, (2, 3, 12, 14), True),
}


def assert_step(model, module, x):
    want = torch_step(module, (x,))
    got = run_onnxruntime(model, {"input_0": x.numpy()})
    assert set(got) == set(want) - {k for k in want if k.startswith("buffer.")}
    for name, value in got.items():
        assert_close(value, want[name], name, tolerance=TOLERANCE)


@pytest.mark.parametrize("name", list(JOINTS))
def test_joint_graph(name):
    factory, shape, integers = JOINTS[name]
    torch.manual_seed(0)
    module = factory()
    x = torch.randint(0, 3, shape).float() if integers else torch.randn(shape)
    assert_step(export_joint(module, (x,)), module, x)


def test_export_training_graph():
    """The exporter keeps the ops of our TABLE whole in the joint graph (routes.export_joint lets
    PyTorch decompose pixel_shuffle): here they reach our translations."""
    torch.manual_seed(0)
    module, x = decoder(), torch.randn(2, 3, 7, 9)
    assert_step(export_training_graph(module, (x,)), module, x)


def test_joint_graph_symbolic_batch():
    """Through export_training_graph (routes.export_joint's dynamic batch names WithLoss's old argument)."""
    torch.manual_seed(0)
    module = classifier()
    model = export_training_graph(module, (torch.randn(2, 3, 19, 22),), dynamic_batch=True)
    for n in (2, 3):
        assert_step(model, module, torch.randn(n, 3, 19, 22))
