"""Reading an onnx_ir graph the way the fusion rules need: through the noise exporters add.

Exporters wrap the same math in different node spellings: Identity, Cast or CastLike between
float types, Expand of a scalar, a constant given as an initializer, a Constant node, a
ConstantOfShape or a CastLike of either. The helpers here see through those, so the rules can
check the math and not the spelling.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from ascend_grad.graph_passes import _context

FLOAT_TYPES = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.DOUBLE)

# Ops that do not change an elementwise value: a Cast between float types changes only the
# rounding (the fused op computes in float and rounds once), Expand only broadcasts.
_TRANSPARENT = {"Identity", "Cast", "CastLike", "Expand"}


def close(a: float, b: float) -> bool:
    """Two constants of a spelling equal up to the rounding of their float32 storage (an exporter's
    1/M or sqrt(2/pi) written in float32)."""
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=0.0)


def producer(value: ir.Value | None, op_type: str | None = None) -> ir.Node | None:
    """The node computing `value` (in the default domain), if it is `op_type` (when given)."""
    if value is None:
        return None
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return None
    if op_type is not None and node.op_type != op_type:
        return None
    return node


def is_float(value: ir.Value) -> bool:
    return value.dtype is None or value.dtype in FLOAT_TYPES


def _transparent_input(node: ir.Node) -> ir.Value | None:
    if node.op_type == "Identity" or node.op_type == "Expand":
        return node.inputs[0]
    if node.op_type == "Cast":
        to = node.attributes.get_int("to", 0)
        return node.inputs[0] if ir.DataType(to) in FLOAT_TYPES and is_float(node.inputs[0]) else None
    if node.op_type == "CastLike":
        like = node.inputs[1]
        return node.inputs[0] if is_float(like) and is_float(node.inputs[0]) else None
    return None


def strip(value: ir.Value) -> ir.Value:
    """`value` with Identity, float Casts, Expand and multiplications or divisions by 1 peeled off."""
    table = _context.memo("strip")  # (per pass run: a rewrite clears it)
    if table is None:
        return _strip(value)
    if value not in table:
        table[value] = _strip(value)
    return table[value]


def _strip(value: ir.Value) -> ir.Value:
    while True:
        node = producer(value)
        if node is None:
            return value
        if node.op_type in ("Mul", "Div") and _is_one(node.inputs[1]):
            value = node.inputs[0]
            continue
        if node.op_type == "Mul" and _is_one(node.inputs[0]):
            value = node.inputs[1]
            continue
        inner = _transparent_input(node) if node.op_type in _TRANSPARENT else None
        if inner is None:
            return value
        value = inner


def _is_one(value: ir.Value) -> bool:
    """A one-element constant 1: a factor that changes neither values nor shape (a tensor of ones,
    a GroupNorm's fresh gamma say, may broadcast and is a parameter, not noise)."""
    if scalar(value) != 1.0:
        return False
    while constant_array(value) is None and (node := producer(value)) is not None and node.op_type in ("Cast", "CastLike", "Identity"):
        value = node.inputs[0]  # (the constant's own shape: a CastLike's output may not have one yet)
    array = constant_array(value)
    shape = list(array.shape) if array is not None else dims(value)
    return shape is not None and all(isinstance(d, int) for d in shape) and int(np.prod(shape, dtype=np.int64)) == 1


# A constant the proofs read (a "ones" tensor, a shape) is small or activation-sized; a bigger one
# is a weight, which is never read (so weights on disk stay there): it just does not count as one.
MAX_CONSTANT_ELEMENTS = 1 << 24


def constant_array(value: ir.Value | None) -> np.ndarray | None:
    """The value of a constant (initializer or Constant node), as numpy."""
    if value is None:
        return None
    tensor = ir.convenience.get_const_tensor(value)
    if tensor is None or tensor.size > MAX_CONSTANT_ELEMENTS:
        return None
    try:
        return tensor.numpy()
    except Exception:  # external data that cannot be read here
        return None


def scalar(value: ir.Value | None) -> float | None:
    """The number every element of `value` holds, if it is a constant of one repeated number:
    an initializer or Constant (any shape), ConstantOfShape, or those through Cast, CastLike,
    Expand and Identity. Broadcasting one number is all these spellings do."""
    if value is None:
        return None
    table = _context.memo("scalar")
    if table is None:
        return _scalar(value)
    if value not in table:
        table[value] = _scalar(value)
    return table[value]


def _scalar(value: ir.Value) -> float | None:
    array = constant_array(value)
    if array is not None and array.size > 0 and array.dtype.kind in "fiu":
        first = array.flat[0]
        if array.size == 1 or bool(np.all(array == first)):
            return float(first)
        return None
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "ConstantOfShape":
        attr = node.attributes.get("value")
        fill = attr.value.numpy() if attr is not None else np.zeros(1, np.float32)
        return float(fill.flat[0])
    if node.op_type in ("Cast", "CastLike", "Expand", "Identity"):
        return scalar(node.inputs[0])
    return None


def users(value: ir.Value) -> list[ir.Node]:
    """The nodes that read `value` (each once)."""
    seen: list[ir.Node] = []
    for use in value.uses():
        if use.node not in seen:
            seen.append(use.node)
    return seen


def users_through_casts(value: ir.Value) -> list[ir.Node]:
    """The nodes that read `value` directly or through Identity and float Casts (mixed-precision
    graphs read a float16 gradient as float)."""
    found: list[ir.Node] = []
    for node in users(value):
        if node.op_type in ("Identity", "Cast", "CastLike") and strip(node.outputs[0]) is strip(value):
            found.extend(n for n in users_through_casts(node.outputs[0]) if n not in found)
        elif node not in found:
            found.append(node)
    return found


def is_live(value: ir.Value) -> bool:
    """Read by some node or a graph output: a dead value is not worth a fusion."""
    return value.is_graph_output() or len(value.uses()) > 0


def dims(value: ir.Value) -> list[int | str | None] | None:
    """The shape as ints and symbolic names, or None when the rank is unknown."""
    if value.shape is None:
        return None
    out: list[int | str | None] = []
    for d in value.shape:
        if isinstance(d, int):
            out.append(d)
        elif isinstance(d, ir.SymbolicDim) and d.value is not None:
            out.append(d.value)
        else:
            out.append(None)
    return out


def remove_dead_nodes(graph: ir.Graph) -> int:
    """Remove the nodes whose outputs nothing reads (graph outputs are read), in one batch:
    onnx_ir's pass removes node by node at a cost that grows with the graph's outputs, and a
    training graph has one output per parameter."""
    outputs = frozenset(graph.outputs)
    dead = []
    for node in reversed(graph):
        if any(v in outputs or v.uses() for v in node.outputs):
            continue
        if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
            continue  # a node with subgraphs: left to onnx_ir's pass, which looks inside
        for i in range(len(node.inputs)):
            node.replace_input_with(i, None)  # its inputs' producers may now be dead too
        dead.append(node)
    graph.remove(dead)
    return len(dead)
