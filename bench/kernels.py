"""The kernel benchmark: the fused kernels against every competitor, side by side, in one run.

    python -m ascend_grad.bench.kernels [--threads 1 2] [--dtypes float32 bfloat16 float16] [--no-compile]
                                        [--no-sweep] [--write]

For each case it prints medians (ms) of
  fused      onnxruntime with the ascend-grad kernel library (the op as one node),
  aten       PyTorch eager: aten.silu_backward / aten.mish_backward; for GroupNormSwishGrad the
             recompute path native_group_norm + silu_backward + native_group_norm_backward; for
             GroupNormSwish (the forward) native_group_norm + silu,
  compile    the same PyTorch function through torch.compile (inductor),
  decomposed onnxruntime running the op's ONNX function body (primitive ops, inlined); for
             GroupNormSwish the exporters' spelling instead (Reshape, InstanceNormalization,
             Reshape, Mul, Add, Sigmoid, Mul: what the graph pass replaces),
  floor      the memory-bandwidth floor: bytes that must move / streaming bandwidth measured in
             this run (an onnxruntime Add over arrays of the same size and thread count),
and the ratios competitor / fused (higher is better for us) and fused / floor (1.0 is the floor).
Elementwise cases move 2 inputs and 1 output; GroupNormSwishGrad is two passes (x, dy; then x, dy
again and dx): 5 arrays of T; GroupNormSwish two (x; then x again and y): 3.

After the table it runs bench/alignment.py's sweeps (--no-sweep skips them): every instruction-set
path timed, and each kernel with its tensors at chosen places in their pages.
"""

from __future__ import annotations

import argparse
import functools
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ascend_grad import ops
from ascend_grad.bench.report import Tee, cpu_model, kernel_isa, machine, write_section
from ascend_grad.testing import BFLOAT16, group_norm_feeds, random_array
from ascend_grad.timing import median_ms, ort_runner

SIZES = [1 << 20, 1 << 24]
GROUP_NORM_SHAPES = [(2, 320, 64, 64), (8, 128, 32, 32), (1, 512, 128, 128)]
NHWC_SHAPE = (2, 64, 64, 320)  # the first shape channels last (data_format "NHWC", a CPU extension)
GROUPS = 32
DTYPES = {"float32": np.dtype(np.float32), "bfloat16": BFLOAT16, "float16": np.dtype(np.float16)}
TORCH_DTYPES = {"float32": lambda t: t.float32, "bfloat16": lambda t: t.bfloat16, "float16": lambda t: t.float16}


_bandwidth_cache: dict[tuple[int, int], float] = {}


