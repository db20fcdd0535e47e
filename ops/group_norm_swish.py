"""GroupNormSwish(x, gamma, beta) -> (y, mean, rstd), as aclnnGroupNormSwish: the forward whose
mean and rstd GroupNormSwishGrad consumes.

    per (n, group): mean, biased var over its (C/G) * HxW elements;  rstd = 1 / sqrt(var + eps)
    z = (x - mean) * rstd * gamma[c] + beta[c]
    y = z * sigmoid(swish_scale * z) if activate_swish else z

y has x's dtype T; mean and rstd are (N, G) in gamma's dtype U.
"""

import onnx
from onnxscript import BOOL, DOUBLE, FLOAT, script
from onnxscript import opset18 as op

from ascend_grad.ops._group_norm import CheckedLayout, GroupNormLayout
from ascend_grad.ops._schema import NodeView, attribute, dtype_name, make_schema, tensor_param
from ascend_grad.ops._script import ascend, flat_function_proto

OP_TYPE = "GroupNormSwish"


@script(ascend, default_opset=op)
def GroupNormSwish(
    x,
    gamma,
    beta,
    num_groups: int,
    eps: float = 1e-5,
    swish_scale: float = 1.0,
    activate_swish: int = 1,
    data_format: str = "NCHW",
):
    view, param_view, _, stat_shape, spatial_axis, channel_axis, _, M = GroupNormLayout(
        x, num_groups=num_groups, data_format=data_format
    )
    group_axes = op.Concat(channel_axis, spatial_axis, axis=0)

    # (allowzero: a dim 0 of x, as N = 0 or HxW = 0, is a 0 in the view, not "keep the input's dim")
    X = op.Reshape(op.Cast(x, to=FLOAT.dtype), view, allowzero=1)
    gam = op.Reshape(op.Cast(gamma, to=FLOAT.dtype), param_view, allowzero=1)
    bet = op.Reshape(op.Cast(beta, to=FLOAT.dtype), param_view, allowzero=1)
    # Each full-size op is one pass over memory: whatever depends only on (n, group) or (n, c) is
    # folded into small per-(n, c) coefficients, shaped (N, G, C/G, 1), or (N, 1, G, C/G) for NHWC,
    # so that they broadcast over the spatial positions only (an (N, 1, G, 1) operand makes
    # onnxruntime loop over spans of C/G elements).
    # Two passes (mean, then the centred sum of squares): no cancellation when |mean| >> std. The
    # mean is summed in double (onnxruntime's float ReduceSum can lose 1e-3 of a long sum) and
    # kept as float hi + lo, so x - mean = (x - hi) - lo keeps its digits when a group's values
    # nearly agree.
    mu64 = op.ReduceSum(op.Cast(X, to=DOUBLE.dtype), group_axes, keepdims=1) / op.Cast(M, to=DOUBLE.dtype)
    mu = op.Cast(mu64, to=FLOAT.dtype)
    lo = op.Cast(mu64 - op.Cast(mu, to=DOUBLE.dtype), to=FLOAT.dtype)
    per_nc = op.Shape(mu * gam)
    centred = (X - op.Expand(mu, per_nc)) - op.Expand(lo, per_nc)
    var = op.ReduceSum(centred * centred, group_axes, keepdims=1) / M
    r = op.Reciprocal(op.Sqrt(var + op.Constant(value_float=eps)))
    rg = op.Expand(r, per_nc) * gam
    z = centred * rg + bet
    # y = z sigmoid(b z) = z / (1 + exp(-b z)): relatively exact on both tails; below b z = -88.7
    # the exp overflows to inf and y to 0, no NaN. Without swish, -b z is replaced by -inf (the
    # coefficients of centred are 0 and -inf), so y = z / 1 exactly: no Where at full size, which
    # onnxruntime runs 20x slower than an arithmetic op.
    swish_on = op.Cast(op.Constant(value_int=activate_swish), to=BOOL.dtype)
    neg_scale = op.Neg(op.Constant(value_float=swish_scale))
    nbz_slope = op.Where(swish_on, neg_scale * rg, op.Constant(value_float=0.0))
    nbz_offset = op.Where(swish_on, neg_scale * bet, op.Constant(value_float=float("-inf")))
    nbz = centred * nbz_slope + nbz_offset  # -b z
    Z = z / (op.Constant(value_float=1.0) + op.Exp(nbz))

    y = op.CastLike(op.Reshape(Z, op.Shape(x), allowzero=1), x)
    mean = op.CastLike(op.Reshape(mu, stat_shape, allowzero=1), gamma)
    rstd = op.CastLike(op.Reshape(r, stat_shape, allowzero=1), gamma)
    return y, mean, rstd



def function_proto() -> onnx.FunctionProto:
    """The body, one flat function (GroupNormLayout inlined)."""
    return flat_function_proto(GroupNormSwish, GroupNormLayout)


def _infer(node: NodeView) -> None:
    layout = CheckedLayout(node, node.input_dims(0))
    x_type = node.check_float_type(0, "x")
    gamma_type, beta_type = node.check_float_type(1, "gamma"), node.check_float_type(2, "beta")
    if gamma_type and beta_type and gamma_type != beta_type:
        raise node.fail(f"gamma and beta must share one dtype (U): {dtype_name(gamma_type)} and {dtype_name(beta_type)}")
    layout.check_param(node, node.input_dims(1), "gamma")
    layout.check_param(node, node.input_dims(2), "beta")
    node.attr_flag("activate_swish")
    eps = node.attr("eps", 1e-5)
    if not eps >= 0:
        raise node.fail(f"eps must be >= 0, got {eps}")
    u_type = gamma_type or beta_type
    node.set_output(0, x_type, layout.dims)
    node.set_output(1, u_type, [layout.N, layout.num_groups])
    node.set_output(2, u_type, [layout.N, layout.num_groups])


SCHEMA = make_schema(
    OP_TYPE,
    __doc__,
    inputs=[
        tensor_param("x", "T", "(N, C, *spatial) or (N, *spatial, C)"),
        tensor_param("gamma", "U", "scale, (C,)"),
        tensor_param("beta", "U", "shift, (C,)"),
    ],
    outputs=[
        tensor_param("y", "T", "swish(GroupNorm(x)), or GroupNorm(x) when activate_swish is 0"),
        tensor_param("mean", "U", "per-(n, group) mean, (N, G)", optional=True),
        tensor_param("rstd", "U", "per-(n, group) 1/sqrt(var + eps), (N, G)", optional=True),
    ],
    type_params=["T", "U"],
    attributes=[
        attribute("num_groups", "INT", "number of groups G; must divide C"),
        attribute("eps", "FLOAT", "added to the variance", 1e-5),
        attribute("swish_scale", "FLOAT", "the b of swish z * sigmoid(b * z)", 1.0),
        attribute("activate_swish", "INT", "1 applies swish after the normalisation", 1),
        attribute("data_format", "STRING", "'NCHW' (N, C, *spatial) or 'NHWC' (N, *spatial, C)", "NCHW"),
    ],
    infer=_infer,
)
