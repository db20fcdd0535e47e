"""No Add/Sub/Mul/Div on the NPU with BOTH inputs broadcast: onnxruntime-cann 1.24.4 computes B op B
for them.

Its BinaryElementwise::Prepare (cann/math/binary_elementwise_ops.cc) broadcasts each input whose
shape differs from the output's (rank included) into a scratch buffer that is freed at the end of
its `if` block, before the op runs; the second scratch buffer reuses the first one's memory, so
the op reads B's broadcast as A. One broadcast input alone is read correctly (nothing reuses its
freed buffer before the op runs).

Rewrite, for every such node the CANN EP takes (placement): one input is brought to the output's
shape first, so only the other broadcasts.
- static output shape, the input a constant: the initializer is replaced by its broadcast copy;
- static output shape: the input is multiplied by a constant of ones of the output's shape, on the
  NPU (x * 1 == x exactly in IEEE arithmetic, -0, inf and NaN included; that Mul broadcasts only x);
- output shape not static (a symbolic batch, say), handled conservatively: the input is
  Expand(a, Shape(b)), which is the output's shape whatever the dimensions turn out to be (Expand
  broadcasts exactly as the op does), computed on the host.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ascend_grad.graph_passes.ascend._ir import Log, Names, constant, make_node, same_dims, static_shape
from ascend_grad.graph_passes.ascend.placement import NPU, place_node

BINARY = ("Add", "Sub", "Mul", "Div")


def both_broadcast(node: ir.Node) -> bool:
    """Both inputs may differ in shape from the output (True unless one provably equals it)."""
    a, b = node.inputs[0], node.inputs[1]
    out = node.outputs[0]
    return not (same_dims(a, out) or same_dims(b, out) or _expanded_to(a, b) or _expanded_to(b, a))


def _expanded_to(value: ir.Value, other: ir.Value) -> bool:
    """value = Expand(x, Shape(other)): the output's shape by construction (the dynamic rewrite)."""
    node = value.producer()
    if node is None or node.op_type != "Expand" or node.domain not in ("", "ai.onnx"):
        return False
    shape = node.inputs[1].producer() if node.inputs[1] is not None else None
    return shape is not None and shape.op_type == "Shape" and shape.inputs[0] is other and not shape.attributes


def rewrite(model: ir.Model, names: Names, log: Log) -> None:
    graph = model.graph
    opset = model.opset_imports.get("", 1)
    for node in list(graph):
        if node.domain not in ("", "ai.onnx") or node.op_type not in BINARY:
            continue
        if place_node(node, opset).device != NPU or not both_broadcast(node):
            continue
        a, b, out = node.inputs[0], node.inputs[1], node.outputs[0]
        shape = static_shape(out)
        shapes = f"{_dims(a)} {node.op_type} {_dims(b)} -> {_dims(out)}"
        why = ("both inputs broadcast on the NPU: onnxruntime-cann 1.24.4 frees the first scratch buffer before "
               f"the op runs and computes B {node.op_type} B ({shapes})")
        if shape is not None and a.const_value is not None and a.dtype is not None:
            full = np.ascontiguousarray(np.broadcast_to(a.const_value.numpy(), shape))
            node.replace_input_with(0, constant(graph, names, full, base=f"{a.name}_expanded"))
            log.add(node.name, f"constant input {a.name} stored at the output's shape {list(shape)}", why)
        elif shape is not None and a.dtype is not None:
            ones = constant(graph, names, np.ones(shape, dtype=a.dtype.numpy()), base=f"{node.name}/ones")
            mul = make_node(names, "Mul", [a, ones], base=f"{node.name}/expand_a")
            mul.outputs[0].dtype, mul.outputs[0].shape = a.dtype, ir.Shape(shape)
            graph.insert_before(node, mul)
            node.replace_input_with(0, mul.outputs[0])
            log.add(node.name, f"input {a.name} multiplied by ones of the output's shape {list(shape)} (on the NPU)", why)
        else:
            shape_of_b = make_node(names, "Shape", [b], base=f"{node.name}/shape_b")
            expand = make_node(names, "Expand", [a, shape_of_b.outputs[0]], base=f"{node.name}/expand_a")
            expand.outputs[0].dtype, expand.outputs[0].shape = a.dtype, out.shape
            graph.insert_before(node, [shape_of_b, expand])
            node.replace_input_with(0, expand.outputs[0])
            log.add(node.name, f"input {a.name} -> Expand({a.name}, Shape({b.name})) (output shape not static; "
                    "on the host)", why)


def _dims(value: ir.Value) -> str:
    return "?" if value.shape is None else "[" + ",".join(str(d) for d in value.shape) + "]"
