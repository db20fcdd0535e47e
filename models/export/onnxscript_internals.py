"""The one module of ours that reaches into onnxscript's private modules: the optimizer that
export_training_graph runs on torch.onnx's translation.

Why private: onnxscript's public `optimize_ir` is what torch.onnx runs, with two defects for a
training graph of a few thousand nodes (see `optimize`). Running its steps ourselves needs its list
of default rewrite rules (`onnxscript.rewriter._DEFAULT_REWRITE_RULES`: no public name holds it),
and prefiltering a rule by its pattern's output node reads the rule's and the pattern's internals
(`_target_pattern`, `_matcher`, `_pattern_ir.NodePattern`). Everything else is public (the rewriter's
classes, `fold_constants_ir`, onnx_ir's passes).

pyproject.toml bounds onnxscript to the release the tests ran on; tests/test_private_api.py resolves
every name of PRIVATE_NAMES and checks that the prefilter still applies, so an upgrade shows where it
breaks.
"""

from __future__ import annotations

import copy

import onnx_ir as ir
from onnx_ir.passes import common
from onnxscript import optimizer, rewriter
from onnxscript.rewriter import pattern as patterns

# every private name used here, as "module:attribute.attribute" (tests/test_private_api.py); the
# rules' and patterns' private attributes are checked by the prefilter test
PRIVATE_NAMES = (
    "onnxscript.rewriter:_DEFAULT_REWRITE_RULES",
    "onnxscript.rewriter._pattern_ir:NodePattern.matches",
)


class _FoldConstants(ir.passes.InPlacePass):
    """onnxscript's constant folding (its defaults, with onnx shape inference) as a pass."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        result = optimizer.fold_constants_ir(model, onnx_shape_inference=True)
        return ir.passes.PassResult(model, result.modified)


def optimize(model: ir.Model, state: set[str]) -> None:
    """onnxscript's optimize_ir (constant folding, its rewrite rules, dead code, common
    subexpressions) on `model` in place, changed for training graphs:

    - every parameter and buffer (the initializers named in `state`) stays an initializer of its
      own: meanwhile they are plain graph inputs, so nothing folds them into constants (a Linear's
      transposed weight would replace the weight, a BatchNorm's step counter its update);
    - rules whose pattern has several output nodes are left out: their matcher tries every pair of
      candidate nodes (SlicesSplit took 18.6 s of a small UNet's 3,300-node graph, per iteration);
    - each rule is tried only on the nodes of its pattern's last op (_by_op_type): the rewriter
      tries every rule on every node, and each failed match builds a match state and a message
      (45 rules: 779,220 tries on the dynamic-batch UNet; about 7 s of its export).
    """
    graph = model.graph
    inputs = list(graph.inputs)
    held = {graph.initializers.pop(name): None for name in list(graph.initializers) if name in state}
    for value in held:
        held[value], value.const_value = value.const_value, None  # the folder reads const_value, wherever it is
    graph.inputs.extend(held)

    rules = [_by_op_type(rule) for rule in rewriter._DEFAULT_REWRITE_RULES if rule._target_pattern.has_single_output_node]
    ir.passes.Sequential(
        common.InlinePass(),
        ir.passes.PassManager([_FoldConstants(), rewriter.RewritePass(rules), common.RemoveUnusedNodesPass(),
                               common.RemoveUnusedFunctionsPass(), common.RemoveUnusedOpsetsPass()],
                              steps=2, early_stop=True),
        common.RemoveUnusedNodesPass(),
        common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common.DeduplicateInitializersPass(),
        common.CommonSubexpressionEliminationPass(),
        common.OutputFixPass(),
        common.NameFixPass(),
    )(model)

    graph.inputs.clear()
    graph.inputs.extend(inputs)
    for value, tensor in held.items():
        value.const_value = tensor
        graph.register_initializer(value)


def _by_op_type(rule):
    """A copy of `rule` (onnxscript's RewriteRule) whose try_rewrite returns None at once for a node
    whose op type or domain is not that of the pattern's output node: what its matcher would return
    after building a match state and a failure message (SimplePatternMatcher matches a pattern with
    one output node from that node: the op and domain are checked first, with no side effect). Any
    other kind of rule, or a call with a tracer (which logs the failure), is left as it is."""
    from onnxscript.rewriter import _pattern_ir

    pattern = rule._target_pattern
    if (type(rule).try_rewrite is not rewriter.RewriteRule.try_rewrite or type(rule).match is not patterns.Pattern.match
            or type(rule._matcher) is not patterns.SimplePatternMatcher or not pattern.has_single_output_node):
        return rule
    root = pattern.output_node
    if type(root).matches is not _pattern_ir.NodePattern.matches:
        return rule
    op, domain, try_rewrite = root.op, root.domain, rule.try_rewrite
    verdicts: dict[tuple[str, str], bool] = {}

    def prefiltered(model, graph_or_function, node, *, verbose=None, tracer=None):
        key = (node.op_type, node.domain)
        verdict = verdicts.get(key)
        if verdict is None:
            verdict = verdicts[key] = bool(op.matches(node.op_type) and domain.matches(node.domain))
        if not verdict and tracer is None:
            return None
        return try_rewrite(model, graph_or_function, node, verbose=verbose, tracer=tracer)

    clone = copy.copy(rule)  # (the rules are onnxscript's own objects, shared with torch.onnx)
    clone.try_rewrite = prefiltered
    return clone
