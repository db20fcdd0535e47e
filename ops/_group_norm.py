"""The checks GroupNormSwish and GroupNormSwishGrad share: layout, C vs num_groups, parameter shapes.

x is (N, C, *spatial) for data_format "NCHW" and (N, *spatial, C) for "NHWC", rank 2..8;
HxW is the product of the spatial dims (1 for rank 2).
"""

from __future__ import annotations

from ascend_grad.ops._schema import Dim, NodeView, shape_str

DATA_FORMATS = ("NCHW", "NHWC")


class GroupLayout:
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
