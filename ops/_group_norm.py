"""What GroupNormSwish and GroupNormSwishGrad share: the grouped view of x (an onnxscript function
both bodies call) and the schema checks of layout, C vs num_groups and parameter shapes.

x is (N, C, *spatial) for data_format "NCHW" and (N, *spatial, C) for "NHWC", rank 2..8;
HxW is the product of the spatial dims (1 for rank 2).
"""

from __future__ import annotations

from onnxscript import FLOAT, script
from onnxscript import opset18 as op

from ascend_grad.ops._schema import Dim, NodeView, shape_str
from ascend_grad.ops._script import ascend

DATA_FORMATS = ("NCHW", "NHWC")


@script(ascend, default_opset=op)
def GroupNormLayout(x, num_groups: int, data_format: str = "NCHW"):
    """The shapes and axes of a 4-D view of x in which each (n, group) is one slab:
    NCHW: (N, G, C/G, HxW), NHWC: (N, HxW, G, C/G). Not an op of the set: a helper function that
    the two GroupNorm bodies call (attach_functions attaches it with them)."""
    # data_format == "NHWC" without string Equal (opset 19+): the two strings are one unique value.
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
    # gamma and beta broadcast over the view; mean and rstd likewise
    param_view = op.Where(nhwc, op.Concat(one, one, G, Cg, axis=0), op.Concat(one, G, Cg, one, axis=0))
    stat_view = op.Where(nhwc, op.Concat(N, one, G, one, axis=0), op.Concat(N, G, one, one, axis=0))
    stat_shape = op.Concat(N, G, axis=0)
    spatial_axis = op.Where(nhwc, op.Constant(value_ints=[1]), op.Constant(value_ints=[3]))
    channel_axis = op.Where(nhwc, op.Constant(value_ints=[3]), op.Constant(value_ints=[2]))
    M = op.Cast(Cg * HxW, to=FLOAT.dtype)  # elements per (n, group)
    return view, param_view, stat_view, stat_shape, spatial_axis, channel_axis, C, M


class CheckedLayout:
    """num_groups, data_format and the dims N and C of one node's x, checked."""

    def __init__(self, node: NodeView, x_dims: list[Dim] | None, x_name: str = "x"):
        self.num_groups = node.attr("num_groups")
        if self.num_groups is None:
            raise node.fail("attribute num_groups is required")
        if self.num_groups <= 0:
            raise node.fail(f"num_groups must be > 0, got {self.num_groups}")
        self.data_format = node.attr_str("data_format", "NCHW")
        if self.data_format not in DATA_FORMATS:
            raise node.fail(f"data_format must be 'NCHW' or 'NHWC', got {self.data_format!r}")
        node.check_rank(x_dims, x_name, 2)
        self.dims = x_dims
        self.N: Dim = None if x_dims is None else x_dims[0]
        self.C: Dim = None
        if x_dims is not None:
            self.C = x_dims[1] if self.data_format == "NCHW" else x_dims[-1]
        if isinstance(self.C, int) and self.C % self.num_groups:
            raise node.fail(f"C ({self.C}) must be divisible by num_groups ({self.num_groups})")

    def check_param(self, node: NodeView, dims: list[Dim] | None, what: str) -> None:
        """gamma and beta: 1-D with C elements."""
        if dims is None:
            return
        if len(dims) != 1:
            raise node.fail(f"{what} must be 1-D with C elements, got shape {shape_str(dims)}")
        if isinstance(dims[0], int) and isinstance(self.C, int) and dims[0] != self.C:
            raise node.fail(f"{what} has {dims[0]} elements, C is {self.C}")

    def check_stat(self, node: NodeView, dims: list[Dim] | None, what: str) -> None:
        """mean and rstd: N * num_groups elements, whatever their shape."""
        if dims is None or not all(isinstance(d, int) for d in dims) or not isinstance(self.N, int):
            return
        count = 1
        for d in dims:
            count *= d
        if count != self.N * self.num_groups:
            raise node.fail(
                f"{what} {shape_str(dims)} has {count} elements, "
                f"N * num_groups is {self.N} * {self.num_groups} = {self.N * self.num_groups}"
            )
