"""onnxscript translations for the ATen ops torch.onnx cannot export but joint training graphs hold.

`aten.convolution_backward` (the gradient of every Conv) and `aten.empty_permuted` (an output
buffer that a decomposition then fills) have no torch.onnx translation in torch 2.13.
"""

from __future__ import annotations

import onnx
import torch
from onnxscript import opset18 as op


def convolution_backward(
    grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    """grad_input, grad_weight, grad_bias of a plain 2-D convolution (stride 1, dilation 1, groups 1)."""
    if transposed or groups != 1 or len(stride) != 2 or any(v != 1 for v in [*stride, *dilation]):
        raise NotImplementedError("convolution_backward: only 2-D convolutions with stride 1, dilation 1, groups 1")
    pads = list(padding) * 2
    grad_input = op.ConvTranspose(grad_output, weight, pads=pads)
    # dW[o, i] = sum_n x[n, i] (*) dy[n, o]: a convolution over the batch with batch and channels swapped
    swapped = op.Conv(op.Transpose(input, perm=[1, 0, 2, 3]), op.Transpose(grad_output, perm=[1, 0, 2, 3]), pads=pads)
    grad_weight = op.Transpose(swapped, perm=[1, 0, 2, 3])
    grad_bias = op.ReduceSum(grad_output, op.Constant(value_ints=[0, 2, 3]), keepdims=0)
    return grad_input, grad_weight, grad_bias


def empty_permuted(size, physical_layout, dtype=None, layout=None, device=None, pin_memory=None):
    """An uninitialised buffer: zeros of that shape and dtype (every use overwrites it). Sizes may be
    symbolic (a dynamic batch)."""
    dims = [op.Constant(value_ints=[d]) if isinstance(d, int) else op.Reshape(d, op.Constant(value_ints=[1])) for d in size]
    elem_type = int(dtype) if dtype is not None else onnx.TensorProto.FLOAT
    return op.ConstantOfShape(op.Concat(*dims, axis=0), value=onnx.helper.make_tensor("zero", elem_type, [1], [0]))


TABLE = {
    torch.ops.aten.convolution_backward.default: convolution_backward,
    torch.ops.aten.empty_permuted.default: empty_permuted,
}
