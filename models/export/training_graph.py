"""export_training_graph: a PyTorch module -> one ONNX training graph (SPEC.md, "PyTorch export").

    trace      torch.export, our ops put in, AOTAutograd's joint forward+backward (joint.py)
    check      decomposed as torch.onnx will; every op without a translation named at once (unsupported.py)
    translate  torch.onnx with our translations (TABLE) -> ONNX; ScatterND's racy sums respelled (scatter.py)
    fuse       the graph pass on the result (what substitute.py could not put in: hand-written
               swish, GroupNorm then swish, float64 spellings), function bodies attached

Progress goes to `progress(step)` if given (the command line shows it).
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import warnings

import onnx
from torch import nn

from ascend_grad.models.export import DECOMPOSE, TABLE, joint, scatter, unsupported
from ascend_grad.models.export.interface import rename_interface

# metadata key: with dynamic_batch, the batch sizes the traced step holds for ("2.." or "2..63": a
# module may branch on the batch size, and torch.export then narrows the range)
BATCH_RANGE = "ascend_grad.batch_range"


@functools.cache
def _registry():
    """torchlib's translations, less those of DECOMPOSE, and ours (built once: it reads every torchlib
    function)."""
    from torch.onnx._internal.exporter import _registration

    with _quiet():
        registry = _registration.ONNXRegistry.from_torchlib()
    for op in DECOMPOSE:
        registry.functions.pop(op.name(), None)
    for op, function in TABLE.items():
        registry.register_op(op, function)
    return registry


@contextlib.contextmanager
def _quiet():
    """torch.onnx's and its optimizer's notes ("torchvision is not installed", "Skipped deduplication
of initializer ...") stay out of our output."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "onnxscript", "onnx_ir")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def export_training_graph(module: nn.Module, example_inputs, loss_fn=None, *, dynamic_batch: bool = False,
                          fuse: bool = True, progress=None) -> onnx.ModelProto:
    """One graph computing the forward, the loss and the gradients of every parameter that requires
    grad, plus the updated buffers, with our ops for SiLU, Mish and GroupNorm+SiLU (SPEC.md).
    `fuse=False`: the same graph as PyTorch spells it, without our ops (to compare against)."""
    from torch.onnx._internal.exporter import _core, _decomp

    from ascend_grad.graph_passes import fuse_backward_ops

    say = progress or (lambda step: None)
    example_inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    say("trace")
    with _quiet():
        traced = joint.trace(module, example_inputs, loss_fn, dynamic_batch, translated=TABLE, ours=fuse)
    say("check")
    registry = _registry()
    with _quiet(), joint.math_attention():
        decomposed = _core._prepare_exported_program_for_export(traced.joint, registry=registry)
    missing = unsupported.missing_ops(decomposed, registry)
    if missing:
        onnx_table = _decomp.create_onnx_friendly_decomposition_table(set(_decomp.get_onnx_implemented_overloads(registry)))
        with _quiet():
            unsupported.raise_for(missing, traced.program, {**onnx_table, **joint.decomposition_table(TABLE)})
    say("translate")
    with _quiet():
        program = _core._exported_program_to_onnx_program(decomposed, registry=registry)
        _optimize(program, traced)
        scatter.respell_scatter_nd_add(program.model.graph)  # onnxruntime's ScatterND add races
    model = _interface(program.model_proto, traced)
    if traced.batch_range is not None:  # what torch.export guaranteed; onnxruntime does not check it
        low, high = traced.batch_range
        onnx.helper.set_model_props(model, {BATCH_RANGE: f"{low}..{'' if high is None else high}"})
    if not fuse:
        return model
    say("fuse")
    model, _ = fuse_backward_ops(model)
    return model


def _optimize(program, traced: joint.Joint) -> None:
    """torch.onnx's optimizer (onnxscript's optimize_ir: constant folding, its rewrite rules, dead
    code, common subexpressions), with two changes for training graphs:

    - every parameter and buffer stays an initializer of its own: meanwhile they are plain graph
      inputs, so nothing folds them into constants (a Linear's transposed weight would replace the
      weight, a BatchNorm's step counter its update);
    - rules whose pattern has several output nodes are left out: their matcher tries every pair of
      candidate nodes (SlicesSplit took 18.6 s of a small UNet's 3,300-node graph, per iteration);
    - each rule is tried only on the nodes of its pattern's last op (_by_op_type): the rewriter
      tries every rule on every node, and each failed match builds a match state and a message
      (45 rules: 779,220 tries on the dynamic-batch UNet; about 7 s of its export).
    """
    import onnx_ir as ir
    from onnx_ir.passes import common
    from onnxscript import rewriter
    from onnxscript.optimizer import _constant_folding

    signature = traced.joint.graph_signature
    state = {*signature.inputs_to_parameters.values(), *signature.inputs_to_buffers.values()}
    model = program.model
    graph = model.graph
    inputs = list(graph.inputs)
    held = {graph.initializers.pop(name): None for name in list(graph.initializers) if name in state}
    for value in held:
        held[value], value.const_value = value.const_value, None  # the folder reads const_value, wherever it is
    graph.inputs.extend(held)

    rules = [_by_op_type(rule) for rule in rewriter._DEFAULT_REWRITE_RULES if rule._target_pattern.has_single_output_node]
    ir.passes.Sequential(
        common.InlinePass(),
        ir.passes.PassManager([_constant_folding.FoldConstantsPass(
            shape_inference=True, input_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_INPUT_SIZE_LIMIT,
            output_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_OUTPUT_SIZE_LIMIT), rewriter.RewritePass(rules),
                               common.RemoveUnusedNodesPass(), common.RemoveUnusedFunctionsPass(),
                               common.RemoveUnusedOpsetsPass()], steps=2, early_stop=True),
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
    import copy

    from onnxscript.rewriter import _matcher, _pattern_ir
    from onnxscript.rewriter._rewrite_rule import Pattern, RewriteRule

    pattern = rule._target_pattern
    if (type(rule).try_rewrite is not RewriteRule.try_rewrite or type(rule).match is not Pattern.match
            or type(rule._matcher) is not _matcher.SimplePatternMatcher or not pattern.has_single_output_node):
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


def _interface(model: onnx.ModelProto, traced: joint.Joint) -> onnx.ModelProto:
    """SPEC.md's names: input_<k>, loss, grad.<parameter>, buffer.<buffer>, initializers as in
    named_parameters() / named_buffers()."""
    inputs = {i.name: f"input_{k}" for i, k in zip(model.graph.input, traced.inputs)}
    inputs.update({t.name: t.name.removeprefix(joint.PREFIX) for t in model.graph.initializer if t.name.startswith(joint.PREFIX)})
    outputs = ["loss"] + [f"grad.{n}" for n in traced.gradients] + [f"buffer.{n}" for n in traced.buffers]
    if len(outputs) != len(model.graph.output):
        raise AssertionError(f"export_training_graph: {len(model.graph.output)} graph outputs for {len(outputs)} names")
    return rename_interface(model, inputs, outputs)
