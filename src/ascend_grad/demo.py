"""`ascend-grad demo`: the whole job on the bundled training graphs, no PyTorch needed.

Fuse each graph, show what was fused, check every output of the fused graph (with the kernel
library) against the unfused graph, time a training step both ways, and write the fused models.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ascend_grad.progress import Progress
from ascend_grad.timing import median_ms, node_times, ort_runner

# the ResBlock (Conv -> GroupNorm(32) -> SiLU -> Conv, batch 8) is the one timed; the MLPs show
# the SiLU and Mish gradients
GRAPHS = ("resblock_b8.aot.opt", "silu_mlp.aot.opt", "mish_mlp.aot.opt")
TIMED = "resblock_b8.aot.opt"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _speed(before_ms: float, after_ms: float) -> str:
    ratio = before_ms / after_ms
    return f"{ratio:.1f}x faster" if ratio >= 1 else f"{1 / ratio:.1f}x slower"


def time_step(original, fused, feeds, threads: int, seconds: float) -> tuple[float, float]:
    """Median ms of one run of the original graph (stock onnxruntime) and of the fused graph (with
    the kernel library), alternating rounds so drift in the machine hits both alike."""
    run_original = ort_runner(original, feeds, threads, False)
    run_fused = ort_runner(fused, feeds, threads, True)
    originals, fuseds = [], []
    for _ in range(3):
        originals.append(median_ms(run_original, min_seconds=seconds / 6))
        fuseds.append(median_ms(run_fused, min_seconds=seconds / 6))
    return sorted(originals)[1], sorted(fuseds)[1]


def replaced_vs_fused(original, fused, feeds, threads: int) -> tuple[float, int, float, int]:
    """(ms, nodes) of what the pass removed from the original graph, as onnxruntime ran it, and
    (ms, nodes) of the ascend.grad nodes that replaced it, run with the kernels."""
    from ascend_grad import DOMAIN

    kept = {n.name for n in fused.graph.node}
    ours = {n.name for n in fused.graph.node if n.domain == DOMAIN}
    before = node_times(original, feeds, threads, False)
    after = node_times(fused, feeds, threads, True)
    # onnxruntime may rename nodes it rewrites (layout, fusions): match only the names both hold
    removed = [t for name, t in before.items() if name not in kept and name in {n.name for n in original.graph.node}]
    return sum(removed), len(removed), sum(after.get(name, 0.0) for name in ours), len(ours)


def run(out_dir: str | os.PathLike = "ascend-grad-demo", graphs=GRAPHS, threads: int | None = None,
        seconds: float = 3.0, out=None) -> int:
    """The demo; returns the exit status (1 if a fused graph's outputs differ from the original's)."""
    import onnx

    from ascend_grad.graph_passes import fuse_backward_ops
    from ascend_grad.models import graph_path
    from ascend_grad.verify import compare_models, random_feeds

    out = out or sys.stdout
    progress = Progress()
    threads = threads or os.cpu_count() or 1
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    print("ascend-grad demo: fusing the decomposed SiLU, Mish and GroupNorm+SiLU backward passes (and the GroupNorm+SiLU "
          "forward) of the bundled training graphs into single ascend.grad nodes\n", file=out, flush=True)
    rows, summary, failed = [], {}, []
    for name in graphs:
        source = graph_path(name)
        with progress.step(f"fusing {name}"):
            fused, report = fuse_backward_ops(onnx.load(source))
        target = folder / f"{name}.fused.onnx"
        onnx.save(fused, target)
        with progress.step(f"verifying {name} (every output, onnxruntime, random inputs)"):
            check = compare_models(str(source), str(target))
        worst = max(check["relative_errors"].values(), default=0.0)
        if not worst <= check["bound"]:
            failed.append(name)
        ops = ", ".join(f"{op} x{n}" for op, n in report.counts.items() if n) or "nothing"
        rows.append([name, ops, f"{report.nodes_before} -> {report.nodes_after}",
                     f"{len(check['relative_errors'])} outputs, max rel. error {worst:.1e}" + ("" if name not in failed else " MISMATCH")])
        summary[name] = {"file": str(target), **report.to_dict(), "verify": check}
    print("\n" + _table(["graph", "fused", "nodes", "check vs the unfused graph"], rows) + "\n", file=out, flush=True)

    if TIMED in graphs:
        original = onnx.load(graph_path(TIMED))
        fused = onnx.load(folder / f"{TIMED}.fused.onnx")
        feeds = random_feeds(original)
        with progress.step(f"timing a training step of {TIMED}, {threads} thread{'s' * (threads > 1)}"):
            before, after = time_step(original, fused, feeds, threads, seconds)
        print(f"training step ({TIMED}, onnxruntime CPU, {threads} thread{'s' * (threads > 1)}): "
              f"{before:.2f} ms unfused -> {after:.2f} ms fused with the ascend-grad kernels: {_speed(before, after)}",
              file=out)
        with progress.step("profiling the nodes the pass replaced"):
            replaced_ms, replaced_nodes, ours_ms, ours_nodes = replaced_vs_fused(original, fused, feeds, threads)
        print(f"  of which the {replaced_nodes} removed nodes onnxruntime ran (it folds or fuses the rest away): {replaced_ms:.2f} ms -> "
              f"{ours_nodes} fused node{'s' * (ours_nodes > 1)}: {ours_ms:.2f} ms ({_speed(replaced_ms, ours_ms)}; "
              "onnxruntime's profiler, which adds its own overhead per node)", file=out)
        summary["training_step"] = {"graph": TIMED, "threads": threads, "unfused_ms": before, "fused_ms": after,
                                    "removed_nodes_ms": replaced_ms, "fused_nodes_ms": ours_ms}
    (folder / "report.json").write_text(json.dumps(summary, indent=1))
    print(f"fused models and report.json written to {folder.resolve()}", file=out)
    print("run one in onnxruntime with the kernels: "
          "InferenceSession(path, ascend_grad.runtime_ext.session_options())", file=out, flush=True)
    if failed:
        print(f"ascend-grad: error: the fused graph's outputs differ from the original's: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
