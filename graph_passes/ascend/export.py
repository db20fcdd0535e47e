"""export_for_ascend: a fused graph made right for onnxruntime-cann 1.24.4, and its plan.

Steps, in order (each module says what it does and why it is exact):
1. normalize: what onnxruntime does at load (Constant nodes -> initializers, function ops without a
   kernel -> their bodies, unique node names), and its float16 fallback (host_float16);
2. our ops: GroupNormSwishGrad (aclnn's 4000 limit, one dtype, NCHW), GroupNormSwish (gamma/beta in
   x's dtype or float); MishBackward needs nothing (every dtype pair is one aclnn call); padded
   AveragePool and Conv padded unevenly (1.24.4 hands them to CANN wrongly); then step 1 again for
   what they brought in (a function body holds Constants and CastLikes);
3. copies: exact respellings that keep chains on the NPU, where they remove Memcpy nodes;
4. broadcast: no binary op on the NPU with both inputs broadcast (the 1.24.4 bug);
5. the plan: placement, copies before (after step 1) and after, the rewrites, and the options the
   session must use.

The session options matter: OUT is written as onnxruntime runs it with graph optimizations
disabled (ORT_DISABLE_ALL), so that the placement of every node of OUT is the placement of the
session; with optimizations on, onnxruntime would rename, fuse and fold nodes first.
"""

from __future__ import annotations

import os

import onnx
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from ascend_grad import DOMAIN
from ascend_grad.graph_passes.ascend import (
    average_pool,
    broadcast,
    conv_pads,
    copies,
    group_norm_swish,
    group_norm_swish_grad,
    host_float16,
    normalize,
)
from ascend_grad.graph_passes.ascend._ir import Log, Names, infer_shapes
from ascend_grad.graph_passes.ascend.placement import CannotLoad, graph_copies, place, unloadable

PROVIDER_OPTIONS = {"enable_cann_graph": "0"}  # single-operator mode: the only one that runs custom kernels
SESSION_OPTIONS = {"graph_optimization_level": "ORT_DISABLE_ALL"}
IR_VERSION = 10


def _load(model) -> ir.Model:
    if isinstance(model, onnx.ModelProto):
        return ir.serde.deserialize_model(model)
    if isinstance(model, ir.Model):
        return ir.serde.deserialize_model(ir.serde.serialize_model(model))  # the caller's model stays as it is
    if isinstance(model, (str, os.PathLike)):
        return ir.load(os.fspath(model))
    raise TypeError(f"export_for_ascend takes an onnx.ModelProto, an onnx_ir.Model or a path, not {type(model).__name__}")


def _normalize(model: ir.Model, names: Names, log: Log) -> None:
    normalize.constants_to_initializers(model.graph, log)
    normalize.expand_function_ops(model, names, log)
    normalize.name_nodes(model.graph, names)
    infer_shapes(model)
    host_float16.apply(model, names, log)
    infer_shapes(model)


def export_for_ascend(model) -> tuple[onnx.ModelProto, dict]:
    """The model (ModelProto, onnx_ir.Model or path; run graph_passes.fuse_backward_ops first)
    rewritten for onnxruntime-cann 1.24.4, and the plan (SPEC.md "Ascend (stable)").

    Raises CannotLoad (a CannotExport) when the wheel has no kernel at all for some node
    (onnxruntime training ops such as com.microsoft::ConvGrad: the inference wheel cannot load the
    graph), CannotExport when a node that must not reach the NPU has no exact host spelling at the
    graph's opset.
    """
    ir_model, plan = export_in_place(_load(model))
    proto = ir.serde.serialize_model(ir_model)
    return proto, plan


def export_in_place(ir_model: ir.Model) -> tuple[ir.Model, dict]:
    """export_for_ascend on an onnx_ir.Model it rewrites in place, never serialized whole: the
    command line's way, so that weights in external data stay on disk (models over 2 GB)."""
    missing = unloadable(ir_model.graph)
    if missing:
        counted = {op: missing.count(op) for op in dict.fromkeys(missing)}
        listed = ", ".join(f"{op}" + (f" (x{n})" if n > 1 else "") for op, n in counted.items())
        raise CannotLoad(f"onnxruntime-cann 1.24.4 cannot load this graph: no kernel for {listed} "
                         "(onnxruntime training ops are not in its inference build)")
    names, log = Names(ir_model.graph), Log()
    infer_shapes(ir_model)
    _normalize(ir_model, names, log)
    before = graph_copies(ir_model.graph, place(ir_model))

    group_norm_swish_grad.rewrite(ir_model, names, log)
    group_norm_swish.rewrite(ir_model, names, log)
    average_pool.rewrite(ir_model, names, log)
    conv_pads.rewrite(ir_model, names, log)
    _normalize(ir_model, names, log)
    copies.rewrite(ir_model, names, log)
    infer_shapes(ir_model)
    broadcast.rewrite(ir_model, names, log)
    RemoveUnusedNodesPass()(ir_model)  # initializers a rewrite left unread
    ir_model.graph.sort()

    placements = place(ir_model)
    after = graph_copies(ir_model.graph, placements)
    ir_model.ir_version = IR_VERSION
    _drop_unused_functions(ir_model)
    plan = {
        "provider_options": dict(PROVIDER_OPTIONS),
        "session_options": dict(SESSION_OPTIONS),
        "placement": [p.to_dict() for p in placements],
        "host_device_copies": after.nodes,
        "host_device_copies_before": before.nodes,
        "copies": after.to_dict(),
        "copies_before": before.to_dict(),
        "copies_counted": ("Memcpy nodes onnxruntime inserts: one per tensor crossing between host and NPU, "
                           "whatever its number of readers; graph inputs only when both sides read them; "
                           "graph inputs only the NPU reads and graph outputs the NPU computes are copied by "
                           "the session without a node (counted apart in 'copies')"),
        "rewrites": log.entries,
        "npu_nodes": sum(p.device == "npu" for p in placements),
        "host_nodes": sum(p.device == "host" for p in placements),
    }
    return ir_model, plan


def _drop_unused_functions(model: ir.Model) -> None:
    """A function body of ours that no node calls any more (every such node inlined) goes."""
    used = {(n.domain, n.op_type) for n in model.graph}
    for key, function in list(model.functions.items()):
        if function.domain == DOMAIN and (function.domain, function.name) not in used:
            del model.functions[key]
    if not any(n.domain == DOMAIN for n in model.graph) and not any(f.domain == DOMAIN for f in model.functions.values()):
        model.opset_imports.pop(DOMAIN, None)
