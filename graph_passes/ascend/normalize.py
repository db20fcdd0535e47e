"""What onnxruntime does to every graph when it loads it, done in OUT itself, so that the nodes of
OUT are the nodes onnxruntime runs and the placement can be compared node by node:

- Constant nodes become initializers (onnxruntime converts them when it builds its graph);
- an ai.onnx function op that neither the CANN nor the CPU execution provider of the wheel has a
  kernel for (Mish, CastLike, ...: FUNCTION_OPS) is replaced by its ONNX function body, as
  onnxruntime's partitioner inlines it;
- every node gets a unique name (onnxruntime reports nodes by name).
All three leave the computation as it is: the same ops on the same values.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir

from ascend_grad.graph_passes.ascend._ir import Log, Names
from ascend_grad.graph_passes.ascend.placement import CannotExport

# (op, since_version) of the ai.onnx function ops the wheel's CPU execution provider has no
# kernel for (its registry, get_all_opkernel_def, against onnx's schemas up to opset 24); CANN has
# none of them either.
FUNCTION_OPS = frozenset({
    ("Bernoulli", 15), ("Bernoulli", 22), ("CastLike", 15), ("CastLike", 19), ("CastLike", 21), ("CastLike", 23),
    ("CastLike", 24), ("CenterCropPad", 18), ("GroupNormalization", 18), ("GroupNormalization", 21),
    ("HardSwish", 14), ("HardSwish", 22), ("Mish", 18), ("Mish", 22), ("NegativeLogLikelihoodLoss", 12),
    ("NegativeLogLikelihoodLoss", 13), ("NegativeLogLikelihoodLoss", 22), ("SequenceMap", 17),
    ("SoftmaxCrossEntropyLoss", 12), ("SoftmaxCrossEntropyLoss", 13), ("Swish", 24),
})


def constants_to_initializers(graph: ir.Graph, log: Log) -> None:
    for node in list(graph):
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.attributes) != 1:
            continue
        attr = next(iter(node.attributes.values()))
        if attr.name != "value" or attr.type != ir.AttributeType.TENSOR:
            continue  # value_float, value_ints, ...: converted below through the tensor they denote
        _to_initializer(graph, node, attr.value, log)
    for node in list(graph):
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            tensor = ir.serde.deserialize_tensor(onnx.numpy_helper.from_array(_constant_array(node)))
            _to_initializer(graph, node, tensor, log)


def _constant_array(node: ir.Node):
    import numpy as np

    attr = next(iter(node.attributes.values()))
    kinds = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64, "value_ints": np.int64}
    if attr.name in kinds:
        return np.array(attr.value, dtype=kinds[attr.name])
    if attr.name in ("value_string", "value_strings"):
        return np.array(attr.value, dtype=object)
    raise CannotExport(f"Constant node {node.name!r}: attribute {attr.name} is not supported")


def _to_initializer(graph: ir.Graph, node: ir.Node, tensor, log: Log) -> None:
    out = node.outputs[0]
    value = ir.Value(name=out.name, type=ir.TensorType(tensor.dtype), shape=ir.Shape(tensor.shape), const_value=tensor)
    out.replace_all_uses_with(value, replace_graph_outputs=True)
    graph.remove(node, safe=True)
    graph.register_initializer(value)  # a graph output too, if the Constant computed one (onnxruntime allows it)
    log.add(node.name, "Constant node -> initializer", "onnxruntime turns Constant nodes into initializers when it loads a graph")


def expand_function_ops(model: ir.Model, names: Names, log: Log) -> None:
    opset = model.opset_imports.get("", 1)
    graph = model.graph
    for node in list(graph):
        if node.domain not in ("", "ai.onnx"):
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, "")
        except onnx.defs.SchemaError:
            continue
        if (node.op_type, schema.since_version) not in FUNCTION_OPS:
            continue
        body = _function_body(schema, node, opset)
        new_nodes = instantiate(body, node, names)
        graph.insert_before(node, new_nodes)
        graph.remove(node, safe=True)
        log.add(node.name, f"{node.op_type}-{schema.since_version} -> its ONNX function body "
                f"({', '.join(n.op_type for n in new_nodes)})",
                "no execution provider of onnxruntime-cann 1.24.4 has a kernel for it: onnxruntime inlines the body itself")


def _function_body(schema: onnx.defs.OpSchema, node: ir.Node, opset: int) -> onnx.FunctionProto:
    if schema.has_function:
        return schema.get_function_with_opset_version(opset) if opset in schema.function_opset_versions \
            else schema.function_body
    proto = ir.serde.serialize_node(node)
    types = []
    for value in node.inputs:
        kind = onnx.TypeProto()
        if value is not None and value.dtype is not None:
            kind.tensor_type.elem_type = value.dtype.value
        types.append(kind.SerializeToString())
    return onnx.FunctionProto.FromString(schema.get_context_dependent_function(proto.SerializeToString(), types))


def instantiate(body: onnx.FunctionProto, node: ir.Node, names: Names) -> list[ir.Node]:
    env: dict[str, ir.Value | None] = {"": None}
    env.update({formal: node.inputs[i] if i < len(node.inputs) else None for i, formal in enumerate(body.input)})
    outputs = {formal: node.outputs[i] for i, formal in enumerate(body.output) if i < len(node.outputs)}
    defaults = {a.name: ir.serde.deserialize_attribute(a) for a in body.attribute_proto}
    made = []
    for proto in body.node:
        attributes = {}
        for attr in proto.attribute:
            if attr.ref_attr_name:
                given = node.attributes.get(attr.ref_attr_name, defaults.get(attr.ref_attr_name))
                if given is not None:
                    attributes[attr.name] = ir.Attr(attr.name, given.type, given.value)
            else:
                attributes[attr.name] = ir.serde.deserialize_attribute(attr)
        new = ir.Node(proto.domain, proto.op_type, [env[name] for name in proto.input], attributes.values(),
                      num_outputs=len(proto.output), name=names(f"{node.name}/{proto.op_type}"))
        for name, value in zip(proto.output, new.outputs):
            if name in outputs:  # the function's output: the node's own value keeps its readers
                final = outputs[name]
                final.replace_all_uses_with(value, replace_graph_outputs=True)
                value.name, value.shape, value.type = final.name, final.shape, final.type
            else:
                value.name = names(f"{node.name}/{name}")
            env[name] = value
        made.append(new)
    return made


def body_misfits(body: onnx.FunctionProto, opset: int) -> list[str]:
    """What of `body` is not valid ai.onnx at `opset` (its nodes checked against that opset's
    schemas: an attribute or input the op did not have yet), empty when it can be inlined there."""
    context = onnx.checker.C.CheckerContext()
    context.ir_version, context.opset_imports = onnx.IR_VERSION, {"": opset}
    problems = []
    for proto in body.node:
        if proto.domain not in ("", "ai.onnx"):
            continue
        node = onnx.NodeProto()
        node.CopyFrom(proto)
        kept = [a for a in node.attribute if not a.ref_attr_name]  # given by the caller: checked with the node
        del node.attribute[:]
        node.attribute.extend(kept)
        try:
            onnx.checker.check_node(node, context, onnx.checker.C.LexicalScopeContext())
        except onnx.checker.ValidationError as error:
            problems.append(f"{proto.op_type}: {str(error).splitlines()[0]}")
    return problems


def name_nodes(graph: ir.Graph, names: Names) -> None:
    seen = set()
    for i, node in enumerate(graph):
        if not node.name or node.name in seen:
            node.name = names(f"{node.op_type}_{i}")
        seen.add(node.name)
