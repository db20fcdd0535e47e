"""The translation benchmark: each ATen backward op that models/export translates, as onnxruntime
runs our translation, against PyTorch eager running the op itself, on the same shapes, in one run.

    python -m ascend_grad.bench.translations [--threads 1 2] [--family convolution pooling] [--write]

A case is one call of an ATen op with fixed arguments. Its translation is exported alone (a module
whose forward is that call, torch.onnx with models.export.TABLE) and run in onnxruntime (IO
binding, intra-op threads as given, inter-op 1); PyTorch runs the same call eagerly
(torch.set_num_threads). A case with `exported` exports that instead, on the same arguments: the
spelling a joint graph held before models/export/upsample.py (upsampling's index_put
decomposition), or the one export_training_graph's joint graph holds now, timed against the same
eager op. Before timing, every output is checked against PyTorch's (relative error
<= 1e-4 of max |torch|; a mismatch raises). It prints medians (ms) and torch / onnxruntime (higher
is better for us). --write puts the table in bench/results.md, section "## Translations".
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


from ascend_grad.timing import median_ms, ort_runner
from ascend_grad.bench.report import machine, write_section
from ascend_grad.testing import relative_error, run_onnxruntime

SECTION = "## Translations"
TOLERANCE = 1e-4


@dataclass
class Case:
    """`op(*tensors, *constants)`: tensors are made by make_tensors(torch) (seeded), constants are
    plain Python values (ints, lists, bools)."""

    label: str
    op: Callable  # e.g. lambda torch: torch.ops.aten.convolution_backward.default
    make_tensors: Callable
    constants: tuple = ()
    exported: Callable | None = None  # exported instead of op (same arguments), e.g. _as_joint's decomposition


def _randn(torch, *shape):
    return torch.randn(*shape)


# ---- the cases, by family (models/export/<family>.py); shapes from the models of models/modules.py
# and diffusers' UNet2DModel / AutoencoderKL


def conv_shapes(c_in, c_out, size, k, stride=1, padding=0, groups=1, dilation=1, transposed=False, output_padding=0):
    """(grad_output's spatial sizes, the weight's shape) of a convolution (or, transposed, a
    ConvTranspose) over spatial sizes `size`, kernel k on each axis."""
    rank = len(size)
    if transposed:
        out = [(s - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1 for s in size]
        return out, (c_in, c_out // groups, *[k] * rank)
    out = [(s + 2 * padding - dilation * (k - 1) - 1) // stride + 1 for s in size]
    return out, (c_out, c_in // groups, *[k] * rank)


def _conv(n, c_in, c_out, size, k, stride=1, padding=0, groups=1, dilation=1, transposed=False, output_padding=0,
          mask=(True, True, True)):
    """convolution_backward of a convolution over an (n, c_in, *size) input (1-D to 3-D; size an int
    is a square 2-D one), kernel k on each axis; a transposed one is the ConvTranspose's."""
    size = (size, size) if isinstance(size, int) else tuple(size)
    rank = len(size)
    out, weight = conv_shapes(c_in, c_out, size, k, stride, padding, groups, dilation, transposed, output_padding)
    label = (f"{'convT' if transposed else 'conv'}{rank}d {c_in}->{c_out} k{k} s{stride} p{padding}"
             + (f" d{dilation}" if dilation != 1 else "") + (f" g{groups}" if groups != 1 else "")
             + (f" op{output_padding}" if output_padding else "") + ("" if all(mask) else f" mask{''.join('1' if m else '0' for m in mask)}")
             + f" ({n}, {c_in}, {', '.join(map(str, size))})")
    return Case(
        label,
        lambda torch: torch.ops.aten.convolution_backward.default,
        lambda torch: (_randn(torch, n, c_out, *out), _randn(torch, n, c_in, *size), _randn(torch, *weight)),
        ([c_out], [stride] * rank, [padding] * rank, [dilation] * rank, transposed, [output_padding] * rank, groups, list(mask)),
    )


