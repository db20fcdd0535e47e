"""Small onnx_ir helpers the Ascend rewrites share: names, shapes, dtypes, inserting nodes, and a
log of what was rewritten."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import ShapeInferencePass

FLOAT = ir.DataType.FLOAT


@dataclass
class Log:
    """The export's `rewrites`: one entry per node changed, with what and why."""

    entries: list[dict] = field(default_factory=list)

    def add(self, node: str, what: str, why: str) -> None:
        self.entries.append({"node": node, "what": what, "why": why})


def infer_shapes(model: ir.Model) -> None:
    """onnx's shape and type inference, ours included (importing ops registers the schemas)."""
    import ascend_grad.ops  # noqa: F401

    ShapeInferencePass(check_type=False, strict_mode=False, data_prop=True)(model)


def static_shape(value: ir.Value | None) -> tuple[int, ...] | None:
    """The shape as ints, or None if the rank or any dimension is unknown."""
    if value is None or value.shape is None:
        return None
    dims = tuple(value.shape)
    if not all(isinstance(d, int) for d in dims):
        return None
    return dims


def same_dims(a: ir.Value, b: ir.Value) -> bool:
    """Provably the same shape: same rank and each dimension the same int or the same symbol."""
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return False
    for x, y in zip(a.shape, b.shape):
        if isinstance(x, int) and isinstance(y, int):
            if x != y:
                return False
        elif isinstance(x, ir.SymbolicDim) and isinstance(y, ir.SymbolicDim):
            if x.value is None or x.value != y.value:
                return False
        else:
            return False
    return True


def ints(node: ir.Node, name: str, default: list[int]) -> list[int]:
    attr = node.attributes.get(name)
    return list(attr.value) if attr is not None else list(default)


def resolved_pads(node: ir.Node, size: list[int] | None, kernel: list[int]) -> list[int] | None:
    """The pads onnxruntime uses for a Conv or pool (begins, then ends), auto_pad SAME_* resolved
    from the input's spatial size as its ConvAttributes and PoolAttributes do (they agree where
    dilations are 1, as for every pool CANN has); None when that size is needed and not static."""
    spatial = len(kernel)
    auto = node.attributes.get_string("auto_pad", "NOTSET")
    if auto == "VALID":
        return [0] * (2 * spatial)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        return ints(node, "pads", [0] * (2 * spatial))
    if size is None:
        return None
    strides, dilations = ints(node, "strides", [1] * spatial), ints(node, "dilations", [1] * spatial)
    begins, ends = [], []
    for n, k, s, d in zip(size, kernel, strides, dilations):
        out = (n + s - 1) // s
        total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
        begin = total // 2 if auto == "SAME_UPPER" else (total + 1) // 2
        begins.append(begin)
        ends.append(total - begin)
    return begins + ends


class Names:
    """Fresh node and value names for one graph."""

    def __init__(self, graph: ir.Graph):
        self.taken = {n.name for n in graph.all_nodes() if n.name}
        self.taken |= {v.name for n in graph.all_nodes() for v in (*n.inputs, *n.outputs) if v is not None and v.name}
        self.taken |= {v.name for v in (*graph.inputs, *graph.outputs, *graph.initializers.values()) if v.name}

    def __call__(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name


def make_node(names: Names, op_type: str, inputs, attributes=None, *, base: str, domain: str = "",
              num_outputs: int = 1) -> ir.Node:
    node = ir.node(op_type, inputs, attributes or {}, domain=domain, num_outputs=num_outputs, name=names(base))
    for i, out in enumerate(node.outputs):
        out.name = names(f"{node.name}_out{i}" if num_outputs > 1 else f"{node.name}_out")
    return node


def constant(graph: ir.Graph, names: Names, array: np.ndarray, base: str) -> ir.Value:
    """A new initializer holding `array`."""
    value = ir.Value(name=names(base), shape=ir.Shape(array.shape), type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
                     const_value=ir.tensor(array))
    graph.register_initializer(value)
    return value


def cast(names: Names, value: ir.Value, to: ir.DataType, base: str) -> ir.Node:
    node = make_node(names, "Cast", [value], {"to": to}, base=base)
    node.outputs[0].dtype = to
    node.outputs[0].shape = value.shape
    return node


def dtype_label(value: ir.Value | None) -> str:
    return "-" if value is None or value.dtype is None else value.dtype.name.lower()
