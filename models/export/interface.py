"""The graph interface SPEC.md promises for a joint training graph: inputs `input_<k>`, the
parameters as initializers named as in `named_parameters()`, outputs `loss` then `grad.<name>`."""

from __future__ import annotations

import onnx
import torch
from torch import nn

from ascend_grad.models.modules import default_loss


class WithLoss(nn.Module):
    """`module` followed by `loss_fn` (default: models.modules.default_loss): the loss is output 0.
    Its parameters are the module's, prefixed with "module."."""

    def __init__(self, module: nn.Module, loss_fn=None, constants: dict[int, object] | None = None):
        super().__init__()
        self.module = module
        self.loss_fn = loss_fn or default_loss
        self.constants = constants or {}  # position -> a non-tensor input, baked in (forward takes the tensors)

    def forward(self, *inputs):  # (the name shows in exported graphs' dimension names: keep it)
        given = iter(inputs)
        full = [self.constants[k] if k in self.constants else next(given) for k in range(len(inputs) + len(self.constants))]
        return (self.loss_fn(self.module(*full)),)


def rename_interface(model: onnx.ModelProto, inputs: dict[str, str], outputs: list[str]) -> onnx.ModelProto:
    """Rename graph inputs (old -> new) and the outputs (in order) everywhere they are used."""
    renames = dict(inputs)
    renames.update({o.name: new for o, new in zip(model.graph.output, outputs)})
    # a renamed output may also feed nodes, or be a graph input passed straight through
    for node in model.graph.node:
        node.input[:] = [renames.get(v, v) for v in node.input]
        node.output[:] = [renames.get(v, v) for v in node.output]
    for value in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        value.name = renames.get(value.name, value.name)
    for tensor in model.graph.initializer:
        tensor.name = renames.get(tensor.name, tensor.name)
    return model


def inputs_to_initializers(model: onnx.ModelProto, values: dict[str, torch.Tensor]) -> onnx.ModelProto:
    """Make the named graph inputs initializers holding `values` (the module's parameters)."""
    kept = [i for i in model.graph.input if i.name not in values]
    for name, tensor in values.items():
        model.graph.initializer.append(onnx.numpy_helper.from_array(tensor.detach().cpu().numpy(), name))
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return model