def _as_joint(torch, forward, input_size):
    """The backward of `forward` as a joint graph holds it (AOTAutograd with PyTorch's core
    decompositions, which spell upsampling as index / index_put): a traced function of grad_output."""
    from torch._decomp import core_aten_decompositions
    from torch._dispatch.python import enable_python_dispatcher
    from torch.fx.experimental.proxy_tensor import make_fx

    def backward(grad_output):
        x = torch.zeros(input_size, requires_grad=True)  # the op is linear: its backward ignores x
        return torch.autograd.grad(forward(x), x, grad_output)[0]

    with enable_python_dispatcher():  # as AOTAutograd traces: upsampling's Python decompositions apply
        return make_fx(backward, decomposition_table=core_aten_decompositions())(torch.zeros(forward(torch.zeros(input_size)).shape))


def _as_exported(torch, forward, input_size):
    """The backward of `forward` as export_training_graph's joint graph holds it now: the training
    IR's upsample node substituted (models/export/upsample.py), then traced as _as_joint."""
    from ascend_grad.models.export import upsample

    class Forward(torch.nn.Module):
        def forward(self, x):
            return forward(x)

    program = torch.export.export(Forward(), (torch.zeros(input_size),))
    if not upsample.substitute(program.graph_module):
        raise AssertionError(f"upsample.substitute left {forward} alone")
    return _as_joint(torch, program.module(), input_size)


def _upsample(mode, n, c, hw, align_corners=None, exported=False):
    """The backward of a 2x upsampling of an (n, c, hw, hw) input: ours, or (exported) the spelling
    export_training_graph's joint graph holds. (Before models/export/upsample.py the joint graph held
    index_put's ScatterND, 0.48-0.70x torch eager, and racy in onnxruntime: see scatter.py.)"""
    out = 2 * hw
    name = {"nearest": "upsample_nearest2d_backward", "bilinear": "upsample_bilinear2d_backward"}[mode]
    corners = () if mode == "nearest" else (align_corners,)
    label = f"{mode} 2x{'' if align_corners is None else f' ac{int(align_corners)}'} ({n}, {c}, {hw}, {hw})"

    def traced(trace):
        def spelling(torch):
            import torch.nn.functional as F

            kwargs = {} if mode == "nearest" else {"align_corners": align_corners}
            backward = trace(torch, lambda x: F.interpolate(x, scale_factor=2, mode=mode, **kwargs), (n, c, hw, hw))
            return lambda grad_output, *constants: backward(grad_output)

        return spelling

    suffix = ", as export_training_graph writes it" if exported else ""
    return Case(label + suffix, lambda torch: getattr(torch.ops.aten, name).default,
                lambda torch: (_randn(torch, n, c, out, out),), ([out, out], [n, c, hw, hw], *corners, 2.0, 2.0),
                exported=traced(_as_exported) if exported else None)


