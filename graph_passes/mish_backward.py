"""MishBackward: the Mish gradient in any spelling -> one ascend.grad node.

    dx = dy * (t + x * s * (1 - t^2)),  t = tanh(softplus(x)),  s = sigmoid(x)

torch writes softplus with its threshold (x > 20 -> x), which tanh cannot tell apart in float;
any other threshold, or any other formula, stays.
"""

from __future__ import annotations

import onnx_ir as ir

from ascend_grad.graph_passes._rule import ElementwiseGradientRule
from ascend_grad.graph_passes._shapes import broadcast, same_dims, shape_of
from ascend_grad.graph_passes._swish import ANCHORS, match_mish_backward

OP_TYPE = "MishBackward"


class MishBackwardRule(ElementwiseGradientRule):
    op_type = OP_TYPE

    def find(self, root: ir.Value):
        return match_mish_backward(root)

    def refusal(self, found, root: ir.Value) -> str | None:
        if not same_dims(broadcast(shape_of(found.dy), shape_of(found.x)), shape_of(root)):
            return "the gradient's shape is not provably dy and x broadcast"
        return None


def rules(present: set[str]) -> list:
    """The rules worth running on a graph holding the op types `present`."""
    if "Tanh" not in present:
        return []
    return [MishBackwardRule.rule(anchor) for anchor in ANCHORS] + ([MishBackwardRule.rule("Sum")] if "Sum" in present else [])
