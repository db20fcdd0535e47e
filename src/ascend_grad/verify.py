"""Checking a fused graph against the graph it came from: same inputs, every output compared."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from ascend_grad.testing import BFLOAT16, TOLERANCE, run_onnxruntime


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
        expected = run_onnxruntime(original_path, feeds)
    except Exception as error:
        raise CannotVerify(f"the original graph does not run in this onnxruntime: {str(error).splitlines()[0][:200]}") from None
    got = run_onnxruntime(fused_path, feeds, runtime_ext.session_options())
    errors = {}
    for name, want in expected.items():
        want64, got64 = want.astype(np.float64), got[name].astype(np.float64)
        scale = np.abs(want64).max() if want64.size else 0.0
        errors[name] = float(np.abs(got64 - want64).max() / (scale or 1.0)) if want64.size else 0.0
    return {"relative_errors": errors, "bound": bound_for(original)}
