"""GroupNormSwishGrad nodes made right for aclnnGroupNormSwishGrad, or kept off the NPU.

- C/G rounded up to 8 (float) or 16 (float16, bfloat16) over 4000 (aclnn's limit), or C unknown:
  the node is replaced by its function body (ai.onnx ops, the op's own definition), so no
  GroupNormSwishGrad reaches the NPU; its ops are placed one by one like any others.
- data_format "NHWC" (a CPU extension; aclnn takes (N, C, *spatial) only): dy and x are transposed
  to channels-first, the node computes NCHW, dx is transposed back. A transpose moves values and
  changes none: the same numbers.
- more than one dtype (aclnn wants one for all nine tensors; the library's CANN kernels are
  registered for one-dtype nodes only): every input is cast to float and each output back to its
  dtype. Widening to float is exact, the kernels compute in float anyway, and each output is
  rounded once to its dtype, as the CPU kernel does.
"""

from __future__ import annotations

import onnx_ir as ir

from ascend_grad import DOMAIN

from ascend_grad.graph_passes.ascend._ir import FLOAT, Log, Names, cast, make_node
from ascend_grad.graph_passes.ascend.placement import CannotExport
from ascend_grad.ops import group_norm_swish_grad as op

OP_TYPE = op.OP_TYPE
LIMIT = 4000


def channels(node: ir.Node, channel_axis: int) -> int | None:
    x = node.inputs[3]
    if x is not None and x.shape is not None and len(x.shape) >= 2 and isinstance(x.shape[channel_axis], int):
        return x.shape[channel_axis]
    for param in node.inputs[4:6]:
        if param is not None and param.shape is not None and len(param.shape) == 1 and isinstance(param.shape[0], int):
            return param.shape[0]
    return None


