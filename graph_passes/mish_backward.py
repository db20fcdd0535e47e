"""MishBackward: the Mish gradient in any spelling -> one ascend.grad node.

    dx = dy * (t + x * s * (1 - t^2)),  t = tanh(softplus(x)),  s = sigmoid(x)

torch writes softplus with its threshold (x > 20 -> x), which tanh cannot tell apart in float;
any other threshold, or any other formula, stays.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter._basics import MatchResult

from ascend_grad.graph_passes._graph import dims, is_live
from ascend_grad.graph_passes._rule import FusionRule, cast_to, node_for
from ascend_grad.graph_passes._swish import ANCHORS, match_mish_backward

OP_TYPE = "MishBackward"


def _broadcast(a, b):
    rank = max(len(a), len(b))
    a, b = [1] * (rank - len(a)) + a, [1] * (rank - len(b)) + b
    return [y if x == 1 else x for x, y in zip(a, b)] if all(x == y or 1 in (x, y) for x, y in zip(a, b)) else None


class MishBackwardRule(FusionRule):
    op_type = OP_TYPE

    def __init__(self, anchor: str):
        super().__init__(f"{OP_TYPE} from {anchor}")
        self.anchor = anchor

    def pattern(self, op, a, b):
        return getattr(op, self.anchor)(a, b, _outputs=["root"])

    def check(self, context, a, b, root: ir.Value, **_) -> MatchResult:
        if not is_live(root):
            return MatchResult().fail("dead")
        found = match_mish_backward(root)
        if isinstance(found, str):
            return MatchResult().fail(found)
        dy, x, out = dims(found.dy), dims(found.x), dims(root)
        if None in (dy, x, out) or None in dy + x + out or _broadcast(dy, x) != out:
            return self.refuse(found.x, "the gradient's shape is not provably dy and x broadcast")
        return self.accept(found.x, found)

    def rewrite(self, op, a, b, root: ir.Value, **_):
        found = self._proof
        self.record(root, dy=found.dy.name, x=found.x.name)
        # MishBackward promotes mixed dtypes; cast to the gradient's own dtype so nothing else changes
        return node_for(op, OP_TYPE, [cast_to(op, found.dy, root.dtype), cast_to(op, found.x, root.dtype)])


def rules(present: set[str]) -> list:
    """The rules worth running on a graph holding the op types `present`."""
    return [MishBackwardRule.rule(anchor) for anchor in ANCHORS] if "Tanh" in present else []
