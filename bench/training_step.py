"""The training-step benchmark: one whole joint forward+backward graph, before and after the graph pass.

    python -m ascend_grad.bench.training_step [--threads 1 2] [--graph resblock_b8.aot.opt] [--write]

For a bundled training graph (inputs `input_0`, parameters as initializers, outputs loss and
grad.<param>) and random input_0, it prints medians (ms) of one session.run (IO binding,
intra_op threads as given, inter_op 1) of
  original    the graph as exported, in stock onnxruntime,
  functions   the fused graph (fuse_backward_ops) in stock onnxruntime: the ascend.grad nodes run
              as their inlined ONNX function bodies, so this is the graph pass's effect alone,
  kernels     the fused graph in onnxruntime with the ascend-grad kernel library registered,
  torch       PyTorch eager, same module, parameters and loss (models.modules.default_loss):
              forward + loss + torch.autograd.grad over the parameters, torch.set_num_threads(threads),
and original / kernels (higher is better for us); below the table, the graph's node counts before
and after the pass and the fused ops it made. Before timing, every output of the fused graph with
the kernels is checked against the original's (max |diff| / max |ref| <= 1e-4); a mismatch raises.
--write puts the table in bench/results.md (under the current directory), section "## Training step".
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from ascend_grad.bench.kernels import _torch
from ascend_grad.bench.report import Tee, machine, write_section
from ascend_grad.models import GRAPHS, graph_path
from ascend_grad.testing import relative_error, run_onnxruntime
from ascend_grad.timing import median_ms, ort_runner

GRAPH = "resblock_b8.aot.opt"
TOLERANCE = 1e-4
SECTION = "## Training step"


@functools.lru_cache(maxsize=None)
def _prepare(graph: str):
    """(original model, fused model, fusion report, feeds) for a bundled graph."""
    from ascend_grad.graph_passes import fuse_backward_ops

    original = onnx.load(graph_path(graph))
    fused, report = fuse_backward_ops(onnx.load(graph_path(graph)))
    (value,) = original.graph.input
    shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
    feeds = {value.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    return original, fused, report, feeds


def _options(threads: int, with_kernels: bool):
    import onnxruntime as ort

    from ascend_grad import runtime_ext

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    return runtime_ext.session_options(options) if with_kernels else options


def check_outputs(threads: int = 1, graph: str = GRAPH) -> int:
    """Raise unless every output of the fused graph run with the kernels matches the original graph's
    (relative error <= TOLERANCE); returns the number of outputs compared."""
    original, fused, _, feeds = _prepare(graph)
    want = run_onnxruntime(original, feeds, _options(threads, False))
    got = run_onnxruntime(fused, feeds, _options(threads, True))
    if got.keys() != want.keys():
        raise AssertionError(f"{graph}: fused outputs {sorted(got)} != original outputs {sorted(want)}")
    errors = {name: relative_error(got[name], want[name]) for name in want}
    bad = {name: e for name, e in errors.items() if not e <= TOLERANCE}
    if bad:
        raise AssertionError(f"{graph}: fused+kernels differ from the original (relative error > {TOLERANCE}): {bad}")
    return len(errors)


def _torch_step(graph: str, x: np.ndarray, threads: int):
    """A zero-argument callable running the graph's module's training step in PyTorch eager, or None."""
    torch = _torch()
    if torch is None:
        return None
    from ascend_grad.models.build import make_module
    from ascend_grad.models.modules import default_loss

    torch.set_num_threads(threads)
    module = make_module(json.loads((GRAPHS / "manifest.json").read_text())[graph]["module"])
    params, tx = list(module.parameters()), torch.from_numpy(x)
    return lambda: torch.autograd.grad(default_loss(module(tx)), params)


@dataclass
class Row:
    threads: int
    original: float
    functions: float
    kernels: float
    torch: float | None

    def cells(self) -> list[str]:
        torch = "n/a" if self.torch is None else f"{self.torch:.3f}"
        return [str(self.threads), f"{self.original:.3f}", f"{self.functions:.3f}", f"{self.kernels:.3f}", torch,
                f"{self.original / self.kernels:.2f}x"]


HEADER = ["threads", "original ms", "fused (function bodies) ms", "fused+kernels ms", "torch eager ms",
          "original / fused+kernels"]


def run(threads=(1, 2), graph: str = GRAPH, out=sys.stdout) -> list[Row]:
    original, fused, report, feeds = _prepare(graph)
    compared = check_outputs(threads[0], graph)
    print(f"{graph}: fused+kernels match the original on all {compared} outputs (relative error <= {TOLERANCE:g})",
          file=sys.stderr)
    print("| " + " | ".join(HEADER) + " |", file=out)
    print("|" + "---|" * len(HEADER), file=out, flush=True)
    rows = []
    for t in threads:
        step = _torch_step(graph, next(iter(feeds.values())), t)
        time = functools.partial(median_ms, min_seconds=2.0)
        row = Row(t, time(ort_runner(original, feeds, t, False)), time(ort_runner(fused, feeds, t, False)),
                  time(ort_runner(fused, feeds, t, True)), None if step is None else time(step))
        rows.append(row)
        print("| " + " | ".join(row.cells()) + " |", file=out, flush=True)
    ops = ", ".join(f"{op} {n}" for op, n in report.counts.items())
    print(f"\nGraph `{graph}`: {report.nodes_before} nodes before the pass, {report.nodes_after} after; fused ops: {ops}.",
          file=out)
    return rows


def _write(results: Path, argv: list[str], table: str) -> None:
    body = (f"Command: `{' '.join(['python -m ascend_grad.bench.training_step', *argv])}`\n\n{machine(_torch())}\n\n"
            f"Medians in ms of one session.run / training step; see the module's docstring for the columns.\n\n{table.strip()}")
    write_section(results, SECTION, body)


def main(argv=None, prog: str | None = None) -> int:
    import io

    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog=prog or "python -m ascend_grad.bench.training_step", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--graph", default=GRAPH, help="a bundled graph (default: %(default)s)")
    parser.add_argument("--write", action="store_true", help="put the table in --results, section '## Training step'")
    parser.add_argument("--results", type=Path, default=Path("bench/results.md"), help="default: %(default)s")
    args = parser.parse_args(argv)
    table = io.StringIO()
    run(tuple(args.threads), args.graph, out=Tee(sys.stdout, table))
    if args.write:
        _write(args.results, [a for a in argv if a != "--write"], table.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
