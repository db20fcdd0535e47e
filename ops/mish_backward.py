"""MishBackward(gradOutput, self) -> gradInput, as aclnnMishBackward.

    sp = softplus(x) = log1p(exp(x)),  t = tanh(sp)
    gradInput = gradOutput * (t + x * sigmoid(x) * (1 - t*t))        x = self

gradOutput and self may differ in dtype (float, float16, bfloat16): the output dtype is their
promotion (equal -> same, any mix -> float). Shapes broadcast (numpy rules), rank 0..8; empty
tensors are an error, as on Ascend.

An ONNX function's output dtype must follow one input or be fixed, so no single body serves every
pair: `MishBackward` (the body that follows gradOutput) serves the equal pairs and (float, T);
`function_for_pairs` picks the body that follows self, or the one fixed to float, when a model's
pairs need it.
"""

from collections.abc import Iterable

import onnx
from onnx import TensorProto
from onnxscript import FLOAT, script
from onnxscript import opset18 as op

from ascend_grad.ops._schema import NodeView, dtype_name, make_schema, promote, shape_str, tensor_param
from ascend_grad.ops._script import ascend

OP_TYPE = "MishBackward"


@script(ascend, default_opset=op)
def MishBackward(gradOutput, self):
    dy = op.Cast(gradOutput, to=FLOAT.dtype)
    x = op.Cast(self, to=FLOAT.dtype)
    one = op.Constant(value_float=1.0)
    two = op.Constant(value_float=2.0)
    # Everything from w = exp(x), in forms exact in relative terms on both tails that overflow
    # into the right limits (no NaN at x = +-90): onnxruntime's Softplus runs 40x slower than an
    # arithmetic op, and a Where (to pick a stable branch) 20x; every op here is one pass over memory.
    w = op.Exp(x)
    # t = tanh(softplus(x)) = ((1+w)^2 - 1) / ((1+w)^2 + 1) = 1 / (1 + 2/n), n = w (w + 2):
    # n = inf gives 1, n = 0 (w underflowed) gives 0.
    t = op.Reciprocal(one + two / (w * (w + two)))
    # s = sigmoid(x) = 1 / (1 + 1/w): w = inf gives 1, w = 0 gives 0.
    s = op.Reciprocal(one + op.Reciprocal(w))
    dx = dy * (t + x * s * (one - t * t))
    return op.CastLike(dx, gradOutput)


# How the output dtype is chosen by each body, and the (gradOutput, self) pairs it is right for.
FOLLOWS = ("gradOutput", "self", "float")


def _serves(follows: str, pair: tuple[int, int]) -> bool:
    dy_type, x_type = pair
    out = {"gradOutput": dy_type, "self": x_type, "float": TensorProto.FLOAT}[follows]
    return out == promote(dy_type, x_type)


def function_proto(follows: str = "gradOutput") -> onnx.FunctionProto:
    """The body whose output dtype follows gradOutput, follows self, or is fixed to float."""
    function = MishBackward.to_function_proto()
    last = function.node[-1]  # CastLike(dx, gradOutput): the one rounding at the end
    if follows == "self":
        last.input[1] = "self"
    elif follows == "float":
        del last.input[1:]
        last.op_type = "Identity"
    elif follows != "gradOutput":
        raise ValueError(f"[{OP_TYPE}] follows must be one of {FOLLOWS}, got {follows!r}")
    return function


def function_for_pairs(pairs: Iterable[tuple[int, int]]) -> onnx.FunctionProto:
    """The one body right for every (gradOutput, self) dtype pair of a model (unknown types: 0)."""
    known = {p for p in pairs if p[0] and p[1]}
    for follows in FOLLOWS:
        if all(_serves(follows, p) for p in known):
            return function_proto(follows)
    listed = ", ".join(f"({dtype_name(a)}, {dtype_name(b)})" for a, b in sorted(known))
    raise ValueError(
        f"[{OP_TYPE}] no single ONNX function body serves the dtype pairs {listed} of this model; "
        "run it with the ascend-grad kernel library, which serves every pair"
    )


def broadcast_dims(node: NodeView, a: list, b: list) -> list:
    """numpy broadcasting over dims that may be symbolic (str) or unknown (None)."""
    rank = max(len(a), len(b))
    a = [1] * (rank - len(a)) + list(a)
    b = [1] * (rank - len(b)) + list(b)
    out = []
    for da, db in zip(a, b):
        if da == 1 or da == db:
            out.append(db)
        elif db == 1:
            out.append(da)
        elif isinstance(da, int) and isinstance(db, int):
            raise node.fail(f"gradOutput {shape_str(a)} and self {shape_str(b)} do not broadcast")
        else:  # a name against a size or another name: only a size is sure to survive
            out.append(da if isinstance(da, int) else db if isinstance(db, int) else None)
    return out


def _infer(node: NodeView) -> None:
    dy_type, x_type = node.check_float_type(0, "gradOutput"), node.check_float_type(1, "self")
    dy_dims, x_dims = node.input_dims(0), node.input_dims(1)
    for dims, what in ((dy_dims, "gradOutput"), (x_dims, "self")):
        node.check_rank(dims, what, 0)
        if dims is not None and 0 in dims:
            raise node.fail(f"{what} is empty {shape_str(dims)}; aclnnMishBackward rejects empty tensors")
    dims = None if dy_dims is None or x_dims is None else broadcast_dims(node, dy_dims, x_dims)
    node.set_output(0, promote(dy_type, x_type) if dy_type and x_type else 0, dims)


SCHEMA = make_schema(
    OP_TYPE,
    __doc__,
    inputs=[
        tensor_param("gradOutput", "T1", "gradient of the Mish output"),
        tensor_param("self", "T2", "input of the forward Mish"),
    ],
    outputs=[tensor_param("gradInput", "T3", "gradient of the Mish input: promoted dtype, broadcast shape")],
    type_params=["T1", "T2", "T3"],
    attributes=[],
    infer=_infer,
)
