"""onnxruntime-training's own training loop, before and after the graph pass.

    python -m ascend_grad.bench.training_artifacts [--steps 40] [--threads 1 2] [--batch 8] [--write]

The ResBlock (models.modules.ResBlock: Conv -> GroupNorm(32) -> SiLU -> Conv, loss mean of
squares), exported with torch.onnx and made into training artifacts by onnxruntime-training 1.19.2
(`ascend_grad.training.generate_artifacts`'s respelling, then onnxruntime's generate_artifacts with
AdamW), and the same folder fused (graph_passes.fuse_training_artifacts). Each is trained in
onnxruntime-training-cpu 1.19.2 (its own venv under build/venvs) with Module + Optimizer on the same
batch: one step is module(x), optimizer.step(), module.lazy_reset_grad(). It prints the median ms
of a step (after 5 untimed ones) of original and fused (kernel library registered in the session
options), their ratio, and the largest relative difference of the losses and of the final
parameters between the two loops (a difference above 1e-5 raises).
--write puts the table in bench/results.md, section "## onnxruntime-training loop".
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

from ascend_grad.bench.report import Tee, machine, write_section

SECTION = "## onnxruntime-training loop"
WARMUP = 5

_LOOP = """
from onnxruntime.training.api import CheckpointState, Module, Optimizer
config = json.load(open(f"{folder}/config.json"))
options = onnxruntime.SessionOptions()
options.intra_op_num_threads, options.inter_op_num_threads = config["threads"], 1
if config["library"]:
    options.register_custom_ops_library(config["library"])
state = CheckpointState.load_checkpoint(f"{folder}/checkpoint")
module = Module(f"{folder}/training_model.onnx", state, f"{folder}/eval_model.onnx", session_options=options)
optimizer = Optimizer(f"{folder}/optimizer_model.onnx", module)
module.train()
x = np.load(config["data"])["input_0"]
losses, times = [], []
for step in range(config["steps"]):
    start = time.perf_counter()
    loss = module(x)
    optimizer.step()
    module.lazy_reset_grad()
    times.append(time.perf_counter() - start)
    losses.append(float(loss))
params = {n: state.parameters[n].data for n in names}
np.savez(config["out"], losses=np.array(losses), times=np.array(times), **params)
"""


def _artifacts(folder: Path, batch: int) -> tuple[list[str], Path]:
    """original/ and fused/ artifacts of the ResBlock, and the batch (inputs.npz)."""
    import torch

    from ascend_grad.graph_passes import fuse_training_artifacts
    from ascend_grad.models import modules, ort_training
    from ascend_grad.training import make_differentiable

    torch.manual_seed(0)
    module, x = modules.ResBlock(), torch.randn(batch, 4, 32, 32)
    names = [n for n, _ in module.named_parameters()]
    original = folder / "original"
    original.mkdir()
    onnx.save(make_differentiable(ort_training.export_forward(module, (x,))), original / "forward.onnx")
    ort_training.in_venv(_GENERATE, original, names)
    (original / "forward.onnx").unlink()
    fuse_training_artifacts(original, folder / "fused")
    np.savez(folder / "inputs.npz", input_0=x.numpy())
    return names, folder / "inputs.npz"


_GENERATE = """
from onnxruntime.training import artifacts
artifacts.generate_artifacts(onnx.load(f"{folder}/forward.onnx"), requires_grad=names, loss=None,
                             optimizer=artifacts.OptimType.AdamW, artifact_directory=folder)
"""


def _loop(folder: Path, names: list[str], data: Path, threads: int, steps: int, library: str) -> dict:
    from ascend_grad.models import ort_training

    out = folder.parent / f"{folder.name}.{threads}.npz"
    (folder / "config.json").write_text(json.dumps({"threads": threads, "library": library, "data": str(data),
                                                    "steps": steps, "out": str(out)}))
    ort_training.in_venv("import time\n" + _LOOP, folder, names)
    return dict(np.load(out))


def run(threads=(1, 2), steps: int = 40, batch: int = 8, out=sys.stdout) -> None:
    from ascend_grad import runtime_ext

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        names, data = _artifacts(folder, batch)
        held = [n.op_type for n in onnx.load(folder / "fused" / "training_model.onnx").graph.node if n.domain == "ascend.grad"]
        print(f"ResBlock batch {batch}, input (4, 32, 32); fused training model holds {', '.join(sorted(held))}", file=out)
        print("\n| threads | original ms/step | fused+kernels ms/step | original / fused | max rel. difference (losses, parameters) |",
              file=out)
        print("|---|---|---|---|---|", file=out)
        for t in threads:
            a = _loop(folder / "original", names, data, t, steps + WARMUP, "")
            b = _loop(folder / "fused", names, data, t, steps + WARMUP, runtime_ext.library_path())
            worst = max(float(np.abs(b[k] - a[k]).max() / max(np.abs(a[k]).max(), 1e-30)) for k in ["losses", *names])
            if worst > 1e-5:
                raise AssertionError(f"the fused loop differs from the original by {worst:.2e} (relative)")
            ta, tb = (1e3 * float(np.median(r["times"][WARMUP:])) for r in (a, b))
            print(f"| {t} | {ta:.3f} | {tb:.3f} | {ta / tb:.2f}x | {worst:.1e} |", file=out)


def main(argv=None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog=prog or "python -m ascend_grad.bench.training_artifacts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--write", action="store_true", help="put the table in --results, section '%s'" % SECTION)
    parser.add_argument("--results", type=Path, default=Path("bench/results.md"), help="default: %(default)s")
    args = parser.parse_args(argv)
    table = io.StringIO()

    run(tuple(args.threads), args.steps, args.batch, out=Tee(sys.stdout, table))
    if args.write:
        argv = [a for a in argv if a != "--write"]
        body = (f"Command: `{' '.join(['python -m ascend_grad.bench.training_artifacts', *argv])}`\n\n{machine()}\n\n"
                f"onnxruntime-training-cpu 1.19.2, Module + AdamW; medians of one step.\n\n{table.getvalue().strip()}")
        write_section(args.results, SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
