"""onnxruntime's float16 fallback, done in OUT itself.

After partitioning, a node that reads float16 and that no execution provider took (CANN has no
kernel for it and the CPU EP has no float16 one: Sigmoid, ReduceMean, Pow, ...) is run on the host
in float: onnxruntime's InsertCastTransformer (insert_cast_transformer.cc, mandatory, also with
every optimization disabled) casts its float16 inputs to float and its outputs back, first also
moving "isolated" float16 host nodes between two such nodes to float, and then removes the Cast
pairs that cancel (RemoveDuplicateCastTransformer, which runs on every graph). Done here with the
same rules, OUT holds the Casts onnxruntime would add and none that it would remove, so onnxruntime
changes nothing and the plan's placement and copies are those of the graph it runs. The numbers
are onnxruntime's own: the same casts, at the same places.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir

from ascend_grad.graph_passes.ascend import kernel_table
from ascend_grad.graph_passes.ascend._ir import Log, Names, make_node
from ascend_grad.graph_passes.ascend.placement import HOST, place_node

F16, F32 = ir.DataType.FLOAT16, ir.DataType.FLOAT


def _is_f16(value: ir.Value | None) -> bool:
    return value is not None and value.dtype == F16


def _type_strs(schema: onnx.defs.OpSchema, count: int, formals) -> list[tuple[str, str]]:
    found = []
    for i in range(count):
        if not formals:
            break
        formal = formals[min(i, len(formals) - 1)]
        found.append((formal.type_str, formal.name))
    return found


def cpu_takes_float16(node: ir.Node, opset: int) -> bool:
    """Whether the wheel's CPU EP has a kernel for this node as it is typed (float16 included)."""
    if node.domain not in ("", "ai.onnx"):
        return True  # our library registers every dtype for the CPU EP; contrib ops: as they come
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return False
    halves = set()
    for values, formals in ((node.inputs, schema.inputs), (node.outputs, schema.outputs)):
        for value, (type_str, name) in zip(values, _type_strs(schema, len(values), formals)):
            if _is_f16(value):
                halves.add((type_str, name))
    for op, first, last, names in kernel_table.CPU_FLOAT16_KERNELS:
        if op == node.op_type and kernel_table.version_matches(first, last, schema.since_version):
            if all(t in names or n in names for t, n in halves):
                return True
    return False


def _unassigned(graph: ir.Graph, opset: int) -> set[ir.Node]:
    left = set()
    for node in graph:
        if not any(_is_f16(v) for v in node.inputs):
            continue
        if place_node(node, opset).device == HOST and not cpu_takes_float16(node, opset):
            left.add(node)
    return left


def _isolated(node: ir.Node, unassigned: set[ir.Node], graph_outputs: set[ir.Value]) -> bool:
    """insert_cast_transformer.cc IsIsolatedFp16Node, as written (its output check stops at the
    first float16 output edge, which is then enough)."""
    if node in unassigned or not any(v is not None and v.producer() is not None for v in node.inputs):
        return False
    if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
        return False
    if any(v in graph_outputs for v in node.outputs):
        return False
    halves = [v for v in node.inputs if _is_f16(v)]
    if not halves:
        return False
    for value in halves:
        producer = value.producer()
        if producer is None or producer not in unassigned:
            return False
    return any(_is_f16(v) and v.uses() for v in node.outputs)


def apply(model: ir.Model, names: Names, log: Log) -> None:
    graph = model.graph
    opset = model.opset_imports.get("", 1)
    unassigned = _unassigned(graph, opset)
    outputs = set(graph.outputs)
    for node in list(graph):  # graph order, each decision seeing the ones before (as onnxruntime's loop)
        if node not in unassigned and place_node(node, opset).device == HOST and _isolated(node, unassigned, outputs):
            unassigned.add(node)
    casts_of: dict[ir.Value, ir.Value] = {}
    for node in list(graph):
        if node not in unassigned or not any(_is_f16(v) for v in node.inputs):
            continue
        for i, value in enumerate(node.inputs):
            if not _is_f16(value):
                continue
            if value not in casts_of:
                cast = make_node(names, "Cast", [value], {"to": F32}, base=f"to_float_{value.name}")
                cast.outputs[0].dtype, cast.outputs[0].shape = F32, value.shape
                graph.insert_before(node, cast)
                casts_of[value] = cast.outputs[0]
            node.replace_input_with(i, casts_of[value])
        _outputs_in_float(graph, node, names)
        log.add(node.name, f"{node.op_type} computed in float (float16 inputs cast to float, float16 outputs cast back)",
                "neither CANN nor the CPU execution provider has a float16 kernel for it: onnxruntime would insert "
                "these Casts itself (InsertCastTransformer)")
    while remove_duplicate_casts(graph, log):
        pass


