"""Running models and judging outputs the way the project's tests do (usable by users too).

- `run_onnxruntime` / `run_reference_evaluator`: numpy in, numpy out, bfloat16 included
  (onnxruntime's Python API has no bfloat16 numpy type: such tensors cross as raw uint16).
- `assert_close`: SPEC.md's accuracy bound for the output dtype, with NaN/Inf positions required
  to match the reference exactly, and the worst element named when it fails.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto

# SPEC.md: max(|out - ref|) / max(|ref|) per output, by output dtype.
TOLERANCE = {
    np.dtype(np.float32): 1e-5,
    np.dtype(np.float16): 1e-3,
    np.dtype(ml_dtypes.bfloat16): 8e-3,
}

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
# The op set's dtypes, as numpy dtypes and as names (for test ids).
FLOAT_DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": BFLOAT16}


def to_ort_value(array: np.ndarray):
    import onnxruntime as ort

    array = np.require(array, requirements="C")  # (np.ascontiguousarray would make rank 0 rank 1)
    if array.dtype == BFLOAT16:
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array.view(np.uint16), TensorProto.BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(array)


def _from_ort_value(value) -> np.ndarray:
    if value.data_type() != "tensor(bfloat16)":
        return value.numpy()
    shape = tuple(value.shape())
    count = int(np.prod(shape))
    if count == 0:
        return np.zeros(shape, BFLOAT16)
    raw = (ctypes.c_uint16 * count).from_address(value.data_ptr())
    return np.frombuffer(raw, dtype=np.uint16).copy().view(BFLOAT16).reshape(shape)


def _serialized(model: onnx.ModelProto | str) -> bytes | str:
    return model if isinstance(model, str) else model.SerializeToString()


def without_spinning(options=None):
    """`options` (or new onnxruntime.SessionOptions) whose idle thread-pool threads sleep rather than
    spin. onnxruntime's threads spin after each parallel section by default, holding a core that
    the tests' other worker (or an emulated run: docs/reliability.md#the-suites-time) needs; what a
    session computes does not change."""
    import onnxruntime as ort

    options = ort.SessionOptions() if options is None else options
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def run_onnxruntime(
    model: onnx.ModelProto | str,
    feeds: Mapping[str, np.ndarray],
    session_options=None,
    output_names: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """Run on onnxruntime's CPU execution provider (its threads not spinning: without_spinning);
    returns {output name: array}."""
    import onnxruntime as ort

    session = ort.InferenceSession(_serialized(model), without_spinning(session_options), providers=["CPUExecutionProvider"])
    names = list(output_names or [o.name for o in session.get_outputs()])
    values = session.run_with_ort_values(names, {k: to_ort_value(v) for k, v in feeds.items()})
    return {name: _from_ort_value(v) for name, v in zip(names, values)}


def run_reference_evaluator(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run with onnx's reference evaluator (pure numpy, model-local functions inlined)."""
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(model)
    with np.errstate(all="ignore"):
        outputs = evaluator.run(None, dict(feeds))
    return {name: np.asarray(v) for name, v in zip(evaluator.output_names, outputs)}


