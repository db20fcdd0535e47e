"""fuse_backward_ops: the rule sets in order (GroupNorm first: its swish part would otherwise be
taken by the SiLU rule), then dead-node removal, a topological sort and the function bodies."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

import onnx
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass, RemoveUnusedOpsetsPass, TopologicalSortPass

from ascend_grad import DOMAIN
from ascend_grad.graph_passes import group_norm_swish_grad, mish_backward, silu_backward
from ascend_grad.graph_passes._rule import start_notes

RULE_SETS = (group_norm_swish_grad.RULES, mish_backward.RULES, silu_backward.RULES)
OPS = (group_norm_swish_grad.OP_TYPE, mish_backward.OP_TYPE, silu_backward.OP_TYPE)


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
        return ir.load(os.fspath(model)), "proto"
    raise TypeError(f"fuse_backward_ops takes an onnx.ModelProto, an onnx_ir.Model or a path, not {type(model).__name__}")


def fuse_backward_ops(model):
    """Fuse every provable decomposed backward of the op set; returns (model, FusionReport).

    The model comes back as it came (an onnx_ir.Model stays one; a ModelProto or a path gives a
    ModelProto). Graph outputs keep their names; running the pass again changes nothing.
    """
    ir_model, kind = _load(model)
    report = FusionReport(nodes_before=_count_nodes(ir_model.graph))
    notes = start_notes()
    for rules in RULE_SETS:
        rules.apply_to_model(ir_model)
    RemoveUnusedNodesPass()(ir_model)
    RemoveUnusedOpsetsPass()(ir_model)
    TopologicalSortPass()(ir_model)
    found = Counter(n.op_type for n in ir_model.graph.all_nodes() if n.domain == DOMAIN)
    report.counts = {op: found.get(op, 0) for op in OPS}
    report.fused, report.refused = notes.fused, notes.refused
    report.nodes_after = _count_nodes(ir_model.graph)
    proto = ir.serde.serialize_model(ir_model)
    from ascend_grad.ops import attach_functions

    attach_functions(proto)
    if kind == "ir":
        return ir.serde.deserialize_model(proto), report
    return proto, report
