"""The graph pass on a folder of onnxruntime-training artifacts (what
`onnxruntime.training.artifacts.generate_artifacts` writes):

    report = fuse_training_artifacts(in_dir, out_dir)

`training_model.onnx` and `eval_model.onnx` go through `fuse_backward_ops`; `optimizer_model.onnx`,
`checkpoint` (and `nominal_checkpoint`) are carried over. OUT then loads in
`onnxruntime.training.api` as IN did: `CheckpointState.load_checkpoint(OUT/checkpoint)`,
`Module(OUT/training_model.onnx, state, OUT/eval_model.onnx, session_options=...)`,
`Optimizer(OUT/optimizer_model.onnx, module)`, with the kernel library registered in the session
options (`runtime_ext.session_options()`) or without it (onnxruntime then inlines the ops' function
bodies).

What the training API relies on, and is kept as it was: every graph input and output of both models,
by name and in order (the parameters are graph inputs whose values the checkpoint holds, by name;
`<param>_grad.accumulation.buffer`, `lazy_reset_grad` and the `...accumulation.out` outputs are
found by name), the opsets the models import (ascend.grad aside), and the checkpoint's bytes.

Every model written has ir_version 10 at most: onnxruntime-training 1.19.2 (its last release)
refuses newer ones, and onnx 1.18+ writes newer ones - `generate_artifacts` run beside onnx 1.23
writes an optimizer model of IR 14 that the same onnxruntime-training cannot load. A model that
holds something IR 10 cannot say (an element type such as float4e2m1, multi-device configurations)
is refused.

Everything is written to a temporary folder first (beside OUT, or in it when it exists): a failure
leaves OUT as it was. OUT that does not exist is then that folder renamed; otherwise (OUT is IN, say:
fusing in place) each artifact is moved over its old version (each move atomic), artifacts of the
same prefix that IN lacks are removed from OUT, and other files are left alone. ORT-format copies (`*.ort`, `generate_artifacts(ort_format=True)`)
of a model that changed would still be the unfused model: they are not carried over, and removed from
OUT where they were.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from ascend_grad import DOMAIN
from ascend_grad.graph_passes._fuse import FusionReport, fuse_backward_ops

# what onnxruntime-training 1.19.2 reads (onnxruntime 1.19: "max supported IR version: 10")
MAX_IR_VERSION = 10
# the element types IR 10 knows (onnx.TensorProto: ... INT4 = 22 came with IR 10)
_MAX_ELEM_TYPE = onnx.TensorProto.INT4

TRAINING_MODEL, EVAL_MODEL, OPTIMIZER_MODEL = "training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"
CHECKPOINT, NOMINAL_CHECKPOINT = "checkpoint", "nominal_checkpoint"
FUSED = (TRAINING_MODEL, EVAL_MODEL)
# (a checkpoint of large parameters keeps their bytes in <checkpoint>.data)
ARTIFACTS = (TRAINING_MODEL, EVAL_MODEL, OPTIMIZER_MODEL, CHECKPOINT, CHECKPOINT + ".data", NOMINAL_CHECKPOINT,
             NOMINAL_CHECKPOINT + ".data")


class NotArtifacts(ValueError):
    """The folder is not one that generate_artifacts wrote (or cannot be written as one)."""


@dataclass
class ArtifactsReport:
    """What fuse_training_artifacts did: the graph pass's report per fused model, the fused ops
    summed over them, what was written (file -> "fused" | "copied" | "ir_version N -> 10"), and what
    was left out or removed, with why."""

    folder: str = ""
    prefix: str = ""
    models: dict[str, FusionReport] = field(default_factory=dict)
    written: dict[str, str] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)

    @property
    def counts(self) -> dict[str, int]:
        total = Counter()
        for report in self.models.values():
            total.update({op: n for op, n in report.counts.items()})
        return dict(total)

    @property
    def refused(self) -> dict[str, str]:
        return {f"{name}: {where}": why for name, report in self.models.items() for where, why in report.refused.items()}

    def to_dict(self) -> dict:
        return {
            "folder": self.folder,
            "prefix": self.prefix,
            "counts": self.counts,
            "models": {name: report.to_dict() for name, report in self.models.items()},
            "written": self.written,
            "dropped": self.dropped,
        }


def find_artifacts(folder, prefix: str | None = None) -> tuple[str, dict[str, Path]]:
    """(prefix, {artifact name: path}) of the artifacts in `folder`; `prefix=None` finds it (the one
    `<prefix>training_model.onnx` there). An artifacts folder holds at least the training model and
    its checkpoint; NotArtifacts says why a folder is not one."""
    folder = Path(folder)
    if not folder.is_dir():
        raise NotArtifacts(f"{folder}: " + ("no such folder" if not folder.exists() else "not a folder"))
    if prefix is None:
        found = sorted(p.name[: -len(TRAINING_MODEL)] for p in folder.iterdir() if p.name.endswith(TRAINING_MODEL) and p.is_file())
        if not found:
            raise NotArtifacts(f"{folder}: not a folder of onnxruntime-training artifacts (no {TRAINING_MODEL})")
        if len(found) > 1:
            raise NotArtifacts(f"{folder}: holds the artifacts of {len(found)} prefixes ({', '.join(repr(p) for p in found)}); "
                               "give the prefix")
        prefix = found[0]
    paths = {name: folder / f"{prefix}{name}" for name in ARTIFACTS if (folder / f"{prefix}{name}").exists()}
    for needed in (TRAINING_MODEL, CHECKPOINT):
        if needed not in paths:
            raise NotArtifacts(f"{folder}: not a folder of onnxruntime-training artifacts (no {prefix}{needed})")
    return prefix, paths


def fuse_training_artifacts(in_dir, out_dir, prefix: str | None = None) -> ArtifactsReport:
    """Fuse the training and eval models of the artifacts in `in_dir`, carry the optimizer model and
    the checkpoint over, and write them to `out_dir` (which may be `in_dir`: fused in place). Returns
    an ArtifactsReport. NotArtifacts for a folder that is not one (nothing is written then)."""
    prefix, paths = find_artifacts(in_dir, prefix)
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise NotArtifacts(f"{out_dir}: exists and is not a folder")
    parent = out_dir.resolve().parent
    if not out_dir.exists() and not parent.is_dir():
        raise NotArtifacts(f"{out_dir}: cannot write: no folder {parent}")
    report = ArtifactsReport(folder=str(out_dir), prefix=prefix)
    # on OUT's file system, so that the moves at the end are renames
    temporary = Path(tempfile.mkdtemp(prefix=f".{out_dir.resolve().name}.", suffix=".ascend-grad",
                                      dir=out_dir if out_dir.exists() else parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temporary, 0o777 & ~umask)  # a folder as mkdir makes it, not mkdtemp's private one: it may become OUT
    try:
        for name, path in paths.items():
            target = temporary / path.name
            if name in FUSED:
                report.models[name] = _fuse_model(path, target)
                report.written[name] = "fused"
            elif name == OPTIMIZER_MODEL:
                report.written[name] = _carry_model(path, target)
            elif path.is_dir():
                shutil.copytree(path, target)
                report.written[name] = "copied"
            else:
                shutil.copy2(path, target)
                report.written[name] = "copied"
        for name in FUSED:
            stale = Path(in_dir) / f"{prefix}{name.removesuffix('.onnx')}.ort"
            if stale.exists():
                report.dropped[stale.name] = ("the ORT-format copy of the unfused model: convert the fused one "
                                              "(onnxruntime.tools.convert_onnx_models_to_ort with the kernel library)")
        _publish(temporary, out_dir, prefix, report)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return report


def _fuse_model(path: Path, target: Path) -> FusionReport:
    model = onnx.load(path)
    interface = _interface(model)
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    fused, fusion = fuse_backward_ops(model)
    if _interface(fused) != interface:  # the training API finds parameters, buffers and outputs by name
        raise RuntimeError(f"{path.name}: the graph pass changed the graph's inputs or outputs")
    for o in fused.opset_import:
        domain = o.domain or "ai.onnx"
        if domain != DOMAIN and opsets.get(domain) != o.version:
            raise RuntimeError(f"{path.name}: the graph pass imports {domain} {o.version}, which the model did not")
    if fused.functions and fused.ir_version < 8:  # model-local functions came with IR 8
        fused.ir_version = 8
    _lower_ir_version(fused, path.name)
    _save(fused, target)
    return fusion


def _carry_model(path: Path, target: Path) -> str:
    """The model's bytes as they are, or, if its IR version is above what onnxruntime-training reads,
    the model with the version lowered."""
    model = onnx.load(path)
    if model.ir_version <= MAX_IR_VERSION:
        shutil.copy2(path, target)
        return "copied"
    before = model.ir_version
    _lower_ir_version(model, path.name)
    _save(model, target)
    return f"copied, ir_version {before} -> {model.ir_version}"


def _interface(model: onnx.ModelProto) -> tuple:
    graph = model.graph
    return [i.name for i in graph.input], [o.name for o in graph.output]


def _lower_ir_version(model: onnx.ModelProto, name: str) -> None:
    """ir_version 10 for a model above it, unless it holds something IR 10 cannot say."""
    if model.ir_version <= MAX_IR_VERSION:
        return
    newer = sorted({t for t in _elem_types(model) if t > _MAX_ELEM_TYPE})
    if newer:
        names = ", ".join(onnx.TensorProto.DataType.Name(t) for t in newer)
        raise NotArtifacts(f"{name}: ir_version {model.ir_version} with element types IR {MAX_IR_VERSION} does not have "
                           f"({names}): onnxruntime-training 1.19.2 cannot load it")
    if len(getattr(model, "configuration", ())) or any(len(getattr(n, "device_configurations", ())) for n in _nodes(model)):
        raise NotArtifacts(f"{name}: ir_version {model.ir_version} with multi-device configurations: "
                           "onnxruntime-training 1.19.2 cannot load it")
    model.ir_version = MAX_IR_VERSION


def _nodes(model: onnx.ModelProto):
    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        for node in graph.node:
            yield node
            for attribute in node.attribute:
                graphs.extend([attribute.g] if attribute.HasField("g") else attribute.graphs)
    for function in model.functions:
        yield from function.node


def _elem_types(model: onnx.ModelProto):
    """Every element type the model names: values, initializers, Cast targets, constant tensors."""
    def of_type(t: onnx.TypeProto):
        kind = t.WhichOneof("value")
        if kind in ("tensor_type", "sparse_tensor_type"):
            yield getattr(t, kind).elem_type
        elif kind in ("sequence_type", "optional_type"):
            yield from of_type(getattr(t, kind).elem_type)
        elif kind == "map_type":
            yield t.map_type.key_type
            yield from of_type(t.map_type.value_type)

    graphs = [model.graph] + [a.g for n in _nodes(model) for a in n.attribute if a.HasField("g")] \
        + [g for n in _nodes(model) for a in n.attribute for g in a.graphs]
    for graph in graphs:
        for value in (*graph.input, *graph.output, *graph.value_info):
            yield from of_type(value.type)
        for tensor in graph.initializer:
            yield tensor.data_type
    for function in model.functions:
        for value in function.value_info:
            yield from of_type(value.type)
    for node in _nodes(model):
        for attribute in node.attribute:
            if node.op_type == "Cast" and attribute.name == "to":
                yield attribute.i
            if attribute.HasField("t"):
                yield attribute.t.data_type


def _save(model: onnx.ModelProto, target: Path) -> None:
    if model.ByteSize() > 1_800_000_000:  # protobuf's 2 GB limit: the weights beside it
        onnx.save(model, target, save_as_external_data=True, location=target.name + ".data")
    else:
        onnx.save(model, target)


def _publish(temporary: Path, out_dir: Path, prefix: str, report: ArtifactsReport) -> None:
    """Move the written folder into place: renamed to OUT when OUT is absent, else file by file (the
    temporary folder is then inside OUT)."""
    if not out_dir.exists():
        os.replace(temporary, out_dir)
        return
    written = {p.name for p in temporary.iterdir()}
    for path in temporary.iterdir():
        target = out_dir / path.name
        if target.is_dir() and not path.is_dir():
            shutil.rmtree(target)
        elif path.is_dir() and target.exists():
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        os.replace(path, target)
    stale = {f"{prefix}{name}": "removed from OUT: IN has no such artifact" for name in ARTIFACTS if f"{prefix}{name}" not in written}
    stale.update({f"{prefix}{name.removesuffix('.onnx')}.ort": "removed from OUT: the ORT-format copy of an unfused model"
                  for name in FUSED})
    for name, why in stale.items():
        path = out_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        else:
            continue
        report.dropped[name] = why
