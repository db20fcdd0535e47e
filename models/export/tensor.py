"""Tensor creation: `aten.empty_permuted`, an output buffer that a decomposition then fills, which
torch.onnx (torch 2.13) cannot export."""

from __future__ import annotations

import onnx
import torch
from onnxscript import opset18 as op


def empty_permuted(size, physical_layout, dtype=None, layout=None, device=None, pin_memory=None):
    """An uninitialised buffer: zeros of that shape and dtype (every use overwrites it). Sizes may be
    symbolic (a dynamic batch)."""
    dims = [op.Constant(value_ints=[d]) if isinstance(d, int) else op.Reshape(d, op.Constant(value_ints=[1])) for d in size]
    elem_type = int(dtype) if dtype is not None else onnx.TensorProto.FLOAT
    return op.ConstantOfShape(op.Concat(*dims, axis=0), value=onnx.helper.make_tensor("zero", elem_type, [1], [0]))


TABLE = {torch.ops.aten.empty_permuted.default: empty_permuted}
