"""onnxruntime-training artifacts whose training graph holds the ascend.grad ops (SPEC.md,
"onnxruntime-training"):

    from ascend_grad import training
    training.generate_artifacts(model, requires_grad=[...], loss=training.LossType.MSELoss,
                                optimizer=training.OptimType.AdamW, artifact_directory="artifacts")

the same call as `onnxruntime.training.artifacts.generate_artifacts`, for forward models that hold
GroupNorm, SiLU and Mish as torch.onnx exports them. onnxruntime-training 1.19.2 (its last release)
has no gradient for two of the ops those exports use: InstanceNormalization (torch's GroupNorm is
InstanceNormalization on x reshaped to (N, groups, rest), then the affine part) and Softplus (Mish
is x * tanh(softplus(x))). So the forward is first respelled with ops it can differentiate
(`make_differentiable`), then onnxruntime's generate_artifacts writes the artifacts, then the graph
pass fuses them in place (`graph_passes.fuse_training_artifacts`). Load them with the kernel library
registered (`runtime_ext.session_options()`), or without it (the ops' function bodies).

Runs where onnxruntime-training is installed; nothing here imports it before it is needed.
"""

from __future__ import annotations

import copy
import os
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["generate_artifacts", "make_differentiable", "onnxruntime_training"]


def make_differentiable(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with the ops onnxruntime-training 1.19.2 has no gradient builder for respelled:

    - Softplus(x) -> Relu(x) + Log(1 + Exp(-|x|)), the overflow-free form (Log(1 + Exp(x)) would
      give 0 * inf = NaN in the backward for x > 88);
    - InstanceNormalization(x, ones, zeros), torch's GroupNorm core on x = (N, groups, rest), ->
      LayerNormalization(x, ones(rest), zeros(rest), axis=2) with its mean and inv_std_var outputs,
      which LayerNormalizationGrad needs; torch applies GroupNorm's own weight and bias after it.

    ValueError for an InstanceNormalization that is not that (a scale or bias other than ones and
    zeros, or a shape not known statically past the batch).
    """
    model = copy.deepcopy(model)
    typed = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in typed.graph.value_info}
    values = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node
              if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"}
    values.update({t.name: numpy_helper.to_array(t) for t in model.graph.initializer})
    nodes = []
    for node in model.graph.node:
        x, y = node.input[0] if node.input else "", node.output[0]
        if node.op_type == "Softplus" and node.domain in ("", "ai.onnx"):
            model.graph.initializer.append(numpy_helper.from_array(np.array(1, np.float32), f"{y}/one"))
            steps = [("Relu", [x], "relu"), ("Abs", [x], "abs"), ("Neg", ["abs"], "neg"), ("Exp", ["neg"], "exp"),
                     ("Add", ["exp", "one"], "1p"), ("Log", ["1p"], "log"), ("Add", ["relu", "log"], "")]
            local = lambda part: part if part == x else f"{y}/{part}" if part else y  # noqa: E731
            nodes += [helper.make_node(op, [local(i) for i in ins], [local(out)]) for op, ins, out in steps]
        elif node.op_type == "InstanceNormalization" and node.domain in ("", "ai.onnx"):
            scale, bias = values.get(node.input[1]), values.get(node.input[2])
            rest = shapes.get(x, [0])[2:]
            if scale is None or bias is None or not (np.all(scale == 1) and np.all(bias == 0)) or 0 in rest:
                raise ValueError(f"{node.name or y}: only InstanceNormalization(x, ones, zeros) with a static shape "
                                 "past the batch is respelled (torch's GroupNorm)")
            # its gradient builder wants the optional bias too
            model.graph.initializer.extend([numpy_helper.from_array(np.ones(rest, np.float32), f"{y}/ones"),
                                            numpy_helper.from_array(np.zeros(rest, np.float32), f"{y}/zeros")])
            nodes.append(helper.make_node("LayerNormalization", [x, f"{y}/ones", f"{y}/zeros"], [y, f"{y}/mean", f"{y}/inv_std_var"],
                                          axis=2, epsilon=helper.get_node_attr_value(node, "epsilon")))
        else:
            nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def onnxruntime_training():
    """The `onnxruntime.training` package; after this call `from onnxruntime.training import artifacts,
    onnxblock, api` work, with torch or without it. ImportError, saying what to install, where
    onnxruntime-training is not installed.

    onnxruntime-training 1.19.2's onnxruntime/training/__init__.py imports its `optim` package,
    which imports torch (microsoft/onnxruntime#22070), though generate_artifacts and the training
    API need no torch. Without torch, `onnxruntime.training` is registered as a bare package (its
    folder only) whose submodules load on their own; with torch nothing is done differently."""
    import importlib

    try:
        return importlib.import_module("onnxruntime.training")
    except ModuleNotFoundError as error:
        if error.name != "torch":
            raise _no_training(error) from None
    import onnxruntime

    folder = Path(onnxruntime.__file__).parent / "training"
    package = types.ModuleType("onnxruntime.training")
    package.__path__ = [str(folder)]
    package.__file__ = str(folder / "__init__.py")
    sys.modules["onnxruntime.training"] = package
    onnxruntime.training = package
    try:
        importlib.import_module("onnxruntime.training.artifacts")
    except ImportError as error:
        raise _no_training(error) from None
    return package


def __getattr__(name: str):
    """`training.LossType` and `training.OptimType`: onnxruntime's, for generate_artifacts' loss and
    optimizer (importable without torch, see onnxruntime_training)."""
    if name in ("LossType", "OptimType"):
        onnxruntime_training()
        from onnxruntime.training import artifacts

        return getattr(artifacts, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _no_training(error: ImportError) -> ImportError:
    return ImportError(f"ascend_grad.training needs onnxruntime-training ({error}): "
                       "pip install onnxruntime-training-cpu==1.19.2, then ascend-grad beside it")


def generate_artifacts(model, requires_grad=None, frozen_params=None, loss=None, optimizer=None,
                       artifact_directory=None, **kwargs):
    """`onnxruntime.training.artifacts.generate_artifacts` for a forward model holding GroupNorm,
    SiLU and Mish as torch exports them; the same arguments (`prefix`, `ort_format`,
    `custom_op_library`, `additional_output_names`, `nominal_checkpoint`, `loss_input_names` pass
    through). The artifacts written hold our ops (see the module's docstring). Returns the graph
    pass's report (graph_passes.ArtifactsReport).

    `model`: an onnx.ModelProto or the path of one. With `ort_format=True` the ORT-format files are
    converted from the fused models, with the kernel library.
    """
    onnxruntime_training()
    from onnxruntime.training import artifacts

    from ascend_grad.graph_passes.training_artifacts import fuse_training_artifacts

    if isinstance(model, (str, os.PathLike)):
        model = onnx.load(os.fspath(model))
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"model: an onnx.ModelProto or the path of one, not {type(model).__name__}")
    directory = Path.cwd() if artifact_directory is None else Path(artifact_directory)
    ort_format = kwargs.pop("ort_format", False)
    forward = make_differentiable(model)
    with tempfile.TemporaryDirectory() as scratch:
        if forward.ByteSize() > artifacts.USE_PATH_THRESHOLD:  # onnxruntime takes such a model by its path
            path = os.path.join(scratch, "forward.onnx")
            onnx.save(forward, path, save_as_external_data=True, location="forward.onnx.data")
            forward = path
        artifacts.generate_artifacts(forward, requires_grad=requires_grad, frozen_params=frozen_params, loss=loss,
                                     optimizer=optimizer, artifact_directory=directory, **kwargs)
    report = fuse_training_artifacts(directory, directory, prefix=kwargs.get("prefix", ""))
    if ort_format:
        _convert_to_ort_format(directory, kwargs.get("prefix", ""), kwargs.get("custom_op_library"))
    return report


def _convert_to_ort_format(directory: Path, prefix: str, custom_op_library) -> None:
    """What generate_artifacts(ort_format=True) does, on the fused models: they need our kernels."""
    from onnxruntime.tools.convert_onnx_models_to_ort import OptimizationStyle, convert_onnx_models_to_ort

    from ascend_grad import runtime_ext

    if custom_op_library is not None:
        raise ValueError("ort_format=True with a custom_op_library of your own: the ORT-format models would need "
                         "two custom-op libraries, which convert_onnx_models_to_ort cannot take")
    for name in ("training_model", "eval_model", "optimizer_model"):
        path = directory / f"{prefix}{name}.onnx"
        if path.exists():
            convert_onnx_models_to_ort(path, output_dir=directory, custom_op_library_path=Path(runtime_ext.library_path()),
                                       optimization_styles=[OptimizationStyle.Fixed])
