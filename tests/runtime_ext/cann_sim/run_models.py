"""Child script (the onnxruntime-cann venv): runs models on the CANN EP (single-operator mode,
profiled) and on the CPU EP with the same feeds.

    python run_models.py SPEC.json OUT_DIR

SPEC: [{"name", "path", "feeds": npz, "library": custom-op library or null,
        "provider_options": {...}}]. OUT_DIR/results.json: per model {"name", "error", "stage",
"outputs": [names], "placement": {node: [op_type, provider]}, "aclop": {op type: calls},
"aclnn": {function: calls}, "violations": [...]}; OUT_DIR/<name>.cann.npz and .cpu.npz hold the
outputs. The simulator's counters are read in-process (simcann_report) before and after each
model, so each model gets its own."""

import ctypes
import json
import os
import sys
import tempfile

import numpy as np
import onnxruntime as ort

sim = ctypes.CDLL("libascendcl.so")
sim.simcann_report.restype = ctypes.c_char_p


def report():
    return json.loads(sim.simcann_report())


def delta(after, before):
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def session(path, providers, library, profile_dir=None):
    so = ort.SessionOptions()
    if library:
        so.register_custom_ops_library(library)
    if profile_dir:
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(profile_dir, "profile")
    return ort.InferenceSession(path, so, providers=providers)


def placement(profile_path):
    with open(profile_path) as f:
        events = json.load(f)
    return {e["name"].removesuffix("_kernel_time"): [e["args"]["op_name"], e["args"]["provider"]]
            for e in events if e.get("cat") == "Node" and "provider" in e.get("args", {})}


def run_one(spec, out_dir, tmp):
    result = {"name": spec["name"], "error": None, "stage": None}
    feeds = dict(np.load(spec["feeds"]))
    options = {"enable_cann_graph": "0", **spec.get("provider_options", {})}
    before = report()
    stage = "load"
    try:
        cann = session(spec["path"], [("CANNExecutionProvider", options), "CPUExecutionProvider"], spec.get("library"), tmp)
        cpu = session(spec["path"], ["CPUExecutionProvider"], spec.get("library"))
        result["outputs"] = [o.name for o in cann.get_outputs()]
        stage = "run"
        got = cann.run(None, feeds)
        want = cpu.run(None, feeds)
        result["placement"] = placement(cann.end_profiling())
        np.savez(os.path.join(out_dir, spec["name"] + ".cann.npz"), *got)
        np.savez(os.path.join(out_dir, spec["name"] + ".cpu.npz"), *want)
        del cann, cpu
    except Exception as e:  # reported to the parent, which decides
        result["error"] = f"{type(e).__name__}: {e}"
        result["stage"] = stage
    after = report()
    result["aclop"] = delta(after["aclop_calls"], before["aclop_calls"])
    result["aclop_unsupported"] = delta(after["aclop_unsupported_calls"], before["aclop_unsupported_calls"])
    result["aclnn"] = delta(after["aclnn_calls"], before["aclnn_calls"])
    result["violations"] = after["violations"][len(before["violations"]):]
    return result


def main(spec_path, out_dir):
    with open(spec_path) as f:
        specs = json.load(f)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in specs:
            results.append(run_one(spec, out_dir, tmp))
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:3])
