"""The alignment sweep: each kernel with its tensors at chosen places in their 4 KiB pages, and
every instruction-set path of the library timed on this machine.

    python -m ascend_grad.bench.alignment [--threads 1 2] [--dtypes float32 bfloat16] [--write]

Placements: PLACEMENTS lists (gradient input, self/x, output) byte offsets into a page: all equal,
the output just after the inputs (numpy's arrays lie 16 bytes into their pages, onnxruntime's arena
hands out 64-byte-aligned blocks), just before, half a page away, between the inputs, inputs apart.
Each is bound in place through IO binding (numpy arrays placed so); "arena" puts the inputs in
OrtValues onnxruntime allocates and takes the outputs from the session's arena. The placed arrays
are numpy's, which lie on 2 MiB pages where Linux grants transparent huge pages (numpy asks for
them); onnxruntime's allocations lie on 4 KiB pages under the "madvise" setting, so the arena
column also shows what the pages cost (16M float SiluBackward at page offsets (16, 16, 64): 8.3-9.0
ms with the output in a numpy array, 10.9-11.5 in the arena; docs/benchmarks.md, "Pages").

The sweep table gives, per case, the median ms at the worst and the best placement (which ones;
each the median of ROUNDS medians taken in turn over all placements, so drift hits all alike, every
round on newly allocated arrays, so no placement keeps one set of pages), worst / best, the noise
it stands against (one placement's rounds, max / min: the median over the placements), the arena
placement, PyTorch ATen on the same placed inputs (its worst and best), and
the floor: an onnxruntime Add over float32 arrays of the same bytes at the same placement, scaled
to the arrays the kernel moves (3 for the elementwise ops and GroupNormSwish, 5 for
GroupNormSwishGrad: see bench/kernels.py); fused / floor is at the worst placement.

The instruction-set table times each path the CPU has (ASCEND_GRAD_ISA forced, one child process
each, ROUNDS rounds with the paths in rotating order, the median per case) on the float32 and
bfloat16 cases with every tensor at the start of a page (the arena's placement differs from process
to process), one thread, and names the path the library picks by itself and the fastest. Before:
the CPU model, the path picked and the caches.
--write puts both tables in bench/results.md, section "## Alignment sweep".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ascend_grad import ops, runtime_ext
from ascend_grad.bench.kernels import BFLOAT16, DTYPES, GROUPS, NHWC_SHAPE, TORCH_DTYPES, _torch, add_model
from ascend_grad.bench.report import Tee, cpu_caches, cpu_model, kernel_isa, machine, write_section
from ascend_grad.testing import group_norm_feeds, placed, random_array, to_ort_value
from ascend_grad.timing import median_ms

SECTION = "## Alignment sweep"
PLACEMENTS = [
    (0, 0, 0), (16, 16, 16), (16, 16, 64), (16, 16, 0), (0, 0, 48), (528, 528, 576), (64, 64, 16),
    (4080, 4080, 4032), (16, 16, 2064), (128, 16, 64), (16, 128, 64), (0, 528, 16), (4032, 48, 0),
]
ELEMENTWISE_SIZES = [1 << 20, 1 << 24]
GROUP_NORM_SHAPE = (2, 320, 64, 64)
ROUNDS = 5


def placed_copy(like: np.ndarray, offset: int) -> np.ndarray:
    """A copy of `like` whose first byte lies `offset` bytes into a page."""
    array = placed(like.shape, like.dtype, offset)
    array[...] = like
    return array


@dataclass
class Case:
    """One kernel on one input set: the ascend.grad model, its feeds, which inputs are streams (placed
    at the gradient / x offsets), the output placed at the output offset, and the arrays it moves."""

    label: str
    model: object
    feeds: dict
    streams: tuple  # (gradient input name or None, x input name)
    output: str
    arrays_moved: int
    aten: object = None  # fn(placed feeds) -> result, or None


def cases(dtype, torch) -> list[Case]:
    rng = np.random.default_rng(0)
    found = []
    for op_type in ("SiluBackward", "MishBackward"):
        for n in ELEMENTWISE_SIZES:
            feeds = {"gradOutput": random_array(rng, n, dtype), "self": random_array(rng, n, dtype, scale=4.0)}
            aten = None
            if torch is not None:
                fn = torch.ops.aten.silu_backward if op_type == "SiluBackward" else torch.ops.aten.mish_backward
                aten = _aten(torch, dtype, lambda g, x, fn=fn: fn(g, x), ("gradOutput", "self"))
            found.append(Case(f"{op_type} {n >> 20}M", ops.make_node_model(op_type, feeds), feeds,
                              ("gradOutput", "self"), "gradInput", 3, aten))
    grad_feeds = group_norm_feeds(rng, GROUP_NORM_SHAPE, GROUPS, dtype, dtype)
    forward_feeds = {k: grad_feeds[k] for k in ("x", "gamma", "beta")}
    found.append(Case(f"GroupNormSwishGrad {GROUP_NORM_SHAPE} G={GROUPS}",
                      ops.make_node_model("GroupNormSwishGrad", grad_feeds, num_groups=GROUPS), grad_feeds,
                      ("dy", "x"), "dx", 5))
    found.append(Case(f"GroupNormSwish {GROUP_NORM_SHAPE} G={GROUPS}",
                      ops.make_node_model("GroupNormSwish", forward_feeds, num_groups=GROUPS), forward_feeds,
                      (None, "x"), "y", 3))
    # channels last (NHWC_SHAPE: the shape above with C last), a layout with kernels of its own
    grad_feeds = group_norm_feeds(rng, NHWC_SHAPE, GROUPS, dtype, dtype, data_format="NHWC")
    forward_feeds = {k: grad_feeds[k] for k in ("x", "gamma", "beta")}
    found.append(Case(f"GroupNormSwishGrad NHWC {NHWC_SHAPE} G={GROUPS}",
                      ops.make_node_model("GroupNormSwishGrad", grad_feeds, num_groups=GROUPS, data_format="NHWC"),
                      grad_feeds, ("dy", "x"), "dx", 5))
    found.append(Case(f"GroupNormSwish NHWC {NHWC_SHAPE} G={GROUPS}",
                      ops.make_node_model("GroupNormSwish", forward_feeds, num_groups=GROUPS, data_format="NHWC"),
                      forward_feeds, (None, "x"), "y", 3))
    return found


def _aten(torch, dtype, fn, names):
    tdtype = TORCH_DTYPES[dtype.name](torch)

    def run(feeds):
        args = [torch.from_numpy(feeds[k].view(np.int16)).view(tdtype) if dtype == BFLOAT16 else torch.from_numpy(feeds[k])
                for k in names]
        return lambda: fn(*args)

    return run


class Runner:
    """One session per case and thread count; bound(placement) runs the case with its streams and
    output placed so (placement None: the arena), times(placements) times them."""

    def __init__(self, case: Case, threads: int):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        runtime_ext.session_options(options)
        self.case, self.ort = case, ort
        self.session = ort.InferenceSession(case.model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        self.outputs = [o.name for o in self.session.get_outputs()]

    def placed_feeds(self, placement) -> dict:
        gradient, x = self.case.streams
        offsets = {gradient: placement[0], x: placement[1]}
        return {k: placed_copy(v, offsets[k]) if k in offsets else v for k, v in self.case.feeds.items()}

    def bound(self, placement):
        """A zero-argument callable running the case once with its tensors placed so (None: arena)."""
        from onnx import TensorProto

        binding = self.session.io_binding()
        keep = []
        if placement is None:
            for name, value in self.case.feeds.items():
                arena = self.ort.OrtValue.ortvalue_from_shape_and_type(
                    list(value.shape), TensorProto.BFLOAT16 if value.dtype == BFLOAT16 else value.dtype, "cpu")
                arena.update_inplace(value.view(np.uint16) if value.dtype == BFLOAT16 else value)
                keep.append(arena)
                binding.bind_ortvalue_input(name, arena)
            for name in self.outputs:
                binding.bind_output(name, "cpu")
        else:
            for name, value in self.placed_feeds(placement).items():
                keep.append(to_ort_value(value))
                binding.bind_ortvalue_input(name, keep[-1])
            # (each output placed is shaped and typed like x: gradInput without broadcasting, dx, y)
            like = self.case.feeds[self.case.streams[1]]
            keep.append(to_ort_value(placed(like.shape, like.dtype, placement[2])))
            for name in self.outputs:
                if name == self.case.output:
                    binding.bind_ortvalue_output(name, keep[-1])
                else:
                    binding.bind_output(name, "cpu")
        return lambda: (keep, self.session.run_with_iobinding(binding))

    def rounds(self, placements, rounds: int = ROUNDS) -> dict:
        """Per placement, the medians of `rounds` rounds taken in turn over all placements (the
        machine's own drift then falls on every placement alike), each round on new arrays (new
        pages: what a placement costs, not what one set of pages happened to cost)."""
        taken = {p: [] for p in placements}
        for _ in range(rounds):
            for p in placements:
                taken[p].append(median_ms(self.bound(p), min_seconds=0.1, min_reps=3))
        return taken

    def times(self, placements, rounds: int = ROUNDS) -> dict:
        """Median ms per placement: the median of its rounds' medians (see rounds)."""
        return medians(self.rounds(placements, rounds))


