"""The onnxruntime-training route: the training graph `generate_artifacts` writes (training_model.onnx).

onnxruntime-training exists only as `onnxruntime-training-cpu==1.19.2` (its last release, for Python
up to 3.11), which cannot share an environment with this project's onnx and onnxruntime, so it runs
in its own virtual environment, made once under build/venvs/ (ascend_grad.venvs.venv_python). The route:

1. here (PyTorch): `torch.onnx.export(dynamo=False, training=TRAINING)` of the module with the loss
   inside the graph: input `input_0`, output `loss`, the parameters as initializers named as in
   `named_parameters()`;
2. in the venv: `generate_artifacts(requires_grad=<every parameter>, loss=None, optimizer=None)`.
   `loss=None` adds no loss block (a PassThrough): backpropagation starts at the first graph output,
   our scalar `loss`, seeded by an initializer `loss_grad` = 1. onnxruntime first runs its training
   graph transformers (Sigmoid+Mul -> com.microsoft.QuickGelu), then builds the gradient graph, so
   SiLU's backward arrives as com.microsoft.QuickGeluGrad(dy, x) alpha=1.0.

The training graph takes `input_0`, the parameters, one gradient buffer per parameter
(`<name>_grad.accumulation.buffer`) and `lazy_reset_grad`, and returns `loss` and one BOOL per
parameter (`<name>_grad.accumulation.out`): each gradient `<name>_grad` is an internal value that an
com.microsoft.InPlaceAccumulatorV2 adds into its buffer (copies, when lazy_reset_grad is true). The
parameter values are not in the graph but in the artifacts' `checkpoint`.

onnxruntime-training 1.19.2 has no gradient for Softplus (Mish) nor InstanceNormalization (how
torch exports GroupNorm), and generate_artifacts fails on MishMLP, ResBlock and GroupNormSwishBlock.
`rewrite=True` first respells those two ops with ops it can differentiate
(ascend_grad.training.make_differentiable).
"""

from __future__ import annotations

import io
import json
import subprocess
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper
from torch import nn

from ascend_grad.models.export.interface import WithLoss, rename_interface
from ascend_grad.training import make_differentiable as _differentiable  # (product code: ascend_grad.training)
from ascend_grad.venvs import venv_python

SPEC = ["onnxruntime-training-cpu==1.19.2", "onnx==1.16.2", "numpy"]  # onnx 1.17.0 works too
OPSET = 17  # 18 would export Mish and GroupNormalization ops, which have no gradient in 1.19.2 either

# onnxruntime/training/__init__.py imports `optim`, which imports torch (microsoft/onnxruntime#22070);
# the venv has no torch, so register a bare package and load only the submodules we need.
_PRELUDE = """
import json, os, sys, types, numpy as np, onnx, onnxruntime
package = types.ModuleType("onnxruntime.training")
package.__path__ = [os.path.join(os.path.dirname(onnxruntime.__file__), "training")]
sys.modules["onnxruntime.training"] = package
folder, names = sys.argv[1], json.loads(sys.argv[2])
"""

_GENERATE = """
from onnxruntime.training import artifacts
artifacts.generate_artifacts(onnx.load(f"{folder}/forward.onnx"), requires_grad=names, loss=None,
                             optimizer=None, artifact_directory=folder)
"""

# one training step through the training API: the gradients land in the checkpoint state
_TRAIN_STEP = """
from onnxruntime.training.api import CheckpointState, Module
state = CheckpointState.load_checkpoint(f"{folder}/checkpoint")
module = Module(f"{folder}/training_model.onnx", state)
module.train()
loss = module(*np.load(f"{folder}/inputs.npz").values())
np.savez(f"{folder}/results.npz", loss=loss, **{n: state.parameters[n].grad for n in names})
"""


def training_python() -> Path:
    """The python of a venv holding only SPEC (made once: see ascend_grad.venvs.venv_python)."""
    return venv_python(*SPEC)


def in_venv(script: str, folder: Path, names: list[str]) -> None:
    done = subprocess.run([training_python(), "-c", _PRELUDE + script, folder, json.dumps(names)], capture_output=True, text=True)
    if done.returncode:
        lines = [line for line in done.stderr.splitlines() if "[I:onnxruntime" not in line]  # per-transformer notes
        raise RuntimeError(f"onnxruntime-training failed in {folder}:\n" + "\n".join(lines[-12:]))


