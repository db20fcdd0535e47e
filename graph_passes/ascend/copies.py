"""Fewer host<->device copies: exact respellings that let the CANN EP keep a chain on the NPU.

Candidates (each the same numbers, bit for bit):
- Identity removed (its readers read its input);
- Pow(x, 2) with a constant exponent 2 -> Mul(x, x): onnxruntime's CPU Pow computes x * x for an
  exponent of 2 (element_wise_ops.cc), which is the correctly rounded square, as Mul is; CANN has
  Mul, not Pow;
- Reshape, Squeeze or Unsqueeze whose static output shape is 2-D (a, b) with a the product of the
  input's first k dimensions -> Flatten(axis=k): the same row-major data, and CANN has Flatten-13
  (opset 13-20), not Reshape-19/Squeeze/Unsqueeze.
A candidate is applied only where the count of Memcpy nodes (placement.count_copies, onnxruntime's
rule) goes down: all candidates are tried together, then each is dropped again wherever dropping
it costs no copy; Identity removals are kept whenever they cost none (a node less).
"""

from __future__ import annotations

import math

import onnx_ir as ir

from ascend_grad.graph_passes.ascend._ir import Log, Names, static_shape
from ascend_grad.graph_passes.ascend.placement import NPU, FlowNode, Placement, count_copies, place_node

WHY = "fewer host<->device copies: {before} -> {after} Memcpy nodes with the respellings kept"


def _flatten_axis(value: ir.Value, out: ir.Value) -> int | None:
    src, dst = static_shape(value), static_shape(out)
    if src is None or dst is None or len(dst) != 2:
        return None
    for k in range(len(src) + 1):
        if math.prod(src[:k]) == dst[0] and math.prod(src[k:]) == dst[1]:
            return k
    return None


def _scalar(value: ir.Value | None):
    if value is None or value.const_value is None:
        return None
    array = value.const_value.numpy()
    return float(array.reshape(())) if array.size == 1 else None


def _candidates(graph: ir.Graph):
    """(node, kind, detail) for every respelling that would be exact."""
    found = []
    outputs = set(graph.outputs)
    for node in graph:
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "Identity" and node.outputs[0] not in outputs and node.inputs[0] is not None:
            found.append((node, "identity", None))
        elif node.op_type == "Pow" and _scalar(node.inputs[1]) == 2.0 and node.inputs[0].dtype is not None \
                and node.inputs[0].dtype.is_floating_point():
            found.append((node, "square", None))
        elif node.op_type in ("Reshape", "Squeeze", "Unsqueeze"):
            axis = _flatten_axis(node.inputs[0], node.outputs[0])
            if axis is not None:
                found.append((node, "flatten", axis))
    return found


def _probe(op_type: str, dtype: ir.DataType, opset: int, inputs: int, attributes=None) -> Placement:
    """Where a node of this op and dtype would run (a detached node: the graph is not touched)."""
    values = [ir.Value(name=f"p{i}", type=ir.TensorType(dtype)) for i in range(inputs)]
    probe = ir.node(op_type, values, attributes or {})
    probe.outputs[0].dtype = dtype
    return place_node(probe, opset)


def _flow(graph: ir.Graph, placements: dict[ir.Node, Placement], chosen: dict[ir.Node, tuple]) -> list[FlowNode]:
    alias = {}
    for node, (kind, _, _) in chosen.items():
        if kind == "identity":
            alias[node.outputs[0].name] = node.inputs[0].name

    def name(value):
        if value is None:
            return ""
        n = value.name
        while n in alias:
            n = alias[n]
        return n

    nodes = []
    for node in graph:
        choice = chosen.get(node)
        if choice is not None and choice[0] == "identity":
            continue
        device = choice[2].device if choice is not None else placements[node].device
        inputs = [name(v) for v in node.inputs]
        if choice is not None and choice[0] == "square":
            inputs = [inputs[0], inputs[0]]
        elif choice is not None and choice[0] == "flatten":
            inputs = inputs[:1]
        host = () if choice is not None else placements[node].host_inputs
        nodes.append(FlowNode(device, tuple(inputs), tuple(v.name for v in node.outputs), host))
    return nodes


def rewrite(model: ir.Model, names: Names, log: Log) -> tuple[int, int]:
    """Apply the respellings that pay; returns the Memcpy node count before and after."""
    graph = model.graph
    opset = model.opset_imports.get("", 1)
    placements = {node: place_node(node, opset) for node in graph}
    ins, outs = [v.name for v in graph.inputs], [v.name for v in graph.outputs]

    def copies(chosen):
        return count_copies(_flow(graph, placements, chosen), ins, graph.initializers, outs).nodes

    options = {}
    for node, kind, detail in _candidates(graph):
        dtype = node.inputs[0].dtype
        if kind == "identity":
            where = placements[node]
        elif kind == "square":
            where = _probe("Mul", dtype, opset, 2)
        else:
            where = _probe("Flatten", dtype, opset, 1, {"axis": detail})
        if kind == "identity" or (where.device == NPU and placements[node].device != NPU):
            options[node] = (kind, detail, where)
    before = copies({})
    chosen = dict(options)
    for node in list(chosen):  # drop what does not pay, respellings first
        if chosen[node][0] == "identity":
            continue
        trial = {k: v for k, v in chosen.items() if k is not node}
        if copies(trial) <= copies(chosen):
            chosen = trial
    for node in list(chosen):
        trial = {k: v for k, v in chosen.items() if k is not node}
        if copies(trial) < copies(chosen):
            chosen = trial
    after = copies(chosen)
    if after > before:
        chosen, after = {}, before
    for node, (kind, detail, _) in chosen.items():
        _apply(graph, node, kind, detail, names)
        what = {"identity": "Identity removed", "square": "Pow(x, 2) -> Mul(x, x)",
                "flatten": f"{node.op_type} -> Flatten(axis={detail})"}[kind]
        log.add(node.name, what, WHY.format(before=before, after=after))
    return before, after


def _apply(graph: ir.Graph, node: ir.Node, kind: str, detail, names: Names) -> None:
    if kind == "identity":
        node.outputs[0].replace_all_uses_with(node.inputs[0])
        node.replace_input_with(0, None)
        graph.remove(node)
        return
    x = node.inputs[0]
    if kind == "square":
        new = ir.node("Mul", [x, x], name=node.name)
    else:
        new = ir.node("Flatten", [x], {"axis": detail}, name=node.name)
    out = node.outputs[0]
    new.outputs[0].dtype, new.outputs[0].shape = out.dtype, out.shape
    graph.insert_before(node, new)
    out.replace_all_uses_with(new.outputs[0], replace_graph_outputs=True)
    new.outputs[0].name = out.name
    for i in range(len(node.inputs)):
        node.replace_input_with(i, None)
    graph.remove(node)
