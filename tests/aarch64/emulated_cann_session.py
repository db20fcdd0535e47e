"""One fused training graph through runtime_ext.cann_session, as an Atlas host runs it: ascend-grad
installed beside onnxruntime-cann 1.24.4 (aarch64 wheel, numpy 1), CANN found through set_env.sh's
variables (the simulated runtime, built for aarch64). Run inside that emulated environment by
test_emulated.py (its name has no test_ prefix: never collected on the x86 side)."""

import json
import subprocess
import sys

import numpy as np
import onnx

from ascend_grad.models import graph_path
from ascend_grad.testing import TOLERANCE
from ascend_grad.verify import random_feeds

GRAPH = "resblock.aot.opt"  # a GroupNorm + SiLU ResBlock's training step: loss and every gradient

SESSION = r"""
import json, sys
import numpy as np
from ascend_grad import runtime_ext
model, feeds, out = sys.argv[1:4]
session = runtime_ext.cann_session(model)  # the options of model + ".ascend.json"
outputs = session.run(None, dict(np.load(feeds)))
np.savez(out, **{o.name: v for o, v in zip(session.get_outputs(), outputs)})
print(json.dumps({"providers": session.get_providers()}))
"""


def test_fused_training_graph_through_cann_session(cann, tmp_path):
    import onnxruntime as ort

    original = graph_path(GRAPH)
    fused = tmp_path / "fused.onnx"
    # the user's command line: fuse and make it right for onnxruntime-cann (writes fused.onnx.ascend.json)
    done = subprocess.run([sys.executable, "-m", "ascend_grad.cli", "fuse", str(original), "-o", str(fused), "--target", "ascend"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    plan = json.loads((tmp_path / "fused.onnx.ascend.json").read_text())
    on_npu = {p["op_type"] for p in plan["placement"] if p["device"] == "npu"}
    assert {"GroupNormSwishGrad", "GroupNormSwish"} <= on_npu, on_npu

    feeds = random_feeds(onnx.load(original), seed=7)
    np.savez(tmp_path / "feeds.npz", **feeds)
    run, report = cann.run(SESSION, fused, tmp_path / "feeds.npz", tmp_path / "out.npz")
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1])["providers"][0] == "CANNExecutionProvider"
    cann.assert_clean(report)
    # one aclnn call per ascend.grad node the plan put on the NPU
    planned = {op: sum(p["op_type"] == op and p["device"] == "npu" for p in plan["placement"]) for op in on_npu}
    for op in ("GroupNormSwishGrad", "GroupNormSwish", "SiluBackward"):
        if planned.get(op):
            assert report["aclnn_calls"].get(f"aclnn{op}") == planned[op], (op, report["aclnn_calls"])

    # the original graph (no ascend.grad node) on this onnxruntime's CPU EP
    session = ort.InferenceSession(str(original), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    with np.load(tmp_path / "out.npz") as z:
        got = {k: z[k] for k in z.files}
    assert set(got) == set(want)  # loss, every gradient
    for name, value in want.items():
        scale = np.max(np.abs(value.astype(np.float64)))
        error = np.max(np.abs(got[name].astype(np.float64) - value)) / scale if scale else np.max(np.abs(got[name]))
        assert error <= TOLERANCE[np.dtype(value.dtype)], f"{name}: relative error {error:.2e} on the simulated NPU"
    print(f"{GRAPH}: {len(want)} outputs within SPEC's bounds; aclnn calls {report['aclnn_calls']}")