def medians(taken: dict) -> dict:
    """Per placement, the median of its rounds' ms."""
    return {p: float(np.median(ms)) for p, ms in taken.items()}


def add_floor_ms(nbytes: int, placement, threads: int, arrays_moved: int) -> float:
    """An onnxruntime Add c = a + b over float32 arrays of nbytes each, placed as (a, b, c), scaled
    from its 3 arrays to the kernel's."""
    import onnxruntime as ort

    n = max(nbytes // 4, 1)
    model = add_model(n)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    a, b, c = (placed_copy(rng.random(n, np.float32), offset) for offset in placement)
    binding = session.io_binding()
    binding.bind_ortvalue_input("a", ort.OrtValue.ortvalue_from_numpy(a))
    binding.bind_ortvalue_input("b", ort.OrtValue.ortvalue_from_numpy(b))
    binding.bind_ortvalue_output("c", ort.OrtValue.ortvalue_from_numpy(c))
    return median_ms(lambda: session.run_with_iobinding(binding), min_seconds=0.25) * arrays_moved / 3


SWEEP_HEADER = ["case", "dtype", "threads", "worst ms (placement)", "best ms (placement)", "worst / best",
                "one placement's rounds, max / min", "arena ms",
                "ATen worst / best ms", "Add floor ms (fused worst / floor)"]


def sweep(threads=(1, 2), dtypes=("float32", "bfloat16"), out=None, torch=None) -> list[list[str]]:
    out = out or sys.stdout
    print("| " + " | ".join(SWEEP_HEADER) + " |", file=out)
    print("|" + "---|" * len(SWEEP_HEADER), file=out, flush=True)
    rows = []
    for name in dtypes:
        dtype = DTYPES[name]
        for case in cases(dtype, torch):
            for t in threads:
                runner = Runner(case, t)
                taken = runner.rounds([*PLACEMENTS, None])
                times = medians(taken)
                arena = times.pop(None)
                # the noise: how far one placement's rounds lie apart (median over placements)
                noise = float(np.median([max(ms) / min(ms) for ms in taken.values()]))
                worst, best = max(times, key=times.get), min(times, key=times.get)
                aten = "n/a"
                if case.aten is not None:
                    torch.set_num_threads(t)
                    aten_times = [median_ms(case.aten(runner.placed_feeds(p)), min_seconds=0.25) for p in PLACEMENTS]
                    aten = f"{max(aten_times):.3f} / {min(aten_times):.3f}"
                nbytes = case.feeds[case.streams[1]].nbytes
                floor = add_floor_ms(nbytes, worst, t, case.arrays_moved)
                row = [case.label, name, str(t), f"{times[worst]:.3f} {worst}", f"{times[best]:.3f} {best}",
                       f"{times[worst] / times[best]:.2f}", f"{noise:.2f}", f"{arena:.3f}", aten,
                       f"{floor:.3f} ({times[worst] / floor:.2f}x)"]
                rows.append(row)
                print("| " + " | ".join(row) + " |", file=out, flush=True)
    return rows


ISA_PLACEMENT = (0, 0, 0)


def isa_child(dtypes) -> dict[str, float]:
    """(in a child with ASCEND_GRAD_ISA set) ms of every case at ISA_PLACEMENT, one thread."""
    return {f"{case.label} {name}": Runner(case, 1).times([ISA_PLACEMENT], rounds=1)[ISA_PLACEMENT] for name in dtypes
            for case in cases(DTYPES[name], None)}


def instruction_sets(dtypes=("float32", "bfloat16"), out=None) -> None:
    out = out or sys.stdout
    picked = kernel_isa()
    available = runtime_ext.runnable_isas()[::-1]  # (narrowest first)
    # ROUNDS child processes per path, the paths in turn and their order rotated each round, so the
    # machine's drift falls on every path alike; each case's median over the rounds
    taken = {isa: [] for isa in available}
    for r in range(ROUNDS):
        for isa in available[r % len(available):] + available[:r % len(available)]:
            env = dict(os.environ, ASCEND_GRAD_ISA=isa)
            done = subprocess.run([sys.executable, "-m", "ascend_grad.bench.alignment", "--isa-child", "--dtypes", *dtypes],
                                  capture_output=True, text=True, env=env, check=True)
            taken[isa].append(json.loads(done.stdout.strip().splitlines()[-1]))
    timings = {isa: {label: float(np.median([t[label] for t in runs])) for label in runs[0]} for isa, runs in taken.items()}
    header = [f"case (1 thread, placement {ISA_PLACEMENT})", *[f"{isa} ms" for isa in available], "fastest"]
    print("| " + " | ".join(header) + " |", file=out)
    print("|" + "---|" * len(header), file=out)
    for label in timings[available[0]]:
        ms = {isa: timings[isa][label] for isa in available}
        fastest = min(ms, key=ms.get)
        print("| " + " | ".join([label, *[f"{ms[isa]:.3f}" for isa in available], fastest]) + " |", file=out, flush=True)
    print(f"\nThe library picks `{picked}` on this CPU; paths it lacks: "
          f"{', '.join(isa for isa in runtime_ext.ISA_FEATURES if isa not in available) or 'none'}.", file=out)


def main(argv=None, prog: str | None = None) -> int:
    import io

    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog=prog or "python -m ascend_grad.bench.alignment", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=list(DTYPES))
    parser.add_argument("--write", action="store_true", help=f"put the tables in --results, section '{SECTION}'")
    parser.add_argument("--results", type=Path, default=Path("bench/results.md"), help="default: %(default)s")
    parser.add_argument("--isa-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.isa_child:
        print(json.dumps(isa_child(args.dtypes)))
        return 0
    torch = _torch()
    table = io.StringIO()
    tee = Tee(sys.stdout, table)
    print(f"CPU: {cpu_model()}; kernels: {kernel_isa()}; caches: {cpu_caches()}.\n", file=tee)
    instruction_sets(tuple(args.dtypes), out=tee)
    print("", file=tee)
    sweep(tuple(args.threads), tuple(args.dtypes), out=tee, torch=torch)
    if args.write:
        command = " ".join(["python -m ascend_grad.bench.alignment", *[a for a in argv if a != "--write"]])
        write_section(args.results, SECTION, f"Command: `{command}`\n\n{machine(torch)}\n\n"
                                             f"Medians in ms; see the module's docstring for the columns.\n\n"
                                             f"{table.getvalue().strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