def over_limit(group_size: int, dtype: ir.DataType) -> bool:
    """aclnn's rule: C/G rounded up to 8 elements for float, 16 for the half types, at most 4000."""
    unit = 8 if dtype == FLOAT else 16
    return -(-group_size // unit) * unit > LIMIT


def to_nchw(graph: ir.Graph, node: ir.Node, names: Names, data_in: tuple[int, ...], data_out: tuple[int, ...]) -> bool:
    """Transpose the channels-last inputs `data_in` to channels-first and the outputs `data_out`
    back; the node becomes NCHW. False if a rank is unknown."""
    rank = next((len(node.inputs[i].shape) for i in data_in if node.inputs[i].shape is not None), None)
    if rank is None:
        return False
    forward = [0, rank - 1, *range(1, rank - 1)]
    back = [0, *range(2, rank), 1]
    for i in data_in:
        value = node.inputs[i]
        t = make_node(names, "Transpose", [value], {"perm": forward}, base=f"{node.name}/to_nchw")
        t.outputs[0].dtype = value.dtype
        if value.shape is not None:
            t.outputs[0].shape = ir.Shape([value.shape[p] for p in forward])
        graph.insert_before(node, t)
        node.replace_input_with(i, t.outputs[0])
    node.attributes["data_format"] = ir.AttrString("data_format", "NCHW")  # before _through makes the node again
    for i in data_out:
        _through(graph, current(node), i, lambda v: make_node(names, "Transpose", [v], {"perm": back}, base=f"{node.name}/to_nhwc"),
                 names, shape_map=lambda s: ir.Shape([s[p] for p in forward]) if s is not None else None)
    return True


def _through(graph: ir.Graph, node: ir.Node, index: int, make, names: Names, dtype=None, shape_map=None) -> None:
    """Route output `index` of `node` through a new node (`make(value)`): the readers, graph
    outputs included, read the new node's output, which takes the old value's name."""
    out = node.outputs[index]
    if out is None or (not out.uses() and not out.is_graph_output()):
        return
    fresh = ir.Value(name=names(f"{out.name}_pre"), type=ir.TensorType(dtype or out.dtype) if (dtype or out.dtype) else None,
                     shape=shape_map(out.shape) if shape_map else out.shape)
    after = make(fresh)
    result = after.outputs[0]
    out.replace_all_uses_with(result, replace_graph_outputs=True)
    old_name, old_type, old_shape = out.name, out.type, out.shape
    _rebind_output(graph, node, index, fresh)
    result.name, result.type, result.shape = old_name, old_type, old_shape
    graph.insert_after(current(node), after)  # the node was made again by _rebind_output


def _rebind_output(graph: ir.Graph, node: ir.Node, index: int, fresh: ir.Value) -> None:
    """Make the node write `fresh` as output `index` (its readers were moved already): the node is
    made again, since onnx_ir fixes a node's outputs when it is made."""
    again = ir.Node(node.domain, node.op_type, list(node.inputs), list(node.attributes.values()),
                    num_outputs=len(node.outputs), name=node.name, overload=node.overload, version=node.version)
    graph.insert_before(node, again)
    for i, (old, new) in enumerate(zip(node.outputs, again.outputs)):
        source = fresh if i == index else old
        new.name, new.type, new.shape = source.name, source.type, source.shape
        readers = fresh if i == index else old
        readers.replace_all_uses_with(new, replace_graph_outputs=True)
    for i in range(len(node.inputs)):
        node.replace_input_with(i, None)
    graph.remove(node)
    node.__dict__["_ascend_replaced_by"] = again


def current(node: ir.Node) -> ir.Node:
    """The node that now stands for `node` (after _rebind_output made it again)."""
    while "_ascend_replaced_by" in node.__dict__:
        node = node.__dict__["_ascend_replaced_by"]
    return node


def widen_to_float(graph: ir.Graph, node: ir.Node, names: Names, inputs, outputs) -> ir.Node:
    """Cast the listed inputs that are not float to float, and route the listed outputs back to
    their dtypes; returns the node (made again if an output changed)."""
    for i in inputs:
        value = node.inputs[i]
        if value is not None and value.dtype not in (None, FLOAT):
            c = cast(names, value, FLOAT, base=f"{node.name}/to_float")
            graph.insert_before(node, c)
            node.replace_input_with(i, c.outputs[0])
    for i in outputs:
        now = current(node)
        out = now.outputs[i] if i < len(now.outputs) else None
        if out is None or out.dtype in (None, FLOAT) or not out.name:
            continue
        target = out.dtype
        _through(graph, now, i, lambda v, t=target: cast(names, v, t, base=f"{node.name}/back"), names, dtype=FLOAT)
    return current(node)


def inline_body(model: ir.Model, node: ir.Node, names: Names, why: str) -> list[ir.Node]:
    """The node replaced by its function body, which must be valid ai.onnx at the graph's opset
    (written at opset 18, it is from 15 on: Shape's start/end, CastLike); else CannotExport."""
    from ascend_grad.graph_passes.ascend.normalize import body_misfits, instantiate

    graph, body = model.graph, op.function_proto()
    opset = model.opset_imports.get("", 1)
    misfits = body_misfits(body, opset)
    if misfits:
        raise CannotExport(f"{OP_TYPE} node {node.name!r} must not reach the NPU ({why}), and its decomposition is not "
                           f"valid at this graph's ai.onnx opset {opset} ({misfits[0]}): convert the graph to opset 15 "
                           "or later first (onnx.version_converter)")
    made = instantiate(body, node, names)
    graph.insert_before(node, made)
    for i in range(len(node.inputs)):
        node.replace_input_with(i, None)
    graph.remove(node, safe=True)
    return made


def rewrite(model: ir.Model, names: Names, log: Log) -> None:
    graph = model.graph
    for node in [n for n in graph if n.domain == DOMAIN and n.op_type == OP_TYPE]:
        layout = node.attributes.get_string("data_format", "NCHW")
        groups = node.attributes.get_int("num_groups", 0)
        dtypes = {v.dtype for v in node.inputs if v is not None}
        target = next(iter(dtypes)) if len(dtypes) == 1 else FLOAT
        C = channels(node, 1 if layout == "NCHW" else -1)
        if C is None or groups <= 0 or over_limit(C // groups, target):
            why = ("C is not known statically, so aclnn's limit (C/G rounded up <= 4000) cannot be checked"
                   if C is None or groups <= 0 else
                   f"C/G = {C // groups} rounds up to more than {LIMIT} for {target.name.lower()}: "
                   "aclnnGroupNormSwishGrad refuses it")
            made = inline_body(model, node, names, why)
            log.add(node.name, f"replaced by its function body ({len(made)} ai.onnx nodes)", why)
            continue
        if layout == "NHWC":
            if to_nchw(graph, node, names, data_in=(0, 3), data_out=(0,)):
                node = current(node)
                log.add(node.name, "NHWC -> Transpose(dy, x) to NCHW, the node NCHW, Transpose(dx) back",
                        "aclnnGroupNormSwishGrad takes channels-first tensors only; transposes move values exactly")
        if len(dtypes) > 1:
            listed = ", ".join(f"{v.name} {v.dtype.name.lower()}" for v in node.inputs if v is not None)
            widen_to_float(graph, node, names, inputs=range(6), outputs=range(3))
            log.add(node.name, "every input cast to float, each output cast back to its dtype",
                    f"aclnnGroupNormSwishGrad wants one dtype for all nine tensors ({listed}); "
                    "widening is exact and the kernel computes in float")
