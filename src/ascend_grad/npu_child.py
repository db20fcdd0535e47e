"""Run as a script (not imported) by `ascend-grad demo --target ascend` in an environment that has
onnxruntime-cann and possibly nothing of ascend-grad: the session runtime_ext.cann_session makes
(CANN EP then CPU, the kernel library, the plan's provider and session options), profiled.

    python npu_child.py MODEL.onnx PLAN.json LIBRARY FEEDS.npz OUT_DIR

OUT_DIR/npu.npz: the outputs by name; OUT_DIR/npu.json: {"providers", "placement": {node: provider}}.
"""

import json
import os
import sys

import numpy as np
import onnxruntime as ort


def main(model, plan_path, library, feeds_path, out_dir):
    with open(plan_path) as f:
        plan = json.load(f)
    options = ort.SessionOptions()
    options.register_custom_ops_library(library)
    level = plan.get("session_options", {}).get("graph_optimization_level")
    if level:
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(out_dir, "npu-profile")
    providers = [("CANNExecutionProvider", plan["provider_options"]), "CPUExecutionProvider"]
    session = ort.InferenceSession(model, options, providers=providers)
    feeds = dict(np.load(feeds_path))
    outputs = session.run(None, feeds)
    with open(session.end_profiling()) as f:
        events = json.load(f)
    placement = {e["name"][: -len("_kernel_time")]: e["args"]["provider"] for e in events
                 if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")}
    np.savez(os.path.join(out_dir, "npu.npz"), **{o.name: v for o, v in zip(session.get_outputs(), outputs)})
    with open(os.path.join(out_dir, "npu.json"), "w") as f:
        json.dump({"providers": session.get_providers(), "placement": placement}, f)


if __name__ == "__main__":
    main(*sys.argv[1:6])
