"""GroupNormSwish: the forward GroupNorm followed by a swish y = z * sigmoid(b z) (SiLU: b = 1), or
a GroupNorm alone (activate_swish = 0) -> one ascend.grad node (y, mean, rstd).

The GroupNorm is recognised in every exporter spelling (_group_norm_forward), the swish as
z * sigmoid(b z) with the sigmoid as the op or written out. A fusion happens only when nothing
else reads what the fused node does not output (an intermediate of the GroupNorm, or z under a
swish): the decomposed nodes would stay, and the fused node would compute the same again. In a
training graph the backward, fused first, reads mean and rstd from a statistics chain beside the
forward; proven to be this GroupNorm's statistics, they are taken from the fused node instead and
the chain goes. These rules run last: until the backward is fused, it reads z.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir
from onnxscript.rewriter import MatchResult

from ascend_grad import DOMAIN
from ascend_grad.graph_passes._algebra import sigmoid_argument
from ascend_grad.graph_passes._graph import constant_array, is_live, producer, scalar, strip, users_through_casts
from ascend_grad.graph_passes._group_norm_forward import (
    GroupNormForward, NotFound, Refuse, as_channels, check_statistics, recognise,
)
from ascend_grad.graph_passes._rule import FusionRule, cast_to, dtype_refusal, node_for
from ascend_grad.graph_passes._swish import linear_in, quick_gelu

OP_TYPE = "GroupNormSwish"

# the inputs of these ops that carry no data (shapes, axes): the fused node does not replace them
_DATA_INPUTS = {"Reshape": 1, "Unsqueeze": 1, "Squeeze": 1, "Expand": 1, "ReduceMean": 1, "ReduceSum": 1,
                "InstanceNormalization": 1, "LayerNormalization": 1, "GroupNormalization": 1}
_PASS_THROUGH = ("Cast", "CastLike", "Identity", "Squeeze", "Unsqueeze", "Reshape")


@dataclass
class _Fusion:
    forward: GroupNormForward
    scale: float
    relinks: list[tuple[ir.Node, int, int]]  # (GroupNormSwishGrad, input index, 1 mean / 2 rstd)


def _swish_input(y: ir.Value) -> tuple[ir.Value, float] | None:
    """(z, b) if y = z * sigmoid(b z) (or com.microsoft.QuickGelu(z){alpha = b})."""
    if (found := quick_gelu(y)) is not None:
        return found
    node = producer(y, "Mul")
    if node is None:
        return None
    for z, s in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
        argument = sigmoid_argument(s)
        if argument is not None:
            base, b = linear_in(argument)
            if base is strip(z):
                return strip(z), b
    return None


def _subgraph(root: ir.Value, stops: set[ir.Value]) -> set[ir.Node]:
    """The nodes computing `root` from the values `stops` (through data inputs only; constants
    and shape computations are left to dead-node removal)."""
    found: set[ir.Node] = set()
    frontier = [root]
    while frontier:
        value = frontier.pop()
        node = value.producer()
        if value in stops or strip(value) in stops or node is None or node in found or node.op_type in ("Constant", "ConstantOfShape"):
            continue  # (a Cast of x is x's, whoever else reads it)
        if constant_array(value) is not None or scalar(value) is not None:
            continue
        found.add(node)
        frontier.extend(v for v in node.inputs[:_DATA_INPUTS.get(node.op_type, len(node.inputs))] if v is not None)
    return found


def _only_feeds(value: ir.Value, slots: set[tuple[ir.Node, int]]) -> bool:
    """Every path from `value` ends in one of the input slots (node, index), through casts and views."""
    if value.is_graph_output():
        return False
    for use in value.uses():
        if (use.node, use.idx) in slots:
            continue
        if use.node.op_type not in _PASS_THROUGH or use.idx != 0 or not all(_only_feeds(v, slots) for v in use.node.outputs):
            return False
    return True


class GroupNormSwishRule(FusionRule):
    """Anchor: the swish's Mul (activate) or the GroupNorm's last node (not activate)."""

    op_type = OP_TYPE

    def __init__(self, anchor: str, activate: bool):
        super().__init__(f"{OP_TYPE} from {'a swish' if activate else 'a GroupNorm'} ({anchor})")
        self.anchor, self.activate = anchor, activate

    def pattern(self, op, a, b, c):
        if self.anchor == "GroupNormalization":
            return op.GroupNormalization(a, b, c, _allow_other_attributes=True, _outputs=["root"])
        if self.anchor == "QuickGelu":
            return op.QuickGelu(a, _domain="com.microsoft", _allow_other_attributes=True, _outputs=["root"])
        return getattr(op, self.anchor)(a, b, _outputs=["root"])

    def check(self, context, root: ir.Value, **_) -> MatchResult:
        if not is_live(root):
            return MatchResult().fail("dead")
        z, scale = (_swish_input(root) or (None, 1.0)) if self.activate else (root, 1.0)
        if z is None:
            return MatchResult().fail("not a swish")
        try:
            forward = recognise(z)
        except NotFound as nothing:
            return MatchResult().fail(str(nothing))
        except Refuse as refusal:
            return self.refuse(z, str(refusal))
        reason = dtype_refusal(x=forward.x, gamma=forward.gamma, beta=forward.beta, y=root)
        if forward.per_group and not isinstance((forward.x.shape or [None, None])[1], int):
            reason = reason or "a per-group scale needs a static C"
        relinks = _statistics_readers(forward)
        slots = {(node, index) for node, index, _ in relinks}
        nodes = _subgraph(root, {forward.x, forward.gamma, forward.beta})
        for node in nodes - {root.producer()}:
            for value in node.outputs:
                outside = [u for u in value.uses() if u.node not in nodes]
                if value.is_graph_output() or (outside and not _only_feeds(value, slots)):
                    reason = reason or f"{value.name} ({node.op_type}) is read beyond the GroupNorm, and the fused node does not output it"
        return self.refuse(z, reason) if reason else self.accept(z, root, _Fusion(forward, scale, relinks))

    def rewrite(self, op, root: ir.Value, **_):
        fusion = self.proof(root)
        forward = fusion.forward
        T = root.dtype or forward.x.dtype  # the dtype the decomposed GroupNorm computes in
        inputs = [cast_to(op, forward.x, T), as_channels(op, forward.gamma, forward, T), as_channels(op, forward.beta, forward, T)]
        y, mean, rstd = node_for(op, OP_TYPE, inputs, outputs=3, num_groups=forward.num_groups, eps=float(forward.eps),
                                 swish_scale=float(fusion.scale), activate_swish=int(self.activate))
        for node, index, which in fusion.relinks:  # the backward reads the fused statistics
            statistic, wanted = (mean, rstd)[which - 1], _dtype(node.inputs[index])
            statistic.dtype = T  # (the op's mean and rstd have gamma's dtype, here T)
            node.replace_input_with(index, cast_to(op, statistic, wanted))
        self.record(root, num_groups=forward.num_groups, eps=forward.eps, swish_scale=fusion.scale,
                    activate_swish=int(self.activate), x=forward.x.name, spelling=forward.spelling,
                    statistics_taken_by=len(fusion.relinks) // 2)
        return y


def _dtype(value: ir.Value) -> ir.DataType | None:
    """value's dtype, also where it is not recorded yet (a Cast an earlier rewrite made)."""
    node = value.producer()
    if value.dtype is None and node is not None and node.op_type == "Cast":
        return ir.DataType(node.attributes.get_int("to", 0))
    return value.dtype


