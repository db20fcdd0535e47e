"""The ascend.grad op set: one module per op (onnxscript function, onnx schema), float64 references.

Importing this package registers the four schemas with onnx, so `onnx.checker` and
`onnx.shape_inference` accept and type graphs that use the ops.
"""

from ascend_grad.ops import reference
from ascend_grad.ops._models import attach_functions, make_node_model
from ascend_grad.ops.group_norm_swish import GroupNormSwish
from ascend_grad.ops.group_norm_swish_grad import GroupNormSwishGrad
from ascend_grad.ops.mish_backward import MishBackward
from ascend_grad.ops.silu_backward import SiluBackward

__all__ = [
    "GroupNormSwish",
    "GroupNormSwishGrad",
    "MishBackward",
    "SiluBackward",
    "attach_functions",
    "make_node_model",
    "reference",
]
