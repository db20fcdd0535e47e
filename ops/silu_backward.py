"""SiluBackward(gradOutput, self) -> gradInput, as aclnnSiluBackward.

    s = sigmoid(x)
    gradInput = gradOutput * s * (1 + x * (1 - s))        x = self, the forward INPUT

T in {float, float16, bfloat16}; both inputs and the output share dtype and shape, rank 0..8.
"""

import onnx
from onnxscript import FLOAT, script
from onnxscript import opset18 as op

from ascend_grad.ops._schema import NodeView, dtype_name, make_schema, same_shape, tensor_param
from ascend_grad.ops._script import ascend, flat_function_proto

OP_TYPE = "SiluBackward"


@script(ascend, default_opset=op)
def SiluBackward(gradOutput, self):
    # Compute in float whatever T is, and round once at the end (a Cast of float to float is
    # removed by onnxruntime's optimizer).
    dy = op.Cast(gradOutput, to=FLOAT.dtype)
    x = op.Cast(self, to=FLOAT.dtype)
    one = op.Constant(value_float=1.0)
    # s = 1 / (1 + exp(-x)): exact in relative terms on both tails, where onnxruntime's Sigmoid is
    # only absolutely accurate (1e-2 relative error at x = -12). Below x = -88.7 the exp overflows
    # to inf and s to 0 (the true s is under 1.2e-38 there): no NaN. No Where: onnxruntime runs it
    # 20x slower than an arithmetic op, and every op here is one pass over memory.
    nx = op.Neg(x)
    s = op.Reciprocal(one + op.Exp(nx))
    dx = dy * (s * (one - nx * (one - s)))  # dy s (1 + x (1 - s))
    return op.CastLike(dx, gradOutput)



def function_proto() -> onnx.FunctionProto:
    """The body, as onnx's FunctionProto."""
    return flat_function_proto(SiluBackward)


def _infer(node: NodeView) -> None:
    dy_type, x_type = node.check_float_type(0, "gradOutput"), node.check_float_type(1, "self")
    dy_dims, x_dims = node.input_dims(0), node.input_dims(1)
    node.check_rank(dy_dims, "gradOutput", 0)
    node.check_rank(x_dims, "self", 0)
    if dy_type and x_type and dy_type != x_type:
        raise node.fail(
            f"gradOutput and self must have the same dtype, got {dtype_name(dy_type)} and {dtype_name(x_type)}"
        )
    node.set_output(0, dy_type or x_type, same_shape(node, dy_dims, x_dims, "gradOutput and self"))


SCHEMA = make_schema(
    OP_TYPE,
    __doc__,
    inputs=[
        tensor_param("gradOutput", "T", "gradient of the SiLU output"),
        tensor_param("self", "T", "input of the forward SiLU"),
    ],
    outputs=[tensor_param("gradInput", "T", "gradient of the SiLU input")],
    type_params=["T"],
    attributes=[],
    infer=_infer,
)
