"""Child script (the onnxruntime-cann venv, simulated CANN): runs each exported model as its plan
says (provider and session options), profiled, saving onnxruntime's optimized model (its Memcpy
nodes are the copies), and the original graph on the CPU EP with the same feeds.

    python run_plan.py SPEC.json OUT_DIR

SPEC: [{"name", "path", "original" (or null), "feeds": npz, "library", "provider_options",
"session_options"}]. OUT_DIR/results.json: per model {"name", "error", "placement": {node:
[op_type, provider]}, "outputs": [names]}; <name>.cann.npz / <name>.cpu.npz hold the outputs by
name, <name>.optimized.onnx the graph onnxruntime ran.
"""

import json
import os
import sys
import tempfile

import numpy as np
import onnxruntime as ort


def options(spec, profile_dir=None, optimized=None):
    so = ort.SessionOptions()
    if spec.get("library"):
        so.register_custom_ops_library(spec["library"])
    for key, value in spec.get("session_options", {}).items():
        setattr(so, key, getattr(ort.GraphOptimizationLevel, value) if key == "graph_optimization_level" else value)
    if profile_dir:
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(profile_dir, spec["name"])
    if optimized:
        so.optimized_model_filepath = optimized
    return so


def run_one(spec, out_dir, tmp):
    result = {"name": spec["name"], "error": None}
    feeds = dict(np.load(spec["feeds"]))
    try:
        providers = [("CANNExecutionProvider", spec.get("provider_options", {})), "CPUExecutionProvider"]
        optimized = os.path.join(out_dir, spec["name"] + ".optimized.onnx")
        cann = ort.InferenceSession(spec["path"], options(spec, tmp, optimized), providers=providers)
        names = [o.name for o in cann.get_outputs()]
        got = cann.run(None, feeds)
        with open(cann.end_profiling()) as f:
            events = json.load(f)
        result["placement"] = {e["name"].removesuffix("_kernel_time"): [e["args"]["op_name"], e["args"]["provider"]]
                               for e in events if e.get("cat") == "Node" and "provider" in e.get("args", {})}
        result["outputs"] = names
        np.savez(os.path.join(out_dir, spec["name"] + ".cann.npz"), **dict(zip(names, got)))
        if spec.get("original"):
            plain = ort.SessionOptions()  # the original as a user runs it on the CPU: default options
            if spec.get("original_needs_library"):
                plain.register_custom_ops_library(spec["library"])
            cpu = ort.InferenceSession(spec["original"], plain, providers=["CPUExecutionProvider"])
            want = cpu.run(None, {i.name: feeds[i.name] for i in cpu.get_inputs()})
            np.savez(os.path.join(out_dir, spec["name"] + ".cpu.npz"), **{o.name: v for o, v in zip(cpu.get_outputs(), want)})
    except Exception as e:  # reported to the parent, which decides
        result["error"] = f"{type(e).__name__}: {e}"
    return result


def main(spec_path, out_dir):
    with open(spec_path) as f:
        specs = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        results = [run_one(spec, out_dir, tmp) for spec in specs]
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:3])
