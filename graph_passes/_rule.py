"""What the fusion rules share: the base class, the refusal notes, casts and value replacement.

Each rule is an onnxscript RewriteRuleClassBase whose pattern is one anchor node (the node that
computes the gradient) and whose check proves the math of the subgraph behind it (see _algebra,
_swish, _group_norm_proof). The rewriter removes only the anchor, whose output is replaced; the
pass then drops what became dead, so an intermediate that something else still reads stays.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import MatchResult, pattern

from ascend_grad import DOMAIN
from ascend_grad.graph_passes._context import current
from ascend_grad.graph_passes._graph import is_live
from ascend_grad.ops._schema import FLOAT_TYPES  # the op set's dtypes


def dtype_refusal(**values: ir.Value | None) -> str | None:
    """Why values of these dtypes cannot go into an ascend.grad node, or None."""
    for name, value in values.items():
        if value is not None and value.dtype is not None and value.dtype not in FLOAT_TYPES:  # (float64, say)
            return f"{name} is {value.dtype.name}: the op set takes float, float16 and bfloat16 only"
    return None


class FusionRule(pattern.RewriteRuleClassBase):
    """A rule that proves its match in `prove` (returning the fused node's inputs or a reason)."""

    op_type = ""  # the ascend.grad op it produces

    def __init__(self, name: str):
        super().__init__(name, remove_nodes=True)  # removes the anchor only: the pattern is one node

    def refuse(self, activation: ir.Value, reason: str) -> MatchResult:
        """A recognised gradient of the activation with input `activation` cannot be fused."""
        current().refused[f"{self.op_type} at {activation.name}"] = reason
        return MatchResult().fail(reason)

    def accept(self, activation: ir.Value, root: ir.Value, proof) -> MatchResult:
        """The match at anchor `root` is proven: `proof` goes to rewrite (see `proof`)."""
        context = current()
        context.refused.pop(f"{self.op_type} at {activation.name}", None)
        context.proofs[root] = proof
        return MatchResult()

    def proof(self, root: ir.Value):
        """What check proved about the match at anchor `root` (rewrite follows check directly)."""
        return current().proofs.pop(root)

    def record(self, root: ir.Value, **details) -> None:
        """Note a fusion (called from rewrite: the graph is about to change, so the memo goes)."""
        context = current()
        context.graph_changed()
        context.fused.append({"op": self.op_type, "at": root.name, **details})


class ElementwiseGradientRule(FusionRule):
    """Anchor: the Mul, Add or Sub that computes an elementwise activation's gradient. `find`
    proves the math behind it (a found gradient with .dy and .x, or the reason it is not one);
    `refusal` adds the op's own conditions (None: fuse). The fused node reads dy and x cast to the
    gradient's own dtype, so nothing else in the graph changes (MishBackward promotes mixed dtypes)."""

    def __init__(self, anchor: str):
        super().__init__(f"{self.op_type} from {anchor}")
        self.anchor = anchor

    def find(self, root: ir.Value):
        raise NotImplementedError

    def refusal(self, found, root: ir.Value) -> str | None:
        return None

    def pattern(self, op, a, b):
        if self.anchor == "Sum":  # variadic: onnxruntime-training's sum of a tensor's gradients
            return op.Sum(a, b, _allow_other_inputs=True, _outputs=["root"])
        return getattr(op, self.anchor)(a, b, _outputs=["root"])

    def check(self, context, a, b, root: ir.Value, **_) -> MatchResult:
        if not is_live(root):
            return MatchResult().fail("dead")
        found = self.find(root)
        if isinstance(found, str):
            return MatchResult().fail(found)
        reason = dtype_refusal(dy=found.dy, x=found.x, gradient=root) or self.refusal(found, root)
        return self.refuse(found.x, reason) if reason else self.accept(found.x, root, found)

    def rewrite(self, op, a, b, root: ir.Value, **_):
        found = self.proof(root)
        self.record(root, dy=found.dy.name, x=found.x.name)
        return node_for(op, self.op_type, [cast_to(op, found.dy, root.dtype), cast_to(op, found.x, root.dtype)])


def cast_to(op, value: ir.Value, dtype: ir.DataType | None) -> ir.Value:
    """value in `dtype` (a Cast only when the types differ and both are known)."""
    if dtype is None or value.dtype is None or value.dtype == dtype:
        return value
    return op.Cast(value, to=dtype)


def node_for(op, op_type: str, inputs: list, outputs: int = 1, **attributes):
    """An ascend.grad node built by the rewriter's op builder."""
    return getattr(op, op_type)(*inputs, _domain=DOMAIN, _outputs=outputs, **attributes)


def replace_value(old: ir.Value, new: ir.Value) -> None:
    """Give `new` everything `old` had: its readers, its graph-output slot, type, shape and name
    (the old value, dead from now on, is renamed out of the way)."""
    new.type = old.type if old.type is not None else new.type
    new.shape = old.shape if old.shape is not None else new.shape
    name = old.name
    old.replace_all_uses_with(new, replace_graph_outputs=True)
    if name:
        old.name = f"{name}__unfused"
        new.name = name
