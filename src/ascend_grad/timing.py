"""Timing what onnxruntime and PyTorch run: medians of repeated runs, one session run through IO
binding, per-node times from onnxruntime's profiler. The benchmarks and the demo use it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np


def median_ms(fn, min_seconds=0.4, min_reps=5, max_reps=300) -> float:
    """Median ms of fn() over at least min_reps runs and min_seconds (at most max_reps), after a warm-up."""
    fn()  # warm up (first-touch, lazy initialisation)
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or (time.perf_counter() - start < min_seconds and len(times) < max_reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times) * 1e3)


def ort_runner(model, feeds, threads, with_kernels):
    """A zero-argument callable running the model once through IO binding (outputs from the arena)."""
    import onnxruntime as ort

    from ascend_grad import runtime_ext
    from ascend_grad.testing import to_ort_value

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if with_kernels:
        runtime_ext.session_options(options)
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    binding = session.io_binding()
    values = {name: to_ort_value(value) for name, value in feeds.items()}
    for name, value in values.items():
        binding.bind_ortvalue_input(name, value)
    for output in session.get_outputs():
        binding.bind_output(output.name, "cpu")
    return lambda: session.run_with_iobinding(binding)


def _profiled(model, feeds, threads: int, with_kernels: bool, runs: int) -> list[tuple[str, str, float]]:
    """(node name, op type, mean ms per run) of every node run, from onnxruntime's profiler."""
    import onnxruntime as ort

    from ascend_grad import runtime_ext

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(_scratch(), "profile")
    if with_kernels:
        runtime_ext.session_options(options)
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    session.run(None, feeds)  # warm up: not profiled separately, so averaged in below
    for _ in range(runs):
        session.run(None, feeds)
    path = session.end_profiling()
    nodes = []
    for event in json.loads(Path(path).read_text()):
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            op_type = event.get("args", {}).get("op_name", "?")
            nodes.append((event["name"][: -len("_kernel_time")], op_type, event["dur"] / 1e3 / (runs + 1)))
    os.remove(path)
    return nodes


def node_times(model, feeds, threads: int, with_kernels: bool, runs: int = 20) -> dict[str, float]:
    """Mean ms per run of each node, from onnxruntime's profiler."""
    times: dict[str, float] = {}
    for name, _, ms in _profiled(model, feeds, threads, with_kernels, runs):
        times[name] = times.get(name, 0.0) + ms
    return times


def op_type_times(model, feeds, threads: int, with_kernels: bool, runs: int = 20) -> dict[str, float]:
    """Mean ms per run spent in each op type (as onnxruntime ran the graph: after its own fusions)."""
    times: dict[str, float] = {}
    for _, op_type, ms in _profiled(model, feeds, threads, with_kernels, runs):
        times[op_type] = times.get(op_type, 0.0) + ms
    return times


def _scratch() -> str:
    import tempfile

    return tempfile.gettempdir()
