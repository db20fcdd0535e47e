"""GroupNormSwishGrad: the GroupNorm backward fed by a swish backward -> one ascend.grad node.

The whole torch-decomposed backward (50 to 135 nodes: the swish gradient g = dy * swish'(z), then
the per-channel and per-group sums and dx, dgamma, dbeta) becomes
GroupNormSwishGrad(dy, mean, rstd, x, gamma, beta){num_groups, swish_scale}, with mean and rstd
taken from where the forward computes them and swish_scale read from the graph (1 for SiLU, b for
z * sigmoid(b z)). The proof is in _group_norm_proof; anything it refuses stays as it is.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import MatchResult

from ascend_grad.graph_passes._algebra import Algebra, TooBig
from ascend_grad.graph_passes._graph import is_live, producer, strip
from ascend_grad.graph_passes._group_norm_forward import as_channels
from ascend_grad.graph_passes._group_norm_proof import Refuse, prove, prove_layer_norm_grad
from ascend_grad.graph_passes._rule import FusionRule, cast_to, dtype_refusal, node_for, replace_value
from ascend_grad.graph_passes._swish import SIGMOID_OPS, Activation, match_swish_backward

OP_TYPE = "GroupNormSwishGrad"


def _swish_roots(dx_sum: ir.Value) -> list[ir.Value]:
    """Candidate g: the tensors that dx's sum reads through a 4-D Reshape."""
    algebra = Algebra()
    try:
        algebra.poly(dx_sum)
    except TooBig:
        return []
    roots = []
    for kind, value in algebra.atoms:
        reshape = producer(value, "Reshape") if kind == "value" else None
        if reshape is not None and value.shape is not None and len(value.shape) == 4:
            roots.append(strip(reshape.inputs[0]))
    return roots


class GroupNormSwishGradRule(FusionRule):
    """Anchor: the Reshape that gives dx x's shape."""

    op_type = OP_TYPE

    def __init__(self):
        super().__init__(f"{OP_TYPE} from the GroupNorm backward")

    def pattern(self, op, dx_sum, shape):
        return op.Reshape(dx_sum, shape, _allow_other_attributes=True, _outputs=["root"])

    def check(self, context, dx_sum, shape, root: ir.Value, **_) -> MatchResult:
        if not is_live(root) or producer(strip(dx_sum), "Add") is None:
            return MatchResult().fail("not a GroupNorm dx")
        for g in _swish_roots(dx_sum):
            swish = match_swish_backward(g)
            if not isinstance(swish, Activation):
                continue
            try:
                proof = prove(g, swish)
            except Refuse as refusal:
                return self.refuse(swish.x, str(refusal))
            if proof.dx is not root:
                return self.refuse(swish.x, "the proven dx is another value")
            reason = dtype_refusal(dx=root, dy=proof.dy, x=proof.x, mean=proof.mean, rstd=proof.rstd, gamma=proof.gamma,
                                   beta=proof.beta)
            return self.refuse(swish.x, reason) if reason else self.accept(swish.x, root, proof)
        return MatchResult().fail("no swish gradient feeds this sum")

    def rewrite(self, op, dx_sum, shape, root: ir.Value, **_):
        p = self.proof(root)
        # compute in the dtypes the decomposed backward computes in (a float16 graph may upcast):
        # T from dx, U from dgamma/dbeta; the casts in are exact widenings or no-ops
        T = root.dtype or p.x.dtype
        U = next((v.dtype for v in (p.dgamma, p.dbeta) if v is not None and v.dtype is not None), p.gamma.dtype)
        inputs = [cast_to(op, p.dy, T), cast_to(op, p.mean, U), cast_to(op, p.rstd, U), cast_to(op, p.x, T),
                  as_channels(op, p.gamma, p.forward, U), as_channels(op, p.beta, p.forward, U)]
        dx, dgamma, dbeta = node_for(
            op, OP_TYPE, inputs, outputs=3, num_groups=p.num_groups, swish_scale=float(p.swish_scale),
            dgamma_is_require=int(p.dgamma is not None), dbeta_is_require=int(p.dbeta is not None),
        )
        # dgamma and dbeta are not this rule's anchor: hand their readers over here
        for old, new in ((p.dgamma, dgamma), (p.dbeta, dbeta)):
            if old is not None:
                replace_value(old, new)
        self.record(root, num_groups=p.num_groups, swish_scale=p.swish_scale, x=p.x.name)
        return dx


class LayerNormalizationGradRule(GroupNormSwishGradRule):
    """onnxruntime-training's spelling: anchor the Reshape of com.microsoft.LayerNormalizationGrad's
    dx back to x's shape (see _group_norm_proof.prove_layer_norm_grad)."""

    def __init__(self):
        FusionRule.__init__(self, f"{OP_TYPE} from LayerNormalizationGrad")

    def check(self, context, dx_sum, shape, root: ir.Value, **_) -> MatchResult:
        grad = strip(dx_sum).producer()
        if not is_live(root) or grad is None or grad.domain != "com.microsoft" or grad.op_type != "LayerNormalizationGrad":
            return MatchResult().fail("not a LayerNormalizationGrad dx")
        try:
            proof, swish = prove_layer_norm_grad(grad)
        except Refuse as refusal:
            return self.refuse(strip(grad.inputs[1]), str(refusal))
        if proof.dx is not root:
            return self.refuse(swish.x, "the proven dx is another value")
        reason = dtype_refusal(dx=root, dy=proof.dy, x=proof.x, mean=proof.mean, rstd=proof.rstd, gamma=proof.gamma,
                               beta=proof.beta)
        return self.refuse(swish.x, reason) if reason else self.accept(swish.x, root, proof)


def rules(present: set[str]) -> list:
    """The rules worth running on a graph holding the op types `present`."""
    found = [GroupNormSwishGradRule.rule()] if "InstanceNormalization" in present and present & SIGMOID_OPS else []
    return found + ([LayerNormalizationGradRule.rule()] if "LayerNormalizationGrad" in present else [])
