"""SiluBackward: the SiLU gradient in any spelling -> one ascend.grad node.

    dx = dy * s * (1 + x * (1 - s)),  s = sigmoid(x)

Found as (see _swish): torch's silu_backward decomposition; the product rule of a hand-written
x * sigmoid(x); com.microsoft.QuickGeluGrad(dy, x) with alpha = 1 (onnxruntime-training's SiLU
gradient). A swish with another scale (x * sigmoid(b x), b != 1) has no SiluBackward form and stays.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import MatchResult

from ascend_grad.graph_passes._rule import ElementwiseGradientRule, FusionRule, dtype_refusal, node_for
from ascend_grad.graph_passes._shapes import same_dims, shape_of
from ascend_grad.graph_passes._swish import ANCHORS, SIGMOID_OPS, match_swish_backward

OP_TYPE = "SiluBackward"


class SwishBackwardAsSilu(ElementwiseGradientRule):
    """Anchor: the Mul, Add or Sub that computes the gradient; check: the polynomial proof."""

    op_type = OP_TYPE

    def find(self, root: ir.Value):
        return match_swish_backward(root)

    def refusal(self, found, root: ir.Value) -> str | None:
        if found.scale != 1.0:
            return f"a swish with scale {found.scale:g} has no SiluBackward form (aclnn's SiLU has none)"
        x = shape_of(found.x)
        if not (same_dims(shape_of(found.dy), x) and same_dims(shape_of(root), x)):
            return "dy, x and the gradient do not provably share one shape"
        return None


class QuickGeluGradAsSilu(FusionRule):
    """com.microsoft.QuickGeluGrad(dy, x){alpha = 1}: the gradient of x * sigmoid(x)."""

    op_type = OP_TYPE

    def __init__(self):
        super().__init__(f"{OP_TYPE} from QuickGeluGrad")

    def pattern(self, op, dy, x):
        return op.QuickGeluGrad(dy, x, _domain="com.microsoft", _allow_other_attributes=True, _outputs=["root"])

    def check(self, context, dy, x, root: ir.Value, **_) -> MatchResult:
        alpha = root.producer().attributes.get_float("alpha", 1.702)  # the op's default is GELU's 1.702
        if alpha != 1.0:
            return self.refuse(x, f"QuickGeluGrad alpha is {alpha:g}, not 1 (not SiLU)")
        reason = dtype_refusal(dy=dy, x=x, gradient=root)
        return self.refuse(x, reason) if reason else self.accept(x, root, (dy, x))

    def rewrite(self, op, dy, x, root: ir.Value, **_):
        self.proof(root)  # (nothing more to carry than the inputs)
        self.record(root, dy=dy.name, x=x.name)
        return node_for(op, OP_TYPE, [dy, x])


def rules(present: set[str]) -> list:
    """The rules worth running on a graph holding the op types `present`."""
    found = [SwishBackwardAsSilu.rule(anchor) for anchor in ANCHORS] if present & SIGMOID_OPS else []
    return found + ([QuickGeluGradAsSilu.rule()] if "QuickGeluGrad" in present else [])
