"""The ways a PyTorch training graph reaches ONNX; each spells the backward differently.

- `aot_joint`: `aot_export_module(..., trace_joint=True)` then `torch.onnx.export(dynamo=True)`;
  the backward of SiLU arrives decomposed (fill / sub / mul / add), GroupNorm's as
  torch._decomp's native_group_norm_backward.
- `export_joint`: `torch.export.export` then `_export_forward_backward` then `torch.onnx.export`;
  the only route that takes a dynamic batch.
- `compile_backward`: the torch.compile-style backward-only graph: AOTAutograd's partitioned
  backward, its silu/mish/group_norm backward ops decomposed with torch._decomp through make_fx.

Joint graphs come out with the SPEC's interface: input `input_0`, the parameters as initializers
named as in `named_parameters()`, outputs `loss` then `grad.<name>`. The backward-only graph keeps
AOTAutograd's names (saved activations and `tangents_1` in, one gradient per parameter out).
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings

import numpy as np
import onnx
import torch
from torch import nn

from ascend_grad.models.export import TABLE
from ascend_grad.models.export.interface import WithLoss, inputs_to_initializers, rename_interface
from ascend_grad.models.modules import default_loss


def to_onnx(program, args, optimize: bool = True, dynamic_shapes=None, *, dynamo: bool = True,
            opset_version: int | None = None, table=TABLE, **options) -> onnx.ModelProto:
    """`torch.onnx.export` of `program` on `args`, quietly, as a ModelProto.

    dynamo=True (torch.export): `optimize` and `dynamic_shapes` are its own; `table` its
    custom_translation_table (ours for joint graphs; None: the stock translations). dynamo=False
    (TorchScript): `optimize` is do_constant_folding and `dynamic_shapes` is dynamic_axes. Other
    `options` (input_names, export_params, ...) go to torch.onnx.export as they are; with dynamo,
    export_params=False is applied as torch applies it, when the program is saved.
    """
    import tempfile
    from pathlib import Path

    logging.getLogger("torch.onnx").setLevel(logging.ERROR)  # "torchvision is not installed" notes
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), tempfile.TemporaryDirectory() as folder:
        warnings.simplefilter("ignore")
        if not dynamo:
            f = io.BytesIO()
            torch.onnx.export(program, args, f, dynamo=False, do_constant_folding=optimize, dynamic_axes=dynamic_shapes,
                              opset_version=opset_version, verbose=False, **options)
            return onnx.load_from_string(f.getvalue())
        path = Path(folder) / "model.onnx" if options.get("export_params") is False else None
        exported = torch.onnx.export(
            program,
            args,
            path,
            dynamo=True,
            optimize=optimize,
            dynamic_shapes=dynamic_shapes,
            custom_translation_table=table,
            opset_version=opset_version,
            verbose=False,
            **options,
        )
        return onnx.load(path) if path else exported.model_proto


def aot_joint(module: nn.Module, example_inputs: tuple, optimize: bool = True, loss_fn=None, *,
              opset_version: int | None = None, dynamo: bool = True, params_as_inputs: bool = False) -> onnx.ModelProto:
    """The joint graph by AOTAutograd, exported by torch.onnx (dynamo=False: the TorchScript exporter,
    which cannot take it today); params_as_inputs keeps the parameters graph inputs (named as in
    named_parameters(), before input_0) instead of making them initializers."""
    from torch._functorch.aot_autograd import aot_export_module

    wrapped = WithLoss(module, loss_fn)
    graph_module, signature = aot_export_module(wrapped, example_inputs, trace_joint=True, output_loss_index=0)
    names = [n for n, _ in wrapped.named_parameters()]  # the joint module takes these, then the inputs
    params = dict(wrapped.named_parameters())
    model = to_onnx(graph_module, tuple(params.values()) + tuple(example_inputs), optimize, dynamo=dynamo,
                    opset_version=opset_version)
    graded = list(signature.backward_signature.gradients_to_parameters.values())
    return _interface(model, names, len(example_inputs), graded, params, params_as_inputs)


def _interface(model, param_names, n_inputs, graded, params, params_as_inputs: bool = False) -> onnx.ModelProto:
    """SPEC's interface for a joint graph whose ONNX inputs are the parameters then the inputs, and
    whose outputs are the loss then the gradients of `graded` (parameter names) in that order
    (params_as_inputs: the parameters stay graph inputs)."""
    graph_inputs = [i.name for i in model.graph.input]
    renames = {old: name.removeprefix("module.") for old, name in zip(graph_inputs, param_names)}
    renames.update({old: f"input_{k}" for k, old in enumerate(graph_inputs[len(param_names) :])})
    outputs = ["loss"] + [f"grad.{name.removeprefix('module.')}" for name in graded]
    model = rename_interface(model, renames, outputs)
    if params_as_inputs:
        return model
    return inputs_to_initializers(model, {n.removeprefix("module."): p for n, p in params.items()})


def export_joint(
    module: nn.Module, example_inputs: tuple, optimize: bool = True, dynamic_batch: bool = False, loss_fn=None, *,
    opset_version: int | None = None, params_as_inputs: bool = False,
) -> onnx.ModelProto:
    from ascend_grad.models.export.torch_internals import export_forward_backward

    wrapped = WithLoss(module, loss_fn)
    batch = torch.export.Dim("batch", min=2)
    dynamic = {"inputs": tuple({0: batch} for _ in example_inputs)} if dynamic_batch else None
    joint = export_forward_backward(torch.export.export(wrapped, tuple(example_inputs), dynamic_shapes=dynamic))
    # torch.onnx exports only an ExportedProgram's user outputs: export the joint graph module
    # itself, whose outputs are the loss and the gradients, with the parameters as arguments
    params = dict(wrapped.named_parameters())
    dynamic_args = tuple([None] * len(params) + [{0: batch}] * len(example_inputs)) if dynamic_batch else None
    model = to_onnx(joint.graph_module, tuple(params.values()) + tuple(example_inputs), optimize, dynamic_args,
                    opset_version=opset_version)
    kinds = torch.export.graph_signature.OutputKind
    graded = [s.target for s in joint.graph_signature.output_specs if s.kind == kinds.GRADIENT_TO_PARAMETER]
    return _interface(model, list(params), len(example_inputs), graded, params, params_as_inputs)


def compile_backward(module: nn.Module, example_inputs: tuple, optimize: bool = True, loss_fn=None) -> onnx.ModelProto:
    from torch._decomp import get_decompositions
    from torch._functorch.aot_autograd import aot_function, make_boxed_func

    params = dict(module.named_parameters())
    captured = {}

    def keep_backward(graph_module, _inputs):
        captured["backward"] = graph_module
        return make_boxed_func(graph_module.forward)

    def loss_of(*args):
        inputs, values = args[: len(example_inputs)], args[len(example_inputs) :]
        output = torch.func.functional_call(module, dict(zip(params, values)), inputs)
        return (loss_fn or default_loss)(output)

    decompositions = get_decompositions(
        [torch.ops.aten.silu_backward, torch.ops.aten.mish_backward, torch.ops.aten.native_group_norm_backward]
    )
    compiled = aot_function(
        loss_of, fw_compiler=lambda gm, _: make_boxed_func(gm.forward), bw_compiler=keep_backward, decompositions=decompositions
    )
    compiled(*example_inputs, *params.values()).backward()
    backward = captured["backward"]
    saved = [n for n in backward.graph.nodes if n.op == "placeholder"]
    examples = tuple(_example_for(n) for n in saved)

    class Backward(nn.Module):  # drop the None gradients of the inputs
        def __init__(self):
            super().__init__()
            self.graph_module = backward

        def forward(self, *args):
            return tuple(g for g in self.graph_module(*args) if g is not None)

    program = torch.export.export(Backward(), examples)
    model = to_onnx(program, examples, optimize)
    outputs = [f"grad.{name}" for name in params]
    return rename_interface(model, {}, outputs)


def _example_for(placeholder) -> torch.Tensor:
    value = placeholder.meta["val"]
    return torch.randn(value.shape, dtype=value.dtype) if value.dtype.is_floating_point else torch.zeros(value.shape, dtype=value.dtype)


def to_numpy_inputs(example_inputs: tuple) -> dict[str, np.ndarray]:
    return {f"input_{k}": t.detach().cpu().numpy() for k, t in enumerate(example_inputs)}
