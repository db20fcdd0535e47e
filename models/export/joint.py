"""From a module to the joint graph: one ExportedProgram computing the loss, the gradients of the
parameters that require grad, and the new values of the buffers the step updates, all as outputs.

1. `torch.export.export` of the module followed by its loss (the training IR; in train or eval
   mode, as the module is), with dimension 0 of every input symbolic if asked;
2. our ops put in (substitute.py), so autograd calls our backward ops;
3. AOTAutograd's joint trace (`_decompose_exported_program(joint_loss_index=0)`, as torch's own
   `_export_forward_backward`), with PyTorch's core decompositions and torch.onnx's (those of the
   ops without a translation) except for the ops models/export translates itself, and
   scaled_dot_product_attention in its math form (its CPU flash kernel's backward has no ONNX
   spelling; the math form's backward is matmuls and a softmax backward);
4. every output made a user output in SPEC.md's order: loss, gradients in `named_parameters()`
   order, buffer updates in `named_buffers()` order (torch.onnx writes only user outputs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils._pytree import tree_structure
from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature, OutputKind, OutputSpec, TensorArgument

from ascend_grad.models.export import torch_internals, upsample
from ascend_grad.models.export.interface import WithLoss
from ascend_grad.models.export.substitute import substitute

PREFIX = "module."  # WithLoss holds the module as .module


@dataclass
class Joint:
    """The joint program and what its user outputs are, in order."""

    program: ExportedProgram  # training IR after substitution: what unsupported.py attributes ops to
    joint: ExportedProgram
    gradients: list[str] = field(default_factory=list)  # parameter names, named_parameters() order
    buffers: list[str] = field(default_factory=list)  # updated buffers, named_buffers() order
    inputs: list[int] = field(default_factory=list)  # positions in example_inputs of the graph inputs
    batch_range: tuple[int, int | None] | None = None  # dynamic batch: the sizes the trace holds for


def decomposition_table(translated, onnx_table=None) -> dict:
    """PyTorch's core ATen decompositions and ours (tensor.DECOMPOSITIONS) over torch.onnx's
    (`onnx_table`: those of the ops it has no translation for), less the ops we translate ourselves
    (`translated`). With torch.onnx's in the joint trace, its own decomposition of the joint graph
    before translating has nothing left to do (training_graph.py skips it)."""
    from torch._decomp import core_aten_decompositions

    from ascend_grad.models.export import tensor

    table = {**(onnx_table or {}), **core_aten_decompositions(), **tensor.DECOMPOSITIONS}
    for op in translated:
        table.pop(op, None)
    return table


def math_attention():
    """scaled_dot_product_attention as matmul / softmax / matmul while tracing."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.MATH])


def trace(module: nn.Module, example_inputs: tuple, table: dict, loss_fn=None, dynamic_batch: bool = False,
          ours: bool = True) -> Joint:
    """The joint program of one training step under the decompositions `table`
    (decomposition_table); `ours`: with our ops put in (else as PyTorch spells it)."""
    tensors = [k for k, v in enumerate(example_inputs) if isinstance(v, torch.Tensor)]
    constants = {k: v for k, v in enumerate(example_inputs) if k not in tensors}
    wrapped = WithLoss(module, loss_fn, constants)
    args = tuple(example_inputs[k] for k in tensors)
    dynamic = None
    if dynamic_batch:  # DYNAMIC: a module may narrow the range (diffusers' Upsample2D branches on batch < 64)
        dynamic = {"inputs": tuple({0: torch.export.Dim.DYNAMIC} if t.dim() else None for t in args)}
    program = torch.export.export(wrapped, args, dynamic_shapes=dynamic)
    if ours:
        substitute(program.graph_module)
    upsample.substitute(program.graph_module)  # also without our ops: else upsampling's backward is index_put
    # AOTAutograd refuses a parameter that requires grad but gets none (unused in this forward):
    # such parameters are traced as frozen (their traced values, not the module's, stop requiring
    # grad) and given zero gradients afterwards, as torch's None
    unused = _unused_parameters(program)
    joint = _joint(program, table)
    if dynamic_batch:  # (torch.export itself refuses a forward that fixes it)
        _check_batch_symbolic(joint, "tracing the backward")
    gradients, buffers = _user_outputs(joint, wrapped, unused)
    return Joint(program, joint, gradients, buffers, tensors, _batch_range(program) if dynamic_batch else None)