def _pixel_shuffle(n, c, hw, factor, decomposed=False):
    """The backward of pixel_shuffle (a pixel_unshuffle) of an (n, c, hw, hw) input: ours, or
    (decomposed) PyTorch's decomposition (a view, a permute and a view: Reshape / Transpose), which a
    joint graph held before pixel_shuffle was in our TABLE."""
    out = hw * factor

    def torch_decomposition(torch):
        traced = _as_joint(torch, lambda x: torch.nn.functional.pixel_shuffle(x, factor), (n, c, hw, hw))
        return lambda grad_output, *constants: traced(grad_output)

    return Case(f"pixel_shuffle {factor} ({n}, {c}, {hw}, {hw})" + (", torch's decomposition" if decomposed else ""),
                lambda torch: torch.ops.aten.pixel_unshuffle.default,
                lambda torch: (_randn(torch, n, c // factor**2, out, out),), (factor,),
                exported=torch_decomposition if decomposed else None)


def _max_pool(n, c, hw, k, stride, padding=0):
    """max_pool2d_with_indices_backward (its indices are its last argument) with real indices."""

    def make(torch):
        x = _randn(torch, n, c, hw, hw)
        y, indices = torch.ops.aten.max_pool2d_with_indices.default(x, [k, k], [stride] * 2, [padding] * 2)
        return _randn(torch, *y.shape), x, indices

    def call(torch):
        return lambda g, x, indices, *constants: torch.ops.aten.max_pool2d_with_indices_backward.default(g, x, *constants, indices)

    return Case(f"max_pool2d k{k} s{stride} p{padding} ({n}, {c}, {hw}, {hw})", call, make,
                ([k, k], [stride] * 2, [padding] * 2, [1, 1], False))


def _avg_pool(n, c, hw, k, stride, padding=0):
    out = (hw + 2 * padding - k) // stride + 1
    return Case(f"avg_pool2d k{k} s{stride} p{padding} ({n}, {c}, {hw}, {hw})",
                lambda torch: torch.ops.aten.avg_pool2d_backward.default,
                lambda torch: (_randn(torch, n, c, out, out), _randn(torch, n, c, hw, hw)),
                ([k, k], [stride] * 2, [padding] * 2, False, True, None))


def _adaptive_avg_pool(n, c, hw, out):
    return Case(f"adaptive_avg_pool2d to {out}x{out} ({n}, {c}, {hw}, {hw})",
                lambda torch: torch.ops.aten._adaptive_avg_pool2d_backward.default,
                lambda torch: (_randn(torch, n, c, out, out), _randn(torch, n, c, hw, hw)))


CASES: dict[str, list[Case]] = {
    "convolution": [
        # diffusion UNet / VAE (diffusers' ResnetBlock2D, Downsample2D, Upsample, AutoencoderKL)
        _conv(8, 4, 64, 32, 3, padding=1),  # the demo ResBlock's first conv
        _conv(8, 64, 4, 32, 3, padding=1),  # and its last
        _conv(2, 128, 128, 32, 3, padding=1),  # a UNet ResBlock conv
        _conv(8, 32, 32, 64, 3, padding=1),  # a small VAE's first level
        _conv(4, 256, 256, 16, 3, padding=1),
        _conv(2, 512, 512, 8, 3, padding=1),  # the bottleneck
        _conv(2, 128, 128, 32, 3, stride=2, padding=1),  # a UNet Downsample2D
        _conv(2, 128, 128, 33, 3, stride=2),  # a VAE Downsample2D: F.pad(0, 1, 0, 1), then padding 0
        _conv(2, 128, 256, 32, 1),  # a 1x1 shortcut where the channels change
        _conv(8, 3, 32, 64, 3, stride=2, padding=1, mask=(False, True, True)),  # a network's first conv: no grad_input
        # CNNs (MobileNet / EfficientNet blocks)
        _conv(8, 64, 64, 32, 3, padding=1, groups=64),  # depthwise 3x3
        _conv(8, 128, 128, 32, 3, stride=2, padding=1, groups=128),  # depthwise 3x3, stride 2
        _conv(8, 96, 96, 16, 5, padding=2, groups=96),  # depthwise 5x5
        _conv(8, 256, 256, 16, 5, stride=2, padding=2, groups=256),  # depthwise 5x5, stride 2
        _conv(8, 64, 128, 32, 1),  # pointwise 1x1
        _conv(8, 128, 128, 16, 3, padding=1, groups=4),  # grouped (ResNeXt-style)
        # 1-D, 3-D, transposed
        _conv(8, 64, 64, (256,), 3, padding=1),  # a 1-D conv (audio, sequences)
        _conv(2, 32, 32, (8, 16, 16), 3, padding=1),  # a 3-D conv (video)
        _conv(2, 128, 64, 16, 4, stride=2, padding=1, transposed=True),  # a 4x4 stride-2 ConvTranspose2d upsampler
    ],
    "pooling": [
        # diffusion UNet / VAE upsamplers (diffusers' Upsample2D: nearest 2x, then a conv)
        _upsample("nearest", 2, 128, 64),
        _upsample("nearest", 2, 128, 64, exported=True),
        _upsample("nearest", 2, 256, 32),
        _upsample("nearest", 2, 512, 16),
        _upsample("nearest", 2, 512, 16, exported=True),
        _upsample("bilinear", 2, 128, 32, align_corners=False),  # FPN / segmentation heads
        _upsample("bilinear", 2, 128, 32, align_corners=False, exported=True),
        _upsample("bilinear", 2, 128, 32, align_corners=True),
        _upsample("bilinear", 2, 64, 128, align_corners=False),  # larger: a MatMul's work grows with the width
        _pixel_shuffle(2, 256, 32, 2),  # sub-pixel upsamplers (ESPCN, some VAE decoders)
        _pixel_shuffle(2, 256, 32, 2, decomposed=True),
        # YOLO's SPPF: three max pools k5 s1 p2 in a row
        _max_pool(2, 256, 20, 5, 1, 2),
        _max_pool(2, 64, 64, 2, 2),  # VGG / UNet encoder downsampling
        _max_pool(2, 64, 112, 3, 2, 1),  # ResNet's stem
        _avg_pool(2, 128, 32, 2, 2),  # DenseNet transition, Inception-style downsampling
        _avg_pool(2, 128, 32, 3, 1, 1),  # Inception's pool branch
        _adaptive_avg_pool(2, 512, 7, 1),  # classifier heads (a joint graph holds a mean instead)
        _adaptive_avg_pool(2, 512, 14, 7),  # VGG / AlexNet's head, bins dividing the input
        _adaptive_avg_pool(2, 512, 10, 7),  # the same at another resolution: bins overlap
    ],
}


class _Call:
    """A module whose forward is one ATen call (so torch.export sees exactly that op)."""

    def __new__(cls, torch, op, constants):
        class Call(torch.nn.Module):
            def forward(self, *tensors):
                return op(*tensors, *constants)

        return Call()


def _export(torch, case: Case, tensors):
    import contextlib
    import io
    import logging
    import warnings

    from ascend_grad.models.export import TABLE
    from ascend_grad.models.export.scatter import respell_scatter_nd_add

    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(_Call(torch, (case.exported or case.op)(torch), case.constants), tensors, dynamo=True,
                                    custom_translation_table=TABLE, verbose=False)
    # as export_training_graph does: onnxruntime's ScatterND add races (a spelling with index_put
    # gave a wrong sum now and then at 2 threads)
    respell_scatter_nd_add(program.model.graph)
    return program.model_proto


@dataclass
class Row:
    case: str
    threads: int
    onnxruntime: float
    torch: float

    def cells(self) -> list[str]:
        return [self.case, str(self.threads), f"{self.onnxruntime:.3f}", f"{self.torch:.3f}",
                f"{self.torch / self.onnxruntime:.2f}x"]


HEADER = ["case", "threads", "onnxruntime ms", "torch eager ms", "torch / onnxruntime"]


def measure(torch, case: Case, threads: int) -> Row:
    torch.manual_seed(0)
    tensors = tuple(case.make_tensors(torch))
    model = _export(torch, case, tensors)
    feeds = {i.name: t.numpy() for i, t in zip(model.graph.input, tensors)}
    op = case.op(torch)
    wanted = [v for v in _as_tuple(op(*tensors, *case.constants)) if v is not None]
    got = list(run_onnxruntime(model, feeds).values())
    for k, (g, w) in enumerate(zip(got, wanted)):
        error = relative_error(g, w.numpy())
        if not error <= TOLERANCE:
            raise AssertionError(f"{case.label}: output {k} differs from PyTorch's by {error:.3g} (relative)")
    ort_ms = median_ms(ort_runner(model, feeds, threads, False))
    torch.set_num_threads(threads)
    torch_ms = median_ms(lambda: op(*tensors, *case.constants))
    return Row(case.label, threads, ort_ms, torch_ms)


def _as_tuple(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def run(threads=(1, 2), families=None, out=sys.stdout) -> list[Row]:
    import torch

    print(f"# ascend-grad translation benchmark. {machine(torch)}", file=out)
    print("| " + " | ".join(HEADER) + " |", file=out)
    print("|" + "---|" * len(HEADER), file=out, flush=True)
    rows = []
    for family in families or CASES:
        for case in CASES[family]:
            for t in threads:
                row = measure(torch, case, t)
                rows.append(row)
                print("| " + " | ".join(row.cells()) + " |", file=out, flush=True)
    return rows


def write(rows: list[Row], argv: list[str], results: Path = Path("bench/results.md")) -> None:
    import torch

    table = "\n".join(["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)] + ["| " + " | ".join(r.cells()) + " |" for r in rows])
    body = (f"Command: `{' '.join(['python -m ascend_grad.bench.translations', *argv])}`\n\n{machine(torch)}\n\n"
            f"Medians in ms; see the module's docstring for the columns.\n\n{table}")
    write_section(results, SECTION, body)


def main(argv=None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog or "python -m ascend_grad.bench.translations", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--family", nargs="+", choices=list(CASES), help="only these families (default: all)")
    parser.add_argument("--write", action="store_true", help="put the table in bench/results.md")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    rows = run(tuple(args.threads), args.family)
    if args.write:
        write(rows, [a for a in argv if a != "--write"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
