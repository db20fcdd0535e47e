"""fuse_backward_ops: the rule sets in order (GroupNorm first: its swish part would otherwise be
taken by the SiLU rule), then dead-node removal, a topological sort and the function bodies."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

import onnx
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass, RemoveUnusedOpsetsPass, ShapeInferencePass, TopologicalSortPass
from onnxscript.rewriter._rewrite_rule import RewriteRuleSet

from ascend_grad import DOMAIN
from ascend_grad.graph_passes import group_norm_swish_grad, mish_backward, silu_backward
from ascend_grad.graph_passes._rule import start_notes
from ascend_grad.ops import attach_functions

# in this order: GroupNorm first, or the SiLU rules would take its swish part
MODULES = (group_norm_swish_grad, mish_backward, silu_backward)
OPS = tuple(m.OP_TYPE for m in MODULES)


@dataclass
class FusionReport:
    """What the pass did: fused ops by type, nodes before and after, and (always) why candidates
    that looked like a gradient were left alone."""

    counts: dict[str, int] = field(default_factory=dict)
    nodes_before: int = 0
    nodes_after: int = 0
    fused: list[dict] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "counts": self.counts,
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "fused": self.fused,
            "refused": self.refused,
        }


def _count_nodes(graph: ir.Graph) -> int:
    return sum(1 for _ in graph.all_nodes())


def _load(model) -> tuple[ir.Model, str]:
    if isinstance(model, ir.Model):
        return model, "ir"
    if isinstance(model, onnx.ModelProto):
        return ir.serde.deserialize_model(model), "proto"
    if isinstance(model, (str, os.PathLike)):
        return ir.load(os.fspath(model)), "proto"  # external weights stay on disk (lazy tensors)
    raise TypeError(f"fuse_backward_ops takes an onnx.ModelProto, an onnx_ir.Model or a path, not {type(model).__name__}")


def _ensure_shapes(graph_model: ir.Model) -> None:
    """The proofs need every intermediate's shape (a gradient must not broadcast): infer them when
    the graph does not carry them (exporters usually do). Ops onnx does not know stay unshaped."""
    if any(v.shape is None for n in graph_model.graph for v in n.outputs):
        ShapeInferencePass(check_type=False, strict_mode=False, data_prop=True)(graph_model)


def fuse_backward_ops(model):
    """Fuse every provable decomposed backward of the op set; returns (model, FusionReport).

    The model comes back as it came: an onnx_ir.Model stays one (edited in place; pass one loaded
    with `onnx_ir.load` to keep external weights on disk), a ModelProto or a path gives a
    ModelProto. Graph outputs keep their names; running the pass again changes nothing.
    """
    ir_model, kind = _load(model)
    report = FusionReport(nodes_before=_count_nodes(ir_model.graph))
    _ensure_shapes(ir_model)
    notes = start_notes()
    present = {n.op_type for n in ir_model.graph.all_nodes()}
    present |= {n.op_type for f in ir_model.functions.values() for n in f}
    for module in MODULES:
        rules = module.rules(present)  # only the rules whose ops the graph holds
        if rules:
            RewriteRuleSet(rules).apply_to_model(ir_model)
            RemoveUnusedNodesPass()(ir_model)  # the replaced subgraph: the next rules must not see it
    RemoveUnusedOpsetsPass()(ir_model)
    TopologicalSortPass()(ir_model)
    found = Counter(n.op_type for n in ir_model.graph.all_nodes() if n.domain == DOMAIN)
    report.counts = {op: found.get(op, 0) for op in OPS}
    report.fused, report.refused = notes.fused, notes.refused
    report.nodes_after = _count_nodes(ir_model.graph)
    attach_functions(ir_model)
    return (ir_model if kind == "ir" else ir.serde.serialize_model(ir_model)), report
