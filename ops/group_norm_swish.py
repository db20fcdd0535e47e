"""GroupNormSwish(x, gamma, beta) -> (y, mean, rstd), as aclnnGroupNormSwish: the forward whose
mean and rstd GroupNormSwishGrad consumes.

    per (n, group): mean, biased var over its (C/G) * HxW elements;  rstd = 1 / sqrt(var + eps)
    z = (x - mean) * rstd * gamma[c] + beta[c]
    y = z * sigmoid(swish_scale * z) if activate_swish else z

y has x's dtype T; mean and rstd are (N, G) in gamma's dtype U.
"""

from onnxscript import BOOL, FLOAT, script
from onnxscript import opset18 as op

from ascend_grad.ops._group_norm import GroupLayout
from ascend_grad.ops._schema import NodeView, attribute, dtype_name, make_schema, tensor_param
from ascend_grad.ops._script import ascend

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
    # The same 4-D view as GroupNormSwishGrad: NCHW (N, G, C/G, HxW), NHWC (N, HxW, G, C/G).
    formats = op.Concat(
        op.Constant(value_strings=["NHWC"]), op.Reshape(op.Constant(value_string=data_format), [1]), axis=0
    )
    unique_formats, _, _, _ = op.Unique(formats)
    nhwc = op.Equal(op.Size(unique_formats), op.Constant(value_int=1))
    one = op.Constant(value_ints=[1])
    N = op.Shape(x, start=0, end=1)
    C = op.Where(nhwc, op.Shape(x, start=-1), op.Shape(x, start=1, end=2))
    HxW = op.ReduceProd(op.Where(nhwc, op.Shape(x, start=1, end=-1), op.Shape(x, start=2)), keepdims=1)
    G = op.Reshape(op.Constant(value_int=num_groups), one)
    Cg = op.Div(C, G)
    view = op.Where(nhwc, op.Concat(N, HxW, G, Cg, axis=0), op.Concat(N, G, Cg, HxW, axis=0))
    param_view = op.Where(nhwc, op.Concat(one, one, G, Cg, axis=0), op.Concat(one, G, Cg, one, axis=0))
    group_axes = op.Where(nhwc, op.Constant(value_ints=[1, 3]), op.Constant(value_ints=[2, 3]))
    M = op.Cast(Cg * HxW, to=FLOAT.dtype)

    X = op.Reshape(op.Cast(x, to=FLOAT.dtype), view)
    gam = op.Reshape(op.Cast(gamma, to=FLOAT.dtype), param_view)
    bet = op.Reshape(op.Cast(beta, to=FLOAT.dtype), param_view)
    # Two passes (mean, then the centred sum of squares): no cancellation when |mean| >> std.
    mu = op.ReduceSum(X, group_axes, keepdims=1) / M
    centred = X - mu
    var = op.ReduceSum(centred * centred, group_axes, keepdims=1) / M
    r = op.Reciprocal(op.Sqrt(var + op.Constant(value_float=eps)))
    z = centred * r * gam + bet
    swish_on = op.Cast(op.Constant(value_int=activate_swish), to=BOOL.dtype)
    # sigmoid(b z) from exp(-|b z|), relatively exact on both tails (as in SiluBackward)
    bz = op.Constant(value_float=swish_scale) * z
    e = op.Exp(op.Neg(op.Abs(bz)))
    unit = op.Constant(value_float=1.0)
    q = unit / (unit + e)
    Z = op.Where(swish_on, z * op.Where(bz < op.Constant(value_float=0.0), e * q, q), z)

    stat_shape = op.Concat(N, G, axis=0)
    y = op.CastLike(op.Reshape(Z, op.Shape(x)), x)
    mean = op.CastLike(op.Reshape(mu, stat_shape), gamma)
    rstd = op.CastLike(op.Reshape(r, stat_shape), gamma)
    return y, mean, rstd


def _infer(node: NodeView) -> None:
    layout = GroupLayout(node, node.input_dims(0))
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
