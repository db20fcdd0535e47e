"""Checking a fused graph against the graph it came from: same inputs, every output compared."""

from __future__ import annotations

import math
import os

import numpy as np
import onnx
from onnx import TensorProto

from ascend_grad.testing import BFLOAT16, TOLERANCE, relative_error, run_onnxruntime


class CannotVerify(ValueError):
    """The original graph cannot run here (an op stock onnxruntime lacks, say)."""


DEFAULT_MEMORY = 1 << 30  # the bytes compare_models may give its random inputs (ascend-grad fuse --verify-memory)


def _feed_specs(model: onnx.ModelProto, symbolic: int = 2) -> list[tuple[str, list[int], np.dtype]]:
    """(name, shape, dtype) of each graph input random_feeds makes (symbolic dims get `symbolic`);
    CannotVerify for an input it cannot make (no element type, a negative dim, not a tensor)."""
    initializers = {t.name for t in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        if value.type.WhichOneof("value") != "tensor_type":
            raise CannotVerify(f"input {value.name!r} is not a tensor: no random value can be made for it")
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else symbolic for d in tensor.shape.dim]
        if any(d < 0 for d in shape):
            raise CannotVerify(f"input {value.name!r} has a negative dimension: shape {shape}")
        try:
            dtype = BFLOAT16 if tensor.elem_type == TensorProto.BFLOAT16 else np.dtype(
                onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        except (KeyError, TypeError, ValueError):
            raise CannotVerify(f"input {value.name!r} has no element type random values can be made of "
                               f"(elem_type {tensor.elem_type})") from None
        specs.append((value.name, shape, dtype))
    return specs


def check_feed_memory(model: onnx.ModelProto, budget: int = DEFAULT_MEMORY, symbolic: int = 2) -> int:
    """The bytes random_feeds would allocate for the inputs; CannotVerify above `budget`, naming the
    largest input (before anything is allocated)."""
    sizes = [(math.prod(shape) * dtype.itemsize, name, shape, dtype) for name, shape, dtype in _feed_specs(model, symbolic)]
    total = sum(size for size, *_ in sizes)
    if total > budget:
        size, name, shape, dtype = max(sizes, key=lambda s: s[0])
        raise CannotVerify(f"--verify would make random inputs of {_bytes(total)}, over its budget of {_bytes(budget)} "
                           f"(--verify-memory): input {name!r} alone, shape {shape} ({dtype}, symbolic dims as "
                           f"{symbolic}), takes {_bytes(size)}")
    return total


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        n /= 1024
        if n < 1024 or unit == "EiB":
            return f"{n:.4g} {unit}"
    return f"{n} bytes"


def random_feeds(model: onnx.ModelProto, seed: int = 0, symbolic: int = 2) -> dict[str, np.ndarray]:
    """Standard-normal inputs of each graph input's dtype and shape (symbolic dims get `symbolic`)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, shape, dtype in _feed_specs(model, symbolic):
        feeds[name] = rng.standard_normal(shape).astype(dtype) if dtype.kind == "f" or dtype == BFLOAT16 else np.zeros(shape, dtype)
    return feeds


def bound_for(model: onnx.ModelProto) -> float:
    """Twice SPEC.md's bound for the lowest-precision float type the graph computes in: the fused
    graph rounds once where the decomposed one rounded at every step."""
    types = {t.data_type for t in model.graph.initializer} | {v.type.tensor_type.elem_type for v in model.graph.input}
    if TensorProto.BFLOAT16 in types:
        return 2 * TOLERANCE[BFLOAT16]
    if TensorProto.FLOAT16 in types:
        return 2 * TOLERANCE[np.dtype(np.float16)]
    return 2 * TOLERANCE[np.dtype(np.float32)]


def fused_graph_bound(model: onnx.ModelProto) -> float:
    """The bound the tests hold a fused graph's outputs to against the graph as written: bound_for's
    in float16 and bfloat16, where each graph rounds in its own places and either may lie SPEC.md's
    bound from the exact result (a weight gradient of silu_mlp.aot.fp16 differed by 1.15e-3, and of
    resblock.aot.fp16 by 1.29e-3, with the fusions exact); SPEC.md's own bound in float32."""
    bound = bound_for(model)
    return bound / 2 if bound == 2 * TOLERANCE[np.dtype(np.float32)] else bound


def compare_models(original_path: str, fused_path: str, seed: int = 0, memory_budget: int = DEFAULT_MEMORY) -> dict:
    """Run both (the fused one with the kernel library) on the same random inputs; relative errors
    max |fused - original| / max |original| per output, and the bound they are held to. Inputs
    above `memory_budget` bytes are refused (CannotVerify) before they are made."""
    from ascend_grad import runtime_ext

    original = onnx.load(original_path, load_external_data=False)
    check_feed_memory(original, memory_budget)
    feeds = random_feeds(original, seed)
    try:
        expected = _run(original_path, feeds)
    except Exception as error:
        raise CannotVerify(f"the original graph does not run in this onnxruntime: {str(error).splitlines()[0][:200]}") from None
    got = _run(fused_path, feeds, runtime_ext.session_options())
    errors = {name: output_error(got[name], want) for name, want in expected.items()}
    return {"relative_errors": errors, "bound": bound_for(original)}


def _run(path: str, feeds, session_options=None) -> dict[str, np.ndarray]:
    """run_onnxruntime from the file; if onnxruntime refuses it and the weights fit in one protobuf,
    again with the external data loaded: onnxruntime's shape inference cannot read a constant it
    needs (an Unsqueeze's axes, a Reshape's shape) from external data, which a model saved with
    every tensor external has."""
    session_options = _quiet(session_options)
    try:
        return run_onnxruntime(path, feeds, session_options)
    except Exception:
        files = _external_files(path)
        if not files or sum(map(os.path.getsize, [path, *files])) > 1_800_000_000:
            raise
    return run_onnxruntime(onnx.load(path), feeds, session_options)


def _quiet(session_options=None):
    """Session options with onnxruntime's C++ logger held to fatal messages: its warnings (an
    unused initializer, say) and error lines would reach stderr, which belongs to the command
    line; an error still comes back as an exception. ASCEND_GRAD_DEBUG=1 keeps them."""
    import onnxruntime as ort

    session_options = session_options or ort.SessionOptions()
    if not os.environ.get("ASCEND_GRAD_DEBUG"):
        ort.set_default_logger_severity(4)
        session_options.log_severity_level = 4
    return session_options


def _external_files(path: str) -> list[str]:
    """The existing files that hold the model's external initializers."""
    model = onnx.load(path, load_external_data=False)
    folder = os.path.dirname(os.path.abspath(path))
    names = {entry.value for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL
             for entry in t.external_data if entry.key == "location"}
    return [f for f in (os.path.join(folder, n) for n in sorted(names)) if os.path.isfile(f)]


def output_error(got: np.ndarray, want: np.ndarray) -> float:
    """The relative error over finite values; infinity where the shapes differ or where one graph
    gives NaN or an infinity and the other does not give the same."""
    want64, got64 = want.astype(np.float64), got.astype(np.float64)
    if got64.shape != want64.shape:
        return float("inf")
    finite = np.isfinite(want64) & np.isfinite(got64)
    same_special = (np.isnan(want64) & np.isnan(got64)) | (np.isinf(want64) & (want64 == got64))
    return relative_error(got64, want64) if np.all(finite | same_special) else float("inf")