def add_model(n: int):
    """c = a + b over float32 vectors of n: the streaming yardstick of the floor columns."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        "stream",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, [n]) for k in "ab"],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [n])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def stream_bandwidth(array_bytes: int, threads: int) -> float:
    """Bytes per second of c = a + b over float32 arrays of array_bytes each (2 reads, 1 write)."""
    key = (array_bytes, threads)
    if key not in _bandwidth_cache:
        n = max(array_bytes // 4, 1)
        model = add_model(n)
        a, b = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
        seconds = median_ms(ort_runner(model, {"a": a, "b": b}, threads, False)) / 1e3
        if threads == 1:  # numpy's add is one thread: keep the faster of the two
            c = np.empty_like(a)
            seconds = min(seconds, median_ms(lambda: np.add(a, b, out=c)) / 1e3)
        _bandwidth_cache[key] = 3 * n * 4 / seconds
    return _bandwidth_cache[key]


@dataclass
class Row:
    case: str
    dtype: str
    threads: int
    fused: float
    aten: float | None
    compiled: float | None
    decomposed: float | None
    floor: float

    def cells(self) -> list[str]:
        def vs(t):
            return "n/a" if t is None else f"{t:.3f} ({t / self.fused:.2f}x)"

        return [self.case, self.dtype, str(self.threads), f"{self.fused:.3f}", vs(self.aten), vs(self.compiled),
                vs(self.decomposed), f"{self.floor:.3f} ({self.fused / self.floor:.2f}x)"]


HEADER = ["case", "dtype", "threads", "fused ms", "ATen ms (x fused)", "torch.compile ms (x)", "ORT decomposed ms (x)",
          "floor ms (fused/floor)"]


@functools.cache
def _torch():
    """torch, or None (said once on stderr: its columns then read n/a)."""
    try:
        import torch
    except ImportError:
        print('PyTorch is not installed: the PyTorch columns read n/a (pip install "ascend-grad[torch]")',
              file=sys.stderr)
        return None
    return torch


def _torch_timings(torch, fn, args, threads, compile_too):
    torch.set_num_threads(threads)
    try:
        aten = median_ms(lambda: fn(*args))
    except RuntimeError:  # a dtype this build of ATen has no CPU kernel for
        return None, None
    compiled = None
    if compile_too:
        torch._dynamo.reset()  # a fresh compile per case: past dynamo's recompile limit it would run eagerly
        compiled_fn = torch.compile(fn, dynamic=False)
        compiled = median_ms(lambda: compiled_fn(*args))
    return aten, compiled


def elementwise_rows(op_type, n, dtype, threads, torch, compile_too):
    rng = np.random.default_rng(0)
    go, x = random_array(rng, n, dtype), random_array(rng, n, dtype, scale=4.0)
    feeds = {"gradOutput": go, "self": x}
    model = ops.make_node_model(op_type, feeds)
    fused = median_ms(ort_runner(model, feeds, threads, True))
    decomposed = median_ms(ort_runner(model, feeds, threads, False))
    aten = compiled = None
    if torch is not None:
        tdtype = TORCH_DTYPES[dtype.name](torch)
        args = (torch.from_numpy(go.astype(np.float32)).to(tdtype), torch.from_numpy(x.astype(np.float32)).to(tdtype))
        fn = torch.ops.aten.silu_backward if op_type == "SiluBackward" else torch.ops.aten.mish_backward
        aten, compiled = _torch_timings(torch, lambda g, v: fn(g, v), args, threads, compile_too)
    size = dtype.itemsize
    floor = 3 * n * size / stream_bandwidth(n * size, threads) * 1e3
    label = f"{op_type} {n >> 20}M"
    return Row(label, dtype.name, threads, fused, aten, compiled, decomposed, floor)


def _layout(data_format):
    """(attributes of the node, torch tensor from a numpy array of that layout, label part)."""
    if data_format == "NCHW":
        return {}, lambda torch, a: torch.from_numpy(a), ""
    # channels last: the logical NCHW tensor over the NHWC array (PyTorch's channels_last format)
    def to_torch(torch, a):
        t = torch.from_numpy(a)
        return t.permute(0, a.ndim - 1, *range(1, a.ndim - 1)) if a.ndim > 2 else t

    return {"data_format": "NHWC"}, to_torch, "NHWC "


def group_norm_rows(shape, dtype, threads, torch, compile_too, data_format="NCHW"):
    rng = np.random.default_rng(0)
    attrs, to_torch, layout = _layout(data_format)
    feeds = group_norm_feeds(rng, shape, GROUPS, dtype, dtype, data_format=data_format)
    model = ops.make_node_model("GroupNormSwishGrad", feeds, num_groups=GROUPS, **attrs)
    fused = median_ms(ort_runner(model, feeds, threads, True))
    decomposed = median_ms(ort_runner(model, feeds, threads, False))
    aten = compiled = None
    if torch is not None:
        tdtype = TORCH_DTYPES[dtype.name](torch)

        def recompute(dy, x, gamma, beta):
            N, C = x.shape[:2]
            HxW = x.numel() // (N * C)
            z, mean, rstd = torch.ops.aten.native_group_norm(x, gamma, beta, N, C, HxW, GROUPS, 1e-5)
            g = torch.ops.aten.silu_backward(dy, z)
            return torch.ops.aten.native_group_norm_backward(g, x, mean, rstd, gamma, N, C, HxW, GROUPS, [True, True, True])

        args = tuple(to_torch(torch, feeds[k].astype(np.float32)).to(tdtype) for k in ("dy", "x", "gamma", "beta"))
        aten, compiled = _torch_timings(torch, recompute, args, threads, compile_too)
    n = int(np.prod(shape))
    floor = 5 * n * dtype.itemsize / stream_bandwidth(n * dtype.itemsize, threads) * 1e3
    return Row(f"GroupNormSwishGrad {layout}{shape} G={GROUPS}", dtype.name, threads, fused, aten, compiled, decomposed,
               floor)


def exporter_group_norm_swish(shape, num_groups, dtype, eps=1e-5):
    """GroupNorm + SiLU as torch.onnx writes it: Reshape to (N, G, -1), InstanceNormalization with
    unit scale and zero bias, Reshape back, Mul gamma, Add beta (both (C, 1, 1)), Sigmoid, Mul."""
    from onnx import TensorProto, helper, numpy_helper

    N, C = shape[:2]
    elem = TensorProto.BFLOAT16 if dtype == BFLOAT16 else helper.np_dtype_to_tensor_dtype(dtype)
    spatial = [1] * (len(shape) - 2)

    def const(name, values):  # (make_tensor rounds float values to float16 / bfloat16)
        return helper.make_tensor(name, elem, [len(values)], [float(v) for v in values])

    nodes = [helper.make_node("Reshape", ["x", "grouped"], ["g"]),
             helper.make_node("InstanceNormalization", ["g", "ones_G", "zeros_G"], ["n"], epsilon=eps),
             helper.make_node("Shape", ["x"], ["x_shape"]),
             helper.make_node("Reshape", ["n", "x_shape"], ["back"]),
             helper.make_node("Mul", ["back", "gamma"], ["scaled"]),
             helper.make_node("Add", ["scaled", "beta"], ["z"]),
             helper.make_node("Sigmoid", ["z"], ["s"]),
             helper.make_node("Mul", ["z", "s"], ["y"])]
    initializers = [numpy_helper.from_array(np.array([N, num_groups, -1], np.int64), "grouped"),
                    const("ones_G", np.ones(num_groups)), const("zeros_G", np.zeros(num_groups))]
    graph = helper.make_graph(
        nodes, "exporter_group_norm_swish",
        [helper.make_tensor_value_info("x", elem, list(shape)),
         helper.make_tensor_value_info("gamma", elem, [C, *spatial]),
         helper.make_tensor_value_info("beta", elem, [C, *spatial])],
        [helper.make_tensor_value_info("y", elem, list(shape))], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def group_norm_swish_rows(shape, dtype, threads, torch, compile_too, data_format="NCHW"):
    rng = np.random.default_rng(0)
    attrs, to_torch, layout = _layout(data_format)
    feeds = {k: v for k, v in group_norm_feeds(rng, shape, GROUPS, dtype, dtype, data_format=data_format).items()
             if k in ("x", "gamma", "beta")}
    model = ops.make_node_model("GroupNormSwish", feeds, num_groups=GROUPS, **attrs)
    fused = median_ms(ort_runner(model, feeds, threads, True))
    spatial = (1,) * (len(shape) - 2)
    spelled = {"x": feeds["x"], "gamma": feeds["gamma"].reshape(-1, *spatial), "beta": feeds["beta"].reshape(-1, *spatial)}
    try:
        if data_format == "NCHW":
            decomposed = median_ms(ort_runner(exporter_group_norm_swish(shape, GROUPS, dtype), spelled, threads, False))
        else:  # (no exporter writes channels last: the op's function body)
            decomposed = median_ms(ort_runner(model, feeds, threads, False))
    except Exception:  # (onnxruntime's CPU InstanceNormalization has no bfloat16 kernel)
        decomposed = None
    aten = compiled = None
    if torch is not None:
        tdtype = TORCH_DTYPES[dtype.name](torch)

        def forward(x, gamma, beta):
            N, C = x.shape[:2]
            z = torch.ops.aten.native_group_norm(x, gamma, beta, N, C, x.numel() // (N * C), GROUPS, 1e-5)[0]
            return torch.ops.aten.silu(z)

        args = tuple(to_torch(torch, feeds[k].astype(np.float32)).to(tdtype) for k in ("x", "gamma", "beta"))
        aten, compiled = _torch_timings(torch, forward, args, threads, compile_too)
    n = int(np.prod(shape))
    floor = 3 * n * dtype.itemsize / stream_bandwidth(n * dtype.itemsize, threads) * 1e3
    return Row(f"GroupNormSwish {layout}{shape} G={GROUPS}", dtype.name, threads, fused, aten, compiled, decomposed, floor)


def run(threads=(1, 2), dtypes=("float32", "bfloat16", "float16"), compile_too=True, out=sys.stdout) -> list[Row]:
    import platform

    torch = _torch()
    print(f"# ascend-grad kernel benchmark: {cpu_model()} ({platform.machine()}, {kernel_isa()} kernels), "
          f"{__import__('os').cpu_count()} cores, torch {torch.__version__ if torch else 'absent'}", file=out)
    print("| " + " | ".join(HEADER) + " |", file=out)
    print("|" + "---|" * len(HEADER), file=out, flush=True)
    rows = []
    chosen = [DTYPES[d] for d in dtypes]
    for dtype in chosen:
        for t in threads:
            cases = [lambda op=op, n=n: elementwise_rows(op, n, dtype, t, torch, compile_too)
                     for op in ("SiluBackward", "MishBackward") for n in SIZES]
            cases += [lambda shape=shape: group_norm_rows(shape, dtype, t, torch, compile_too) for shape in GROUP_NORM_SHAPES]
            cases += [lambda shape=shape: group_norm_swish_rows(shape, dtype, t, torch, compile_too)
                      for shape in GROUP_NORM_SHAPES]
            cases += [lambda rows=rows: rows(NHWC_SHAPE, dtype, t, torch, compile_too, "NHWC")
                      for rows in (group_norm_rows, group_norm_swish_rows)]
            for case in cases:
                row = case()
                rows.append(row)
                print("| " + " | ".join(row.cells()) + " |", file=out, flush=True)
    return rows


SECTION = "## Kernels"
NOTES = """Medians in ms; (x) is competitor time / fused time; the floor column's (x) is fused / floor.
ORT decomposed = onnxruntime running the op's ONNX function body (primitive ops), without the kernel
library; for GroupNormSwish, the exporters' spelling (Reshape, InstanceNormalization, Reshape, Mul,
Add, Sigmoid, Mul; onnxruntime's CPU InstanceNormalization has no bfloat16 kernel: n/a). NHWC rows:
data_format "NHWC" (channels last, a CPU extension), ATen on channels_last tensors, and for
GroupNormSwish the op's function body (no exporter writes channels last)."""


