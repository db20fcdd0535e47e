"""MishBackward: the Mish gradient in any spelling -> one ascend.grad node.

    dx = dy * (t + x * s * (1 - t^2)),  t = tanh(softplus(x)),  s = sigmoid(x)

torch writes softplus with its threshold (x > 20 -> x), which tanh cannot tell apart in float;
any other threshold, or any other formula, stays.
"""

from __future__ import annotations

import onnx_ir as ir

from ascend_grad.graph_passes._graph import dims
from ascend_grad.graph_passes._rule import ElementwiseGradientRule
from ascend_grad.graph_passes._swish import ANCHORS, match_mish_backward

OP_TYPE = "MishBackward"


def _broadcast(a, b):
    rank = max(len(a), len(b))
    a, b = [1] * (rank - len(a)) + a, [1] * (rank - len(b)) + b
    return [y if x == 1 else x for x, y in zip(a, b)] if all(x == y or 1 in (x, y) for x, y in zip(a, b)) else None


class MishBackwardRule(ElementwiseGradientRule):
    op_type = OP_TYPE

    def find(self, root: ir.Value):
        return match_mish_backward(root)

    def refusal(self, found, root: ir.Value) -> str | None:
        dy, x, out = dims(found.dy), dims(found.x), dims(root)
        if None in (dy, x, out) or None in dy + x + out or _broadcast(dy, x) != out:
            return "the gradient's shape is not provably dy and x broadcast"
        return None


def rules(present: set[str]) -> list:
    """The rules worth running on a graph holding the op types `present`."""
    if "Tanh" not in present:
        return []
    return [MishBackwardRule.rule(anchor) for anchor in ANCHORS] + ([MishBackwardRule.rule("Sum")] if "Sum" in present else [])