def run_kernels(model: onnx.ModelProto | str, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run on onnxruntime with the ascend-grad kernel library registered (the fused C++ kernels)."""
    from ascend_grad import runtime_ext

    return run_onnxruntime(model, feeds, runtime_ext.session_options())


# The ways the tests run a model: name -> run(model, feeds) -> {output name: array}. The first two
# run the function bodies (inlined), the last the kernels.
RUNNERS = {"onnxruntime": run_onnxruntime, "reference_evaluator": run_reference_evaluator, "kernels": run_kernels}


def random_array(rng: np.random.Generator, shape, dtype, scale: float = 1.0, offset: float = 0.0) -> np.ndarray:
    """Normal(offset, scale) values rounded to `dtype` (bfloat16 included)."""
    return np.asarray(rng.standard_normal(shape) * scale + offset).astype(dtype)


def group_norm_feeds(
    rng: np.random.Generator, shape, num_groups: int, T, U, data_format: str = "NCHW", x_scale: float = 1.0
) -> dict[str, np.ndarray]:
    """GroupNormSwishGrad's inputs: x and dy of dtype T, gamma/beta of dtype U, and mean/rstd of
    dtype U computed (float64, then rounded) from the rounded x, as the forward hands them over."""
    from ascend_grad.ops import reference

    x = random_array(rng, shape, T, scale=x_scale)
    gamma = random_array(rng, shape[1 if data_format == "NCHW" else -1], U, scale=1.5)
    beta = random_array(rng, gamma.shape, U)
    _, mean, rstd = reference.group_norm_swish(x, gamma, beta, num_groups, data_format=data_format)
    dy = random_array(rng, shape, T)
    return {"dy": dy, "mean": mean.astype(U), "rstd": rstd.astype(U), "x": x, "gamma": gamma, "beta": beta}


def cast_wrapped(op_type: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str], **attributes):
    """(model, feeds): one ascend.grad node inside a float32 model, each input Cast to its dtype and
    each output Cast back to float32 (as out_<name>), so that runtimes whose Python API has no
    bfloat16 still run the bfloat16 kernels. An empty name in `outputs` leaves that output out."""
    from onnx import helper

    nodes, graph_inputs, feeds = [], [], {}
    for name, value in inputs.items():
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        nodes.append(helper.make_node("Cast", [f"in_{name}"], [name], to=elem))
        graph_inputs.append(helper.make_tensor_value_info(f"in_{name}", TensorProto.FLOAT, value.shape))
        feeds[f"in_{name}"] = value.astype(np.float32)
    nodes.append(helper.make_node(op_type, list(inputs), list(outputs), domain="ascend.grad", name=op_type, **attributes))
    for name in filter(None, outputs):
        nodes.append(helper.make_node("Cast", [name], [f"out_{name}"], to=TensorProto.FLOAT))
    graph_outputs = [helper.make_tensor_value_info(f"out_{o}", TensorProto.FLOAT, None) for o in filter(None, outputs)]
    graph = helper.make_graph(nodes, op_type, graph_inputs, graph_outputs)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ascend.grad", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10), feeds


def away_from(x: np.ndarray, point: float, margin: float = 0.25) -> np.ndarray:
    """x with values within `margin` of `point` moved 2 * margin above it.

    SiLU's and Mish's derivatives cross zero (x = -1.2785 and -1.1924): there a float32 result is
    the difference of two terms near 0.26, so a tensor holding nothing else (rank 0, a broadcast
    scalar) cannot meet a bound relative to its own tiny max |ref|. Tests keep such x away.
    """
    x = np.array(x, copy=True)
    near = np.abs(x.astype(np.float64) - point) < margin
    x[near] = (x[near].astype(np.float64) + 2 * margin).astype(x.dtype)
    return x


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """max |out - ref| / max |ref| over the finite reference values (max |ref| = 0 counts as 1)."""
    out64, ref64 = np.asarray(out).astype(np.float64), np.asarray(ref, dtype=np.float64)
    finite = np.isfinite(ref64)
    if not finite.any():
        return 0.0
    scale = np.abs(ref64[finite]).max() or 1.0
    return float(np.abs(out64[finite] - ref64[finite]).max() / scale)


def assert_close(out: np.ndarray, ref: np.ndarray, what: str = "output", tolerance: float | None = None) -> None:
    """`out` (any float dtype) matches the float64 `ref` within SPEC.md's bound for out's dtype:
    max |out - ref| <= tolerance * max |ref|, plus the dtype's smallest subnormal (what no rounding
    to that dtype can resolve: a float16 tensor whose values are all below 1e-5 has no better answer).
    Non-finite values must sit exactly where the reference has them.
    """
    out = np.asarray(out)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        raise AssertionError(f"{what}: shape {out.shape} != reference shape {ref.shape}")
    if out.size == 0:
        return
    bound = TOLERANCE[out.dtype] if tolerance is None else tolerance
    out64 = out.astype(np.float64)
    nonfinite = ~np.isfinite(ref) | ~np.isfinite(out64)
    same = (np.isnan(ref) & np.isnan(out64)) | (ref == out64)
    bad = np.argwhere(nonfinite & ~same)
    if len(bad):
        i = tuple(int(k) for k in bad[0])
        raise AssertionError(
            f"{what}: {len(bad)} non-finite mismatches, first at {i}: got {out64[i]}, reference {ref[i]}"
        )
    finite = np.isfinite(ref)
    if not finite.any():
        return
    diff = np.where(finite, np.abs(out64 - ref), 0.0)
    scale = np.abs(ref[finite]).max()
    if not diff.max() <= bound * scale + float(ml_dtypes.finfo(out.dtype).smallest_subnormal):
        i = np.unravel_index(np.argmax(diff), diff.shape)
        raise AssertionError(
            f"{what} ({out.dtype}): relative error {relative_error(out64, ref):.3g} > {bound:g}; "
            f"worst at {tuple(int(k) for k in i)}: got {out64[i]!r}, reference {ref[i]!r}"
        )


def run_cli(*args):
    """`ascend-grad ARGS...` as a user runs it: the console script beside this interpreter, in a
    process of its own (stdout and stderr captured as text)."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    script = shutil.which("ascend-grad", path=str(Path(sys.executable).parent))
    return subprocess.run([script, *map(str, args)], capture_output=True, text=True)


