"""Checking a fused graph against the graph it came from: same inputs, every output compared."""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto

from ascend_grad.testing import BFLOAT16, TOLERANCE, relative_error, run_onnxruntime


class CannotVerify(ValueError):
    """The original graph cannot run here (an op stock onnxruntime lacks, say)."""


def random_feeds(model: onnx.ModelProto, seed: int = 0, symbolic: int = 2) -> dict[str, np.ndarray]:
    """Standard-normal inputs of each graph input's dtype and shape (symbolic dims get `symbolic`)."""
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else symbolic for d in tensor.shape.dim]
        dtype = BFLOAT16 if tensor.elem_type == TensorProto.BFLOAT16 else onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        feeds[value.name] = rng.standard_normal(shape).astype(dtype) if dtype.kind == "f" or dtype == BFLOAT16 else np.zeros(shape, dtype)
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


def compare_models(original_path: str, fused_path: str, seed: int = 0) -> dict:
    """Run both (the fused one with the kernel library) on the same random inputs; relative errors
    max |fused - original| / max |original| per output, and the bound they are held to."""
    from ascend_grad import runtime_ext

    original = onnx.load(original_path, load_external_data=False)
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
    try:
        return run_onnxruntime(path, feeds, session_options)
    except Exception:
        files = _external_files(path)
        if not files or sum(map(os.path.getsize, [path, *files])) > 1_800_000_000:
            raise
    return run_onnxruntime(onnx.load(path), feeds, session_options)


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
