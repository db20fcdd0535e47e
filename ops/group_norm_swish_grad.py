"""GroupNormSwishGrad(dy, mean, rstd, x, gamma, beta) -> (dx, dgamma, dbeta), as aclnnGroupNormSwishGrad.

The backward of y = swish(GroupNorm(x)), recomputing the forward from mean and rstd:

    xhat = (x - mean[n,g]) * rstd[n,g],   z = xhat * gamma[c] + beta[c]
    s = sigmoid(swish_scale * z),         g = dy * s * (1 + swish_scale * z * (1 - s))
    dbeta[c] = sum_{n,hw} g,              dgamma[c] = sum_{n,hw} g * xhat
    per (n, group), M = (C/G) * HxW:      c1 = mean(g * gamma), c2 = mean(g * gamma * xhat)
    dx = rstd * (g * gamma - c1 - xhat * c2)

T (dy, x, dx) and U (mean, rstd, gamma, beta, dgamma, dbeta) are float types, possibly different.
dgamma and dbeta are optional outputs; a requested one whose flag is 0 is all zeros.
"""

import onnx
from onnxscript import BOOL, FLOAT, script
from onnxscript import opset18 as op

from ascend_grad.ops._group_norm import CheckedLayout, GroupNormLayout
from ascend_grad.ops._schema import (
    NodeView,
    attribute,
    dtype_name,
    make_schema,
    same_shape,
    tensor_param,
)
from ascend_grad.ops._script import ascend, flat_function_proto

OP_TYPE = "GroupNormSwishGrad"


@script(ascend, default_opset=op)
def GroupNormSwishGrad(
    dy,
    mean,
    rstd,
    x,
    gamma,
    beta,
    num_groups: int,
    swish_scale: float = 1.0,
    dgamma_is_require: int = 1,
    dbeta_is_require: int = 1,
    data_format: str = "NCHW",
):
    view, param_view, stat_view, _, spatial_axis, channel_axis, C, M = GroupNormLayout(
        x, num_groups=num_groups, data_format=data_format
    )

    # Everything in float; mean and rstd keep their own precision (never rounded to T). A Cast to
    # float of a float input is removed by onnxruntime's optimizer. (allowzero: a dim 0 of x, as
    # N = 0 or HxW = 0, is a 0 in the view, not "keep the input's dim".)
    X = op.Reshape(op.Cast(x, to=FLOAT.dtype), view, allowzero=1)
    dY = op.Reshape(op.Cast(dy, to=FLOAT.dtype), view, allowzero=1)
    mu = op.Reshape(op.Cast(mean, to=FLOAT.dtype), stat_view, allowzero=1)
    r = op.Reshape(op.Cast(rstd, to=FLOAT.dtype), stat_view, allowzero=1)
    gam = op.Reshape(op.Cast(gamma, to=FLOAT.dtype), param_view, allowzero=1)
    bet = op.Reshape(op.Cast(beta, to=FLOAT.dtype), param_view, allowzero=1)
    neg_scale = op.Neg(op.Constant(value_float=swish_scale))
    unit = op.Constant(value_float=1.0)

    # Each full-size op is one pass over memory, so the work is arranged to need few of them:
    # whatever depends only on (n, group) or (n, c) is folded into small per-(n, c) coefficients,
    # shaped (N, G, C/G, 1), or (N, 1, G, C/G) for NHWC, so that they broadcast over the spatial
    # positions only (an (N, 1, G, 1) operand makes onnxruntime loop over spans of C/G elements).
    # (BatchNormalization would do xc * a + b in one pass, not two, but only for NCHW, and
    # onnxruntime runs it on one thread: slower than Mul and Add from two threads on.)
    per_nc = op.Shape(r * gam)
    rg = op.Expand(r, per_nc) * gam  # d (xhat gamma) / d x
    # 1. recompute the forward from the centred x (exact subtraction, so no cancellation when
    #    |mean| >> std); only -b z is needed: g below is written in it.
    xc = X - op.Expand(mu, per_nc)
    nbz = xc * (neg_scale * rg) + neg_scale * bet  # -b z = -b (xhat gamma + beta)
    # sigmoid(b z) = 1 / (1 + exp(-b z)): relatively exact on both tails. Below b z = -88.7 the exp
    # overflows to inf and s to 0 (the true s is under 1.2e-38 there): no NaN. No Where, which
    # onnxruntime runs 20x slower than an arithmetic op.
    s = op.Reciprocal(unit + op.Exp(nbz))
    g = dY * (s * (unit - nbz * (unit - s)))  # dy s (1 + b z (1 - s))
    # 2. per-(n, c) sums over the spatial positions: sum g and sum g xhat = rstd * sum g (x - mean)
    #    (a sum over nothing, HxW = 0, stays 0 even where rstd is NaN, as sum g xhat does)
    zero = op.Constant(value_float=0.0)
    db_nc = op.ReduceSum(g, spatial_axis, keepdims=1)
    ds_nc = op.Where(M > zero, r, zero) * op.ReduceSum(g * xc, spatial_axis, keepdims=1)
    # 3. per (n, group), rstd times c1 = mean(g gamma) and c2 = mean(g gamma xhat); then
    #    dx = rstd (g gamma - c1 - xhat c2) = g (rstd gamma) - xc (rstd rstd c2) - rstd c1.
    #    rstd c1 sums the products (rstd gamma) g of the first term, so a group of one element
    #    gives exactly 0, as the formula does.
    rc1 = op.ReduceSum(rg * db_nc, channel_axis, keepdims=1) / M
    rc2 = op.ReduceSum(rg * ds_nc, channel_axis, keepdims=1) / M
    dX = g * rg - (xc * op.Expand(r * rc2, per_nc) + op.Expand(rc1, per_nc))
    # 4. parameter gradients: sums over n; zeros when not required
    batch_axis = op.Constant(value_ints=[0])
    dgamma_c = op.Reshape(op.ReduceSum(ds_nc, batch_axis, keepdims=1), C, allowzero=1)
    dbeta_c = op.Reshape(op.ReduceSum(db_nc, batch_axis, keepdims=1), C, allowzero=1)
    dgamma_on = op.Cast(op.Constant(value_int=dgamma_is_require), to=BOOL.dtype)
    dbeta_on = op.Cast(op.Constant(value_int=dbeta_is_require), to=BOOL.dtype)
    dx = op.CastLike(op.Reshape(dX, op.Shape(x), allowzero=1), dy)
    dgamma = op.CastLike(op.Where(dgamma_on, dgamma_c, zero), gamma)
    dbeta = op.CastLike(op.Where(dbeta_on, dbeta_c, zero), beta)
    return dx, dgamma, dbeta