def _check_batch_symbolic(program: ExportedProgram, stage: str) -> None:
    """Dimension 0 of every input is still a free symbol: a kernel traced in the backward may fix it
    to the example's size, and the graph would then hold for that size only, silently."""
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in program.graph_signature.user_inputs and node.meta["val"].dim():
            size = node.meta["val"].shape[0]
            fixed = size if not isinstance(size, torch.SymInt) else size.node.maybe_as_int()
            if fixed is not None:
                raise NotImplementedError(
                    f"export_training_graph: {stage} fixed the batch size of input {node.name} to {fixed} "
                    "(an op's kernel specialises it); export with dynamic_batch=False")


def _batch_range(program: ExportedProgram) -> tuple[int, int | None] | None:
    """The batch sizes the traced program holds for (the module may branch on the batch size):
    (lowest, highest or None for no bound), from torch.export's range of dimension 0."""
    first = next(n for n in program.graph.nodes if n.op == "placeholder" and n.name in program.graph_signature.user_inputs)
    size = first.meta["val"].shape[0]
    if not isinstance(size, torch.SymInt):
        return None
    bounds = program.range_constraints.get(size.node.expr)
    if bounds is None:
        return None
    finite = bool(bounds.upper.is_finite) and bounds.upper < 2**62  # torch writes "no bound" as int_oo
    return int(bounds.lower), int(bounds.upper) if finite else None


def _unused_parameters(program: ExportedProgram) -> set[str]:
    """The parameters requiring grad that the forward never reads, made not to require it in the
    traced program (the joint trace reads requires_grad from the placeholders' traced values)."""
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    unused = set()
    for node, name in program.graph_signature.inputs_to_parameters.items():
        value = placeholders[node].meta["val"]
        if value.requires_grad and not placeholders[node].users:
            placeholders[node].meta["val"] = value.detach()
            unused.add(name)
    return unused


def _joint(program: ExportedProgram, table: dict) -> ExportedProgram:
    with math_attention():
        return torch_internals.joint_trace(program, table)


def _user_outputs(joint: ExportedProgram, wrapped: WithLoss, unused: set[str]) -> tuple[list[str], list[str]]:
    """Reorder the joint graph's outputs to loss, gradients, buffer updates, all user outputs; the
    `unused` parameters' gradients are zeros."""
    output = next(n for n in reversed(joint.graph.nodes) if n.op == "output")
    values = list(output.args[0])
    specs = joint.graph_signature.output_specs
    by_kind: dict = {OutputKind.LOSS_OUTPUT: {}, OutputKind.GRADIENT_TO_PARAMETER: {}, OutputKind.BUFFER_MUTATION: {}}
    for value, spec in zip(values, specs):
        if spec.kind not in by_kind:
            raise NotImplementedError(f"export_training_graph: the joint graph has an output of kind {spec.kind.name} "
                                      f"({spec.target}), which SPEC.md's interface has no place for")
        by_kind[spec.kind][spec.target] = (value, spec)
    (loss,) = by_kind[OutputKind.LOSS_OUTPUT].values()
    if unused:
        placeholders = {n.name: n for n in joint.graph.nodes if n.op == "placeholder"}
        for node, name in joint.graph_signature.inputs_to_parameters.items():
            if name in unused:
                with joint.graph.inserting_before(output):
                    zeros = joint.graph.call_function(torch.ops.aten.zeros_like.default, (placeholders[node],))
                zeros.meta["val"] = placeholders[node].meta["val"]
                by_kind[OutputKind.GRADIENT_TO_PARAMETER][name] = (zeros, OutputSpec(
                    kind=OutputKind.GRADIENT_TO_PARAMETER, arg=TensorArgument(name=zeros.name), target=name))
    gradients = [n for n, _ in wrapped.named_parameters() if n in by_kind[OutputKind.GRADIENT_TO_PARAMETER]]
    buffers = [n for n, _ in wrapped.named_buffers() if n in by_kind[OutputKind.BUFFER_MUTATION]]
    ordered = [loss] + [by_kind[OutputKind.GRADIENT_TO_PARAMETER][n] for n in gradients]
    ordered += [by_kind[OutputKind.BUFFER_MUTATION][n] for n in buffers]
    output.args = (tuple(v for v, _ in ordered),)
    joint.graph_module.recompile()
    new_specs = [OutputSpec(kind=OutputKind.USER_OUTPUT, arg=spec.arg, target=None) for _, spec in ordered]
    joint._graph_signature = ExportGraphSignature(input_specs=joint.graph_signature.input_specs, output_specs=new_specs)
    # the program's calling convention returns them all too (a flat tuple)
    joint.module_call_graph[0].signature.out_spec = tree_structure(tuple(range(len(ordered))))
    return [n.removeprefix(PREFIX) for n in gradients], [n.removeprefix(PREFIX) for n in buffers]