def main(argv=None, prog: str | None = None) -> int:
    import io

    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog=prog or "python -m ascend_grad.bench.kernels", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16", "float16"], choices=list(DTYPES))
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile (it compiles each case once)")
    parser.add_argument("--no-sweep", action="store_true", help="skip the alignment sweep (bench/alignment.py)")
    parser.add_argument("--write", action="store_true", help=f"put the tables in --results, sections '{SECTION}' "
                                                              "and the sweep's")
    parser.add_argument("--results", type=Path, default=Path("bench/results.md"), help="default: %(default)s")
    args = parser.parse_args(argv)
    table = io.StringIO()
    run(tuple(args.threads), tuple(args.dtypes), not args.no_compile, out=Tee(sys.stdout, table))
    if args.write:
        command = " ".join(["python -m ascend_grad.bench.kernels", *[a for a in argv if a != "--write"]])
        body = table.getvalue().split("\n", 1)[1]  # (past the run's own title line)
        write_section(args.results, SECTION, f"Command: `{command}`\n\n{machine(_torch())}\n\n{NOTES}\n\n{body.strip()}")
    if not args.no_sweep:
        from ascend_grad.bench import alignment

        print()
        # (the sweep's table is float32 and bfloat16, as the performance issue asked: float16 would add
        # a quarter hour of placements without another store path to see)
        sweep_args = ["--threads", *map(str, args.threads), "--dtypes", *[d for d in args.dtypes if d != "float16"]]
        alignment.main(sweep_args + (["--write", "--results", str(args.results)] if args.write else []))
    return 0


if __name__ == "__main__":
    sys.exit(main())
