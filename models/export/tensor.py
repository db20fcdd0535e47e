"""Tensor creation and padding.

- `aten.empty_permuted`, an output buffer that a decomposition then fills, which torch.onnx
  (torch 2.13) cannot export: translated as zeros.
- `aten.constant_pad_nd` with negative pads (a crop: the backward of every F.pad, e.g. before a
  VAE's strided conv), whose C++ kernel cannot be traced with a symbolic batch ("storage_offset()
  on tensor with symbolic sizes"): decomposed, while the joint graph is traced, into slices then
  the padding with what is left (PyTorch's reference decomposition writes with copy_to, which the
  joint trace refuses).
"""

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


def constant_pad_nd(x, pad, value=0.0):
    """The negative pads as slices, the rest by the op itself (NotImplemented: no negative pad, the
    op's own kernel traces fine)."""
    if all(p >= 0 for p in pad):
        return NotImplemented
    for k in range(len(pad) // 2):
        dim, low, high = x.dim() - 1 - k, pad[2 * k], pad[2 * k + 1]
        if low < 0 or high < 0:
            x = torch.ops.aten.slice.Tensor(x, dim, max(-low, 0), x.shape[dim] + min(high, 0))
    rest = [max(p, 0) for p in pad]
    return torch.ops.aten.constant_pad_nd.default(x, rest, value) if any(rest) else torch.ops.aten.clone.default(x)


TABLE = {torch.ops.aten.empty_permuted.default: empty_permuted}
# used while the joint graph is traced
DECOMPOSITIONS = {torch.ops.aten.constant_pad_nd.default: constant_pad_nd}
