"""Tensor creation and padding.

- `aten.empty_permuted`, an output buffer that a decomposition then fills, which torch.onnx
  (torch 2.13) cannot export: translated as zeros.
- `aten.constant_pad_nd` (F.pad; its backward is itself with negative pads, a crop), whose C++
  kernel does not trace with a symbolic batch: with negative pads it fails ("storage_offset() on
  tensor with symbolic sizes", F.pad before a VAE's strided conv), on some inputs it silently
  specialises the batch. Decomposed, while the joint graph is traced, into slices and concatenated
  constant blocks (PyTorch's reference decomposition writes with copy_to, which the joint trace
  refuses).
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
    """Negative pads as slices, positive ones as constant blocks concatenated: the C++ kernel is
    never traced (on some symbolic-batch inputs it specialises the batch to the example's size)."""
    copied = False
    for k in range(len(pad) // 2):
        dim, low, high = x.dim() - 1 - k, pad[2 * k], pad[2 * k + 1]
        if low < 0 or high < 0:
            x = torch.ops.aten.slice.Tensor(x, dim, max(-low, 0), x.shape[dim] + min(high, 0))
        parts = ([_block(x, dim, low, value)] if low > 0 else []) + [x] + ([_block(x, dim, high, value)] if high > 0 else [])
        if len(parts) > 1:
            x, copied = torch.ops.aten.cat.default(parts, dim), True
    return x if copied else torch.ops.aten.clone.default(x)  # the op's result is never a view of its input


def _block(x, dim: int, size: int, value):
    shape = list(x.shape)
    shape[dim] = size
    return torch.ops.aten.full.default(shape, value, dtype=x.dtype, device=x.device)


TABLE = {torch.ops.aten.empty_permuted.default: empty_permuted}
# used while the joint graph is traced
DECOMPOSITIONS = {torch.ops.aten.constant_pad_nd.default: constant_pad_nd}
