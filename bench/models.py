"""The real-model benchmark: export_training_graph on the models of models.modules.REAL_MODELS
(diffusers' UNet2DModel and AutoencoderKL, a detector and a classifier with BatchNorm), then one
training step of each in onnxruntime and in PyTorch, in one run.

    python -m ascend_grad.bench.models [--models unet vae ...] [--threads 1 2] [--batch 2] [--write]

For each model it prints
  export     seconds of export_training_graph with our ops (fused) and without (plain), the graphs'
             node counts, the ascend.grad nodes against the SiLU / Mish / GroupNorm+SiLU the forward
             calls, and the largest relative error of any output (loss, gradients, buffer updates)
             against PyTorch autograd in float64, with the kernel library;
  step       medians (ms) of one training step: the plain graph in stock onnxruntime, the fused graph
             with the kernel library, the fused graph in stock onnxruntime (our ops as their function
             bodies), PyTorch eager (forward, loss, autograd.grad), at each thread count;
  breakdown  at the first thread count, onnxruntime's profiler: the op types taking the most time in
             the plain graph and in the fused graph (with kernels), and the backward of SiLU / Mish /
             GroupNorm+SiLU before (the plain graph's nodes the graph pass replaces) and after (our
             backward nodes). The profiler adds its own overhead per node: shares, not step times.
--write puts the tables in bench/results.md, section "## Real models".
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from ascend_grad import DOMAIN
from ascend_grad.bench.report import machine, write_section
from ascend_grad.timing import median_ms, node_times, op_type_times, ort_runner

SECTION = "## Real models"
BACKWARD_OPS = ("SiluBackward", "MishBackward", "GroupNormSwishGrad")


def _table(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows])


def _feeds(inputs) -> dict[str, np.ndarray]:
    return {f"input_{k}": t.numpy() for k, t in enumerate(inputs)}


def _torch_step(torch, module, inputs, threads):
    from ascend_grad.models.modules import default_loss

    params = [p for p in module.parameters() if p.requires_grad]

    def step():
        torch.autograd.grad(default_loss(module(*inputs)), params)

    torch.set_num_threads(threads)
    return step


def export_row(name, module, inputs) -> tuple[list, object, object]:
    """(table row, fused graph, plain graph)."""
    from ascend_grad.models import export_training_graph
    from ascend_grad.models.export.reference import activation_counts, step_errors, torch_step
    from ascend_grad.testing import run_kernels

    start = time.perf_counter()
    fused = export_training_graph(module, inputs)
    fused_s = time.perf_counter() - start
    start = time.perf_counter()
    plain = export_training_graph(module, inputs, fuse=False)
    plain_s = time.perf_counter() - start
    ours = Counter(n.op_type for n in fused.graph.node if n.domain == DOMAIN)
    counted = activation_counts(module, inputs)
    want = torch_step(module, inputs)
    got = run_kernels(fused, _feeds(inputs))
    worst = max(step_errors(got, want).values())
    found = " ".join(f"{op} {ours[op]}" for op in (*BACKWARD_OPS, "GroupNormSwish") if ours[op])
    expected = " ".join(f"{kind} {n}" for kind, n in sorted(counted.items()))
    row = [name, f"{sum(p.numel() for p in module.parameters()):,}", f"{fused_s:.1f} / {plain_s:.1f}",
           f"{len(plain.graph.node)} -> {len(fused.graph.node)}", found, expected, f"{worst:.1e}"]
    return row, fused, plain


EXPORT_HEADER = ["model", "parameters", "export s (fused / plain)", "nodes plain -> fused", "ascend.grad nodes",
                 "in the forward", "max rel. error vs float64"]
STEP_HEADER = ["model", "threads", "plain ORT ms", "fused+kernels ms", "fused, function bodies ms", "torch eager ms",
               "plain / fused+kernels", "torch / fused+kernels"]


def step_rows(torch, name, module, inputs, fused, plain, threads) -> list[list]:
    feeds = _feeds(inputs)
    rows = []
    for t in threads:
        timed = [median_ms(run, min_seconds=1.5) for run in (
            ort_runner(plain, feeds, t, False), ort_runner(fused, feeds, t, True), ort_runner(fused, feeds, t, False),
            _torch_step(torch, module, inputs, t))]
        plain_ms, kernels_ms, bodies_ms, torch_ms = timed
        rows.append([name, t, f"{plain_ms:.2f}", f"{kernels_ms:.2f}", f"{bodies_ms:.2f}", f"{torch_ms:.2f}",
                     f"{plain_ms / kernels_ms:.2f}x", f"{torch_ms / kernels_ms:.2f}x"])
    return rows


def breakdown(name, fused, plain, inputs, threads: int, top: int = 6) -> str:
    """The op types that take the most time, plain and fused, and the backward of our activations."""
    from ascend_grad.graph_passes import fuse_backward_ops

    feeds = _feeds(inputs)
    before, after = op_type_times(plain, feeds, threads, False), op_type_times(fused, feeds, threads, True)
    total_before, total_after = sum(before.values()), sum(after.values())

    def share(times, total):
        ranked = sorted(times.items(), key=lambda kv: -kv[1])[:top]
        return ", ".join(f"{op} {ms / total:.0%}" for op, ms in ranked)

    # the plain graph's nodes that the graph pass replaces by our backward nodes, as onnxruntime ran them
    passed, _ = fuse_backward_ops(plain)
    kept = {n.name for n in passed.graph.node}
    replaced = sum(ms for node, ms in node_times(plain, feeds, threads, False).items()
                   if node not in kept and node in {n.name for n in plain.graph.node})
    ours_after = sum(after.get(op, 0.0) for op in BACKWARD_OPS)
    return (f"- `{name}` ({threads} thread): plain: {share(before, total_before)}; fused: {share(after, total_after)}. "
            f"Backward of SiLU/Mish/GroupNorm+SiLU: {replaced / total_before:.0%} of the plain step "
            f"({replaced:.2f} ms as nodes the graph pass replaces) -> {ours_after / total_after:.0%} of the fused step "
            f"({ours_after:.2f} ms in our backward nodes); GroupNormSwish forward {after.get('GroupNormSwish', 0.0):.2f} ms.")


def run(models=None, threads=(1, 2), batch: int = 2, out=sys.stdout) -> str:
    import torch

    from ascend_grad.models.modules import REAL_MODELS

    print(f"# ascend-grad real-model benchmark. {machine(torch)}", file=out, flush=True)
    export_rows, steps, notes = [], [], []
    for name in models or REAL_MODELS:
        factory, make_inputs = REAL_MODELS[name]
        torch.manual_seed(0)
        module = factory()
        inputs = make_inputs(batch)
        row, fused, plain = export_row(name, module, inputs)
        export_rows.append(row)
        print("export: " + " | ".join(map(str, row)), file=out, flush=True)
        rows = step_rows(torch, name, module, inputs, fused, plain, threads)
        steps += rows
        for r in rows:
            print("step: " + " | ".join(map(str, r)), file=out, flush=True)
        notes.append(breakdown(name, fused, plain, inputs, threads[0]))
        print(notes[-1], file=out, flush=True)
    return "\n\n".join([_table(EXPORT_HEADER, export_rows), _table(STEP_HEADER, steps), "\n".join(notes)])


def main(argv=None, prog: str | None = None) -> int:
    from ascend_grad.models.modules import REAL_MODELS

    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog=prog or "python -m ascend_grad.bench.models", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=list(REAL_MODELS), help="default: all")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--write", action="store_true", help="put the tables in bench/results.md")
    args = parser.parse_args(argv)
    tables = run(args.models, tuple(args.threads), args.batch, out=sys.stdout)
    if args.write:
        import torch

        command = " ".join(["python -m ascend_grad.bench.models", *[a for a in argv if a != "--write"]])
        write_section(Path("bench/results.md"), SECTION,
                      f"Command: `{command}`\n\n{machine(torch)}\n\n{tables}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