def run_cli_here(capfd, *args):
    """`ascend-grad ARGS...` in this process, as the console script runs it (`cli.main`; argparse's
    exits give the status), with what it wrote read through pytest's `capfd` (file descriptors,
    so the C++ libraries' writes too) -> the same CompletedProcess as run_cli. A process per command
    spent 1.7 s of CPU importing onnx, onnxscript and onnxruntime before its first step; what only a
    whole process shows keeps run_cli (a silent stderr, the exit at interpreter shutdown)."""
    import subprocess

    from ascend_grad import cli

    capfd.readouterr()  # (what the test printed before)
    try:
        status = cli.main([str(a) for a in args])
    except SystemExit as exit:  # --help, bad arguments
        status = 0 if exit.code is None else exit.code
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(["ascend-grad", *map(str, args)], status, out, err)


def assert_one_line_error(done, *fragments) -> None:
    """Bad input: exit 2 and one line "ascend-grad: error: ..." on stderr holding every fragment."""
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ascend-grad: error:"), done.stderr
    for fragment in fragments:
        assert fragment in lines[0]


PAGE = 4096


def placed(shape, dtype, offset: int) -> np.ndarray:
    """An uninitialised C-contiguous array of `shape` and `dtype` (bfloat16 included) whose first
    byte lies `offset` bytes into a 4096-byte page; a view that keeps its own buffer alive."""
    dtype = np.dtype(dtype)
    assert offset % dtype.itemsize == 0 and 0 <= offset < PAGE
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(size + 2 * PAGE, np.uint8)
    start = (-raw.ctypes.data) % PAGE + offset
    array = raw[start:start + size].view(dtype).reshape(shape)
    assert array.ctypes.data % PAGE == offset and array.flags.c_contiguous
    return array


def trimmed(count: int) -> int:
    """`count` (of test examples, of placements of one kind) times ASCEND_GRAD_TEST_FRACTION, rounded
    up, at least 1: the emulated aarch64 runs (tests/aarch64) take a share of each kind; 1 by default."""
    import math
    import os

    fraction = float(os.environ.get("ASCEND_GRAD_TEST_FRACTION") or 1.0)
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"ASCEND_GRAD_TEST_FRACTION must be in (0, 1], got {fraction}")
    return max(1, math.ceil(count * fraction))


# The sizes the library is told where a check runs again on another table or build (the other
# instruction sets, the wheels, the emulated aarch64 runs, the sanitizer job): outputs streamed from
# 1 MiB and NHWC half-type samples kept up to 1 MiB, the paths past each on arrays 16-32 times smaller
# than at the library's own 32 and 16 MiB (the tests' cases follow the sizes they are given).
TRIMMED_SIZES = {"ASCEND_GRAD_STREAM_BYTES": str(1 << 20), "ASCEND_GRAD_SAMPLE_SCRATCH_BYTES": str(1 << 20)}


def reported_sizes(text: str) -> set[tuple[str, str]]:
    """The sizes the library's ASCEND_GRAD_VERBOSE lines in `text` report, as (streamed from, sample
    scratch up to) in bytes: TRIMMED_SIZES' order."""
    import re

    return set(re.findall(r"ascend-grad: outputs streamed from (\d+) bytes, NHWC sample scratch up to (\d+) bytes", text))


def library_copy(prefix: str) -> str:
    """A private copy of the kernel library, in a folder of its own that is removed when the process
    exits (a mapped library may be unlinked): a library rebuilt in place under a session crashes it,
    and a copy loads as a library of its own, which reads its environment once, when registered."""
    import atexit
    import shutil
    import tempfile

    from ascend_grad import runtime_ext

    folder = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, folder, True)
    return shutil.copy(runtime_ext.library_path(), folder)