def _statistics_readers(forward: GroupNormForward) -> list[tuple[ir.Node, int, int]]:
    """The mean and rstd inputs of fused backwards of this GroupNorm that are its statistics."""
    found = []
    for node in users_through_casts(forward.x):
        if node.domain != DOMAIN or node.op_type != "GroupNormSwishGrad" or strip(node.inputs[3]) is not forward.x:
            continue
        if node.attributes.get_int("num_groups", 0) != forward.num_groups:
            continue
        try:
            check_statistics(node.inputs[1], node.inputs[2], forward)
        except Refuse:
            continue
        found += [(node, 1, 1), (node, 2, 2)]
    return found


def rules(present: set[str]) -> list:
    """The rules worth running on a graph holding the op types `present`: the swish first (else
    the GroupNorm alone would take z from under it; see _fuse), then the GroupNorm alone."""
    norms = present & {"InstanceNormalization", "LayerNormalization", "ReduceMean", "GroupNormalization"}
    found = [GroupNormSwishRule.rule("Mul", True)] if norms and present & {"Sigmoid", "Exp"} else []
    return found + ([GroupNormSwishRule.rule("QuickGelu", True)] if norms and "QuickGelu" in present else [])


def plain_rules(present: set[str]) -> list:
    """The GroupNorm with no swish after it (activate_swish = 0), after `rules` ran."""
    if not present & {"InstanceNormalization", "LayerNormalization", "ReduceMean", "GroupNormalization"}:
        return []
    return [GroupNormSwishRule.rule("Add", False)] + (
        [GroupNormSwishRule.rule("GroupNormalization", False)] if "GroupNormalization" in present else [])