def _outputs_in_float(graph: ir.Graph, node: ir.Node, names: Names) -> None:
    """The node writes float where it wrote float16, and a Cast back to float16 takes its place
    (onnx_ir fixes a node's outputs when it is made: the node is made again)."""
    again = ir.Node(node.domain, node.op_type, list(node.inputs), list(node.attributes.values()),
                    num_outputs=len(node.outputs), name=node.name, overload=node.overload, version=node.version)
    graph.insert_before(node, again)
    backs = []
    for old, new in zip(node.outputs, again.outputs):
        if _is_f16(old):
            new.name, new.type, new.shape = names(f"{old.name}_in_float"), ir.TensorType(F32), old.shape
            back = make_node(names, "Cast", [new], {"to": F16}, base=f"{old.name}_back_to_float16")
            old.replace_all_uses_with(back.outputs[0], replace_graph_outputs=True)
            back.outputs[0].name, back.outputs[0].type, back.outputs[0].shape = old.name, old.type, old.shape
            backs.append(back)
        else:
            old.replace_all_uses_with(new, replace_graph_outputs=True)
            new.name, new.type, new.shape = old.name, old.type, old.shape
    for i in range(len(node.inputs)):
        node.replace_input_with(i, None)
    graph.remove(node)
    for back in reversed(backs):
        graph.insert_after(again, back)


_GROUPS = {ir.DataType.BOOL: 0, ir.DataType.FLOAT: 2, ir.DataType.FLOAT16: 2, ir.DataType.BFLOAT16: 2,
           ir.DataType.DOUBLE: 2}
_GROUPS.update({t: 1 for t in (ir.DataType.INT8, ir.DataType.INT16, ir.DataType.INT32, ir.DataType.INT64,
                               ir.DataType.UINT8, ir.DataType.UINT16, ir.DataType.UINT32, ir.DataType.UINT64)})


def remove_duplicate_casts(graph: ir.Graph, log: Log) -> bool:
    """RemoveDuplicateCastTransformer's rules, one pass in graph order; True if it changed anything."""
    outputs = set(graph.outputs)
    changed = False
    for node in list(graph):
        if node.graph is None or node.op_type != "Cast" or node.domain not in ("", "ai.onnx"):
            continue
        src, dst = node.inputs[0].dtype, node.outputs[0].dtype
        if src not in _GROUPS or dst not in _GROUPS:
            continue
        lossy = _GROUPS[src] > _GROUPS[dst]
        edges = list(node.outputs[0].uses())
        remove, keep, inconsistent = [], [], False
        for user, _slot in edges:
            if user.op_type != "Cast" or user.domain not in ("", "ai.onnx"):
                continue
            src1, dst1 = user.inputs[0].dtype, user.outputs[0].dtype
            if src1 not in _GROUPS or dst1 not in _GROUPS or (lossy and _GROUPS[dst1] > _GROUPS[src1]):
                inconsistent = True
                break
            if user.outputs[0] not in outputs and src == dst1:
                remove.append(user)
            else:
                keep.append(user)
        if inconsistent:
            continue
        for user in dict.fromkeys(remove):
            user.outputs[0].replace_all_uses_with(node.inputs[0])
            user.replace_input_with(0, None)
            graph.remove(user)
            log.add(user.name, "Cast removed (it undoes the Cast before it)",
                    "onnxruntime's RemoveDuplicateCastTransformer removes it in every session")
            changed = True
        if edges and len(remove) + len(keep) == len(edges) and node.outputs[0] not in outputs:
            for user in keep:
                user.replace_input_with(0, node.inputs[0])
            node.replace_input_with(0, None)
            graph.remove(node)
            log.add(node.name, "Cast removed (only Casts read it)",
                    "onnxruntime's RemoveDuplicateCastTransformer removes it in every session")
            changed = True
    return changed
