"""`ascend-grad demo --target ascend`: the ResBlock training step on an Ascend NPU.

Fuse the bundled ResBlock graph, make it right for onnxruntime-cann (`fuse --target ascend`), run
it on the CANN EP and compare every output with the original graph on the CPU. Where it runs:
- a real NPU: this environment's onnxruntime has the CANN EP and CANN is installed
  ($ASCEND_HOME_PATH, or /usr/local/Ascend/ascend-toolkit/latest);
- else SIMULATED: the real onnxruntime-cann 1.24.4 wheel on the project's simulated CANN runtime
  (host memory as device memory; aclnn computed on the CPU from SPEC.md's formulas), which the test
  suite builds under build/cann_sim with its venv under build/venvs (ASCEND_GRAD_CANN_SIM and
  ASCEND_GRAD_VENVS point elsewhere). That proves the plumbing (placement, the aclnn protocol,
  numbers), not aclnn's own numerics or speed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

GRAPH = "resblock_b8.aot.opt"
CANN = "CANNExecutionProvider"
SIM_VENV = "onnxruntime-cann-1.24.4-numpy-2"  # ascend_grad.venvs' folder for ("onnxruntime-cann==1.24.4", "numpy<2")


class NoNpu(Exception):
    """Neither an NPU nor the simulated one is here (the message says how to get either)."""


def _real_cann() -> bool:
    import onnxruntime as ort

    if CANN not in ort.get_available_providers():
        return False
    home = os.environ.get("ASCEND_HOME_PATH") or "/usr/local/Ascend/ascend-toolkit/latest"
    return (Path(home) / "lib64" / "libascendcl.so").is_file()


def _simulated() -> tuple[Path, Path]:
    root = Path(os.environ.get("ASCEND_GRAD_CANN_SIM") or Path.cwd() / "build" / "cann_sim")
    python = Path(os.environ.get("ASCEND_GRAD_VENVS") or Path.cwd() / "build" / "venvs") / SIM_VENV / "bin" / "python"
    if not (root / "lib64" / "libascendcl.so").is_file() or not python.is_file():
        raise NoNpu(
            "no Ascend NPU here (no onnxruntime-cann with CANN installed) and no simulated one "
            f"({root}/lib64 and {python.parent.parent}); on an Atlas machine: pip install onnxruntime-cann, "
            "source CANN's set_env.sh; elsewhere the test suite builds the simulated runtime (run it once from the repository)"
        )
    return root, python


def _run_real(model_path: Path, feeds: dict, folder: Path) -> tuple[dict, dict]:
    import onnxruntime as ort

    from ascend_grad import runtime_ext

    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(folder / "npu-profile")
    session = runtime_ext.cann_session(str(model_path), session_options=options)
    outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    events = json.loads(Path(session.end_profiling()).read_text())
    placement = {e["name"][: -len("_kernel_time")]: e["args"]["provider"] for e in events
                 if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")}
    return outputs, placement


def _run_simulated(model_path: Path, feeds: dict, root: Path, python: Path) -> tuple[dict, dict, dict]:
    import numpy as np

    from ascend_grad import runtime_ext

    with tempfile.TemporaryDirectory(prefix="ascend-grad-npu-") as tmp:
        np.savez(Path(tmp) / "feeds.npz", **feeds)
        env = {**os.environ, "ASCEND_HOME_PATH": str(root), "LD_LIBRARY_PATH": str(root / "lib64"),
               "SIMCANN_REPORT": str(Path(tmp) / "report.json")}  # (as CANN's set_env.sh sets them)
        child = Path(__file__).with_name("npu_child.py")
        done = subprocess.run([str(python), str(child), str(model_path), str(model_path) + ".ascend.json",
                               runtime_ext.library_path(), str(Path(tmp) / "feeds.npz"), tmp],
                              capture_output=True, text=True, env=env, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"the simulated NPU run failed: {done.stderr.strip().splitlines()[-1:]}")
        with np.load(Path(tmp) / "npu.npz") as saved:
            outputs = {k: saved[k] for k in saved.files}
        placement = json.loads((Path(tmp) / "npu.json").read_text())["placement"]
        report = json.loads((Path(tmp) / "report.json").read_text())
    return outputs, placement, report


def run(out_dir, out=None) -> int:
    """Returns the exit status: 0, or 1 when the NPU's outputs or placement differ."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    from ascend_grad.demo import _table
    from ascend_grad.graph_passes import fuse_backward_ops
    from ascend_grad.graph_passes.ascend import export_for_ascend
    from ascend_grad.models import graph_path
    from ascend_grad.verify import random_feeds

    out = out or sys.stdout
    real = _real_cann()
    where = None if real else _simulated()  # (before any work: a missing NPU costs nothing)
    folder = Path(out_dir)
    original = onnx.load(graph_path(GRAPH))
    fused, _ = fuse_backward_ops(original)
    model, plan = export_for_ascend(fused)
    model_path = folder / f"{GRAPH}.ascend.onnx"
    onnx.save(model, model_path)
    Path(str(model_path) + ".ascend.json").write_text(json.dumps(plan, indent=1))

    feeds = random_feeds(original)
    cpu = ort.InferenceSession(original.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = dict(zip([o.name for o in cpu.get_outputs()], cpu.run(None, feeds)))
    if real:
        print(f"ascend-grad demo --target ascend: {GRAPH} on the Ascend NPU (onnxruntime {ort.__version__}, CANN EP)", file=out)
        outputs, placement = _run_real(model_path, feeds, folder)
        report = None
    else:
        print(f"ascend-grad demo --target ascend: {GRAPH} on a SIMULATED NPU - the real onnxruntime-cann 1.24.4 on "
              "this project's simulated CANN runtime (host memory as device memory, aclnn computed on the CPU from "
              "SPEC.md's formulas): it checks placement, the aclnn protocol and the numbers, not aclnn's own "
              "numerics or the NPU's speed", file=out, flush=True)
        outputs, placement, report = _run_simulated(model_path, feeds, *where)

    planned = {p["node"]: p["device"] for p in plan["placement"]}
    # the Memcpy nodes onnxruntime inserted are the copies; every other node is one of OUT's
    copies = sum(node == "Memcpy" or node.startswith("Memcpy_token_") for node in placement)
    ran = {node: "npu" if provider == CANN else "host" for node, provider in placement.items()
           if not (node == "Memcpy" or node.startswith("Memcpy_token_"))}
    differs = sorted(n for n in planned if n in ran and planned[n] != ran[n]) + sorted(set(planned) ^ set(ran))
    errors = {}
    for name, want in expected.items():
        got, want = np.asarray(outputs[name], np.float64), np.asarray(want, np.float64)
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        errors[name] = float(np.max(np.abs(got - want)) / scale) if scale else float(np.max(np.abs(got - want), initial=0.0))
    worst = max(errors, key=errors.get)
    ours = [p for p in plan["placement"] if p["op_type"] in ("SiluBackward", "MishBackward", "GroupNormSwishGrad", "GroupNormSwish")]
    rows = [[p["node"], p["op_type"], ran.get(p["node"], "?"), p["reason"]] for p in ours]
    print("\n" + _table(["node", "op", "ran on", "why"], rows) + "\n", file=out)
    print(f"placement: {plan['npu_nodes']} nodes on the NPU, {plan['host_nodes']} on the host, host<->device copies "
          f"{plan['host_device_copies_before']} -> {plan['host_device_copies']} after the Ascend rewrites; as onnxruntime "
          f"placed them: {'the same' if not differs else 'DIFFERENT for ' + ', '.join(differs[:5])}, "
          f"{copies} copies{'' if copies == plan['host_device_copies'] else ' (DIFFERENT)'}", file=out)
    print(f"outputs vs the original graph on the CPU: {len(errors)} outputs (loss and gradients), max relative error "
          f"{errors[worst]:.1e} ({worst})", file=out)
    if report is not None:
        calls = {k: v for k, v in report["aclnn_calls"].items() if v and not k.endswith("GetWorkspaceSize")}
        print(f"aclnn calls: {calls}; protocol violations: {report['violation_count']}", file=out)
    print(f"wrote {model_path} and {model_path}.ascend.json; on an NPU: ascend_grad.runtime_ext.cann_session(path)", file=out)
    bad = differs or copies != plan["host_device_copies"] or errors[worst] > 1e-5 or (report is not None and report["violation_count"])
    if bad:
        print("ascend-grad: error: the NPU run differs from the plan or from the CPU", file=sys.stderr)
    return 1 if bad else 0