def export_forward(module: nn.Module, example_inputs: tuple, loss_fn=None) -> onnx.ModelProto:
    """The forward graph with the loss: `input_0` -> `loss`, parameters as initializers."""
    wrapped = WithLoss(module, loss_fn)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        # TRAINING keeps training-mode semantics (dropout, batch statistics); no folding keeps the
        # parameters as the named initializers requires_grad refers to
        torch.onnx.export(wrapped, tuple(example_inputs), buffer, dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, export_params=True, opset_version=OPSET,
                          input_names=[f"input_{k}" for k in range(len(example_inputs))], output_names=["loss"])
    model = onnx.load_from_string(buffer.getvalue())
    # WithLoss prefixes the parameters with "module."
    model = rename_interface(model, {n: n.removeprefix("module.") for n, _ in wrapped.named_parameters()}, ["loss"])
    return _drop_identity_casts(model)


def _drop_identity_casts(model: onnx.ModelProto) -> onnx.ModelProto:
    """Remove the Casts to the type their input already has (the loss's `.float()` on a float output).

    onnxruntime's training transformer PropagateCastOps removes them too, but crashes doing so when
    the Cast's output feeds one node twice, as in the loss's Mul(y, y) for `square()`:
    "graph.cc:1591 Graph::RemoveEdge: Argument mismatch when removing edge".
    """
    typed = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in [*typed.graph.input, *typed.graph.value_info, *typed.graph.output]}
    types.update({t.name: t.data_type for t in model.graph.initializer})
    outputs = {o.name for o in model.graph.output}
    for cast in [n for n in model.graph.node if n.op_type == "Cast" and n.output[0] not in outputs]:
        if types.get(cast.input[0]) == helper.get_node_attr_value(cast, "to"):
            for node in model.graph.node:
                node.input[:] = [cast.input[0] if v == cast.output[0] else v for v in node.input]
            model.graph.node.remove(cast)
    return model


def ort_training(module: nn.Module, example_inputs: tuple, folder, loss_fn=None, rewrite: bool = False) -> onnx.ModelProto:
    """The training_model.onnx onnxruntime-training 1.19.2 makes of `module`; the artifacts (forward.onnx,
    training_model.onnx, eval_model.onnx, checkpoint) are left in `folder`. `rewrite`: respell the
    forward ops it cannot differentiate first (Softplus, InstanceNormalization)."""
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    forward = export_forward(module, example_inputs, loss_fn)
    onnx.save(_differentiable(forward) if rewrite else forward, folder / "forward.onnx")
    in_venv(_GENERATE, folder, [n for n, _ in module.named_parameters()])
    return onnx.load(folder / "training_model.onnx")


def verify(module: nn.Module, example_inputs: tuple, folder, loss_fn=None) -> dict[str, float]:
    """Relative errors (max |ort - torch| / max |torch|) of the loss and each parameter gradient after
    one onnxruntime-training step (the artifacts in `folder`) on `example_inputs`, against torch autograd."""
    folder = Path(folder).resolve()
    names = [n for n, _ in module.named_parameters()]
    np.savez(folder / "inputs.npz", *[t.detach().numpy() for t in example_inputs])
    in_venv(_TRAIN_STEP, folder, names)
    ort = np.load(folder / "results.npz")
    module.zero_grad()
    loss = WithLoss(module, loss_fn)(*example_inputs)[0]
    loss.backward()
    expected = {"loss": loss.detach().numpy(), **{n: p.grad.numpy() for n, p in module.named_parameters()}}
    return {k: float(np.abs(ort[k] - v).max() / np.abs(v).max()) for k, v in expected.items()}


def joint_graph(module: nn.Module, example_inputs: tuple, loss_fn=None, rewrite: bool = False) -> onnx.ModelProto:
    """The training graph with SPEC's interface, so it runs without the artifacts: the parameters
    become initializers, the InPlaceAccumulatorV2 nodes and their buffers go, and each gradient
    <p>_grad becomes the output grad.<p> (after loss). Its gradient ops are still com.microsoft ones:
    it runs in onnxruntime-training, not in stock onnxruntime."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        model = ort_training(module, example_inputs, folder, loss_fn, rewrite)
    graph = model.graph
    params = dict(module.named_parameters())
    kept = [n for n in graph.node if n.op_type != "InPlaceAccumulatorV2"]
    del graph.node[:]
    graph.node.extend(kept)
    inputs = [i for i in graph.input if i.name.startswith("input_")]
    del graph.input[:]
    graph.input.extend(inputs)
    graph.initializer.extend(numpy_helper.from_array(p.detach().numpy(), name) for name, p in params.items())
    del graph.output[1:]  # keep loss; the BOOL accumulator outputs go
    graph.output.extend(helper.make_tensor_value_info(f"{name}_grad", onnx.TensorProto.FLOAT, list(p.shape)) for name, p in params.items())
    return rename_interface(model, {}, ["loss"] + [f"grad.{name}" for name in params])
