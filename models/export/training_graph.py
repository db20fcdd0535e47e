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

from ascend_grad.models.export import DECOMPOSE, TABLE, joint, onnxscript_internals, scatter, torch_internals, unsupported
from ascend_grad.models.export.interface import rename_interface

# metadata key: with dynamic_batch, the batch sizes the traced step holds for ("2.." or "2..63": a
# module may branch on the batch size, and torch.export then narrows the range)
BATCH_RANGE = "ascend_grad.batch_range"


@functools.cache
def _registry():
    """torchlib's translations, less those of DECOMPOSE, and ours (built once: it reads every torchlib
    function)."""
    with _quiet():
        return torch_internals.onnx_registry(DECOMPOSE, TABLE)


@functools.cache
def _onnx_decompositions() -> dict:
    """torch.onnx's decompositions for _registry(): those of the ops it has no translation for."""
    return torch_internals.onnx_decomposition_table(_registry())


@functools.cache
def _decompositions() -> dict:
    """The joint trace's: PyTorch's core decompositions and torch.onnx's, less the ops of TABLE
    (shared: torch is handed a copy)."""
    return joint.decomposition_table(TABLE, _onnx_decompositions())


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
    from ascend_grad.graph_passes import fuse_backward_ops

    torch_internals.check_torch()  # before any work: another torch fails here, in one line
    say = progress or (lambda step: None)
    example_inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    say("trace")
    with _quiet():
        traced = joint.trace(module, example_inputs, dict(_decompositions()), loss_fn, dynamic_batch, ours=fuse)
    say("check")
    registry = _registry()
    with _quiet(), joint.math_attention():
        # torch.onnx's decompositions were applied in the joint trace: its own decomposition of the
        # joint graph, a second trace of all of it, has nothing left to do and is skipped (docs/exporter.md)
        onnx_decompositions = _onnx_decompositions()
        if not any(n.op == "call_function" and n.target in onnx_decompositions for n in traced.joint.graph.nodes):
            decomposed = torch_internals.prepare_decomposed_for_onnx(traced.joint)
        else:  # (one of them declined in the trace: torch.onnx's two traces, as it makes them)
            traced = joint.trace(module, example_inputs, joint.decomposition_table(TABLE), loss_fn, dynamic_batch, ours=fuse)
            decomposed = torch_internals.prepare_for_onnx(traced.joint, registry)
    missing = unsupported.missing_ops(decomposed, registry)
    if missing:
        with _quiet():
            unsupported.raise_for(missing, traced.program, dict(_decompositions()))
    say("translate")
    with _quiet():
        program = torch_internals.to_onnx_program(decomposed, registry)
        signature = traced.joint.graph_signature
        onnxscript_internals.optimize(program.model, {*signature.inputs_to_parameters.values(),
                                                      *signature.inputs_to_buffers.values()})
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


def _interface(model: onnx.ModelProto, traced: joint.Joint) -> onnx.ModelProto:
    """SPEC.md's names: input_<k>, loss, grad.<parameter>, buffer.<buffer>, initializers as in
    named_parameters() / named_buffers()."""
    inputs = {i.name: f"input_{k}" for i, k in zip(model.graph.input, traced.inputs)}
    inputs.update({t.name: t.name.removeprefix(joint.PREFIX) for t in model.graph.initializer if t.name.startswith(joint.PREFIX)})
    outputs = ["loss"] + [f"grad.{n}" for n in traced.gradients] + [f"buffer.{n}" for n in traced.buffers]
    if len(outputs) != len(model.graph.output):
        raise AssertionError(f"export_training_graph: {len(model.graph.output)} graph outputs for {len(outputs)} names")
    return rename_interface(model, inputs, outputs)