def function_proto() -> onnx.FunctionProto:
    """The body, one flat function (GroupNormLayout inlined)."""
    return flat_function_proto(GroupNormSwishGrad, GroupNormLayout)


def _infer(node: NodeView) -> None:
    dy_dims, x_dims = node.input_dims(0), node.input_dims(3)
    node.check_rank(dy_dims, "dy", 2)
    dims = same_shape(node, dy_dims, x_dims, "dy and x")
    layout = CheckedLayout(node, dims)
    names = ("dy", "mean", "rstd", "x", "gamma", "beta")
    types = [node.check_float_type(i, name) for i, name in enumerate(names)]
    for group, members in (("T", (0, 3)), ("U", (1, 2, 4, 5))):
        known = {types[i] for i in members if types[i]}
        if len(known) > 1:
            listed = ", ".join(f"{names[i]} {dtype_name(types[i])}" for i in members)
            raise node.fail(f"{'/'.join(names[i] for i in members)} must share one dtype ({group}): {listed}")
    t_type = types[0] or types[3]
    u_type = next((types[i] for i in (4, 5, 1, 2) if types[i]), 0)
    layout.check_stat(node, node.input_dims(1), "mean")
    layout.check_stat(node, node.input_dims(2), "rstd")
    layout.check_param(node, node.input_dims(4), "gamma")
    layout.check_param(node, node.input_dims(5), "beta")
    node.attr_flag("dgamma_is_require")
    node.attr_flag("dbeta_is_require")

    C = layout.C
    if C is None:  # the parameters may know C when x does not
        C = next((d[0] for d in (node.input_dims(4), node.input_dims(5)) if d), None)
    node.set_output(0, t_type, dims)
    node.set_output(1, u_type, [C])
    node.set_output(2, u_type, [C])


SCHEMA = make_schema(
    OP_TYPE,
    __doc__,
    inputs=[
        tensor_param("dy", "T", "gradient of y, (N, C, *spatial) or (N, *spatial, C)"),
        tensor_param("mean", "U", "per-(n, group) mean from the forward, N * num_groups elements"),
        tensor_param("rstd", "U", "per-(n, group) 1/sqrt(var + eps) from the forward, N * num_groups elements"),
        tensor_param("x", "T", "input of the forward GroupNorm, same shape as dy"),
        tensor_param("gamma", "U", "scale, (C,)"),
        tensor_param("beta", "U", "shift, (C,)"),
    ],
    outputs=[
        tensor_param("dx", "T", "gradient of x"),
        tensor_param("dgamma", "U", "gradient of gamma, (C,)", optional=True),
        tensor_param("dbeta", "U", "gradient of beta, (C,)", optional=True),
    ],
    type_params=["T", "U"],
    attributes=[
        attribute("num_groups", "INT", "number of groups G; must divide C"),
        attribute("swish_scale", "FLOAT", "the b of swish z * sigmoid(b * z)", 1.0),
        attribute("dgamma_is_require", "INT", "1 computes dgamma, 0 fills it with zeros", 1),
        attribute("dbeta_is_require", "INT", "1 computes dbeta, 0 fills it with zeros", 1),
        attribute("data_format", "STRING", "'NCHW' (N, C, *spatial) or 'NHWC' (N, *spatial, C)", "NCHW"),
    ],
    infer=_infer,
)
