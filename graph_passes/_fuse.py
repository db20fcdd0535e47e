"""FusionPass (onnx_ir pass) and fuse_backward_ops: the rule sets in order (GroupNorm first: its
swish part would otherwise be taken by the SiLU rule), then dead-node removal, a topological sort;
fuse_backward_ops adds the function bodies."""

from __future__ import annotations

import gc
import os
from collections import Counter
from dataclasses import dataclass, field

import onnx
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass, RemoveUnusedOpsetsPass, ShapeInferencePass, TopologicalSortPass
from onnxscript.rewriter import RewriteRuleSet

from ascend_grad import DOMAIN
from ascend_grad.graph_passes import _context, group_norm_swish, group_norm_swish_grad, mish_backward, silu_backward
from ascend_grad.graph_passes._graph import remove_dead_nodes
from ascend_grad.ops import attach_functions

# in this order: the GroupNorm backward first, or the SiLU rules would take its swish part; the
# forward last, once no backward reads z any more; the swish after a GroupNorm before the GroupNorm
# alone, which would take z from under it
RULE_SETS = (group_norm_swish_grad.rules, mish_backward.rules, silu_backward.rules, group_norm_swish.rules,
             group_norm_swish.plain_rules)
OPS = tuple(m.OP_TYPE for m in (group_norm_swish_grad, mish_backward, silu_backward, group_norm_swish))


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
    """The model as onnx_ir, with every intermediate's shape: the proofs need them (a gradient must
    not broadcast). Exporters usually record them; if not, onnx infers them (ops it does not know
    stay unshaped, and a graph whose inference fails is taken as it is)."""
    if isinstance(model, onnx.ModelProto):
        if _shaped(model.graph):
            return ir.serde.deserialize_model(model), "proto"
        try:  # on the proto: onnx's C++ inference, no round trip through onnx_ir
            inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
            return ir.serde.deserialize_model(inferred), "proto"
        except (onnx.shape_inference.InferenceError, ValueError):  # over 2 GB in memory, say
            return _ir_with_shapes(ir.serde.deserialize_model(model)), "proto"
    if isinstance(model, ir.Model):
        return _ir_with_shapes(model), "ir"
    if isinstance(model, (str, os.PathLike)):  # external weights stay on disk (lazy tensors)
        return _ir_with_shapes(ir.load(os.fspath(model))), "proto"
    raise TypeError(f"fuse_backward_ops takes an onnx.ModelProto, an onnx_ir.Model or a path, not {type(model).__name__}")


def _shaped(graph: onnx.GraphProto) -> bool:
    known = {v.name for v in (*graph.input, *graph.output, *graph.value_info)}
    return all(o in known for n in graph.node for o in n.output if o)


def _ir_with_shapes(model: ir.Model) -> ir.Model:
    if any(v.shape is None and v.name for n in model.graph for v in n.outputs):
        ShapeInferencePass(check_type=False, strict_mode=False, data_prop=True)(model)
    return model


@dataclass
class FusionResult(ir.passes.PassResult):
    report: FusionReport = field(default_factory=FusionReport)


class FusionPass(ir.passes.InPlacePass):
    """The fusion as an onnx_ir pass (chains in a PassManager with others): the rule sets in
    order, dead-node removal, unused opsets, a topological sort. Each call keeps its notes in a
    context of its own; the call's report is on the result (`.report`) and on the pass
    (`.report`, the last call's). Function bodies are not attached here (fuse_backward_ops does)."""

    report: FusionReport | None = None

    def call(self, model: ir.Model) -> FusionResult:
        with _context.running() as context:
            report = FusionReport(nodes_before=_count_nodes(model.graph))
            held = Counter(n.op_type for n in model.graph.all_nodes() if n.domain == DOMAIN)  # from an earlier pass
            present = {n.op_type for n in model.graph.all_nodes()}
            present |= {n.op_type for f in model.functions.values() for n in f}
            ran = False
            for rule_set in RULE_SETS:
                rules = rule_set(present)  # only the rules whose ops the graph holds
                if rules:
                    RewriteRuleSet(rules).apply_to_model(model)
                    remove_dead_nodes(model.graph)  # the replaced subgraph: the next rules must not see it
                    ran = True
            if ran:  # what is left: unused initializers, dead nodes in functions and subgraphs
                RemoveUnusedNodesPass()(model)
            RemoveUnusedOpsetsPass()(model)
            TopologicalSortPass()(model)
            found = Counter(n.op_type for n in model.graph.all_nodes() if n.domain == DOMAIN)
            report.counts = {op: found.get(op, 0) - held.get(op, 0) for op in OPS}
            report.fused, report.refused = context.fused, context.refused
            report.nodes_after = _count_nodes(model.graph)
        self.report = report
        return FusionResult(model, modified=bool(report.fused), report=report)


def fuse_backward_ops(model):
    """Fuse every provable decomposed backward of the op set; returns (model, FusionReport).

    The model comes back as it came: an onnx_ir.Model stays one (edited in place; pass one loaded
    with `onnx_ir.load` to keep external weights on disk), a ModelProto or a path gives a
    ModelProto. Graph outputs keep their names; running the pass again changes nothing.
    """
    enabled = gc.isenabled()
    gc.disable()  # the pass makes many short-lived objects and no garbage worth collecting midway
    try:
        ir_model, kind = _load(model)
        result = FusionPass()(ir_model)
        attach_functions(ir_model)
        return (ir_model if kind == "ir" else ir.serde.serialize_model(ir_model)), result.report
    finally:
        if enabled:
            gc.enable()
