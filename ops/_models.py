"""Putting the op set into models: attach the function bodies a model uses; build one-node models.

A model that holds ascend.grad nodes carries each op's body as a model-local function, so any ONNX
runtime can run it (onnxruntime inlines the body unless the kernel library is registered).
Models are written with ir_version 10: onnxruntime 1.19 reads at most 10.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper

from ascend_grad import DOMAIN, OPSET_VERSION
from ascend_grad.ops import group_norm_swish, group_norm_swish_grad, mish_backward, silu_backward
from ascend_grad.ops._script import stamp_opset

IR_VERSION = 10
DEFAULT_ONNX_OPSET = 18

# The body of each op (MishBackward's depends on the model's dtypes: see function_for_pairs).
BODIES = {m.OP_TYPE: m.function_proto for m in (silu_backward, mish_backward, group_norm_swish_grad, group_norm_swish)}


def _graph_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attr in node.attribute:  # If/Loop/Scan bodies
            for sub in [attr.g] if attr.HasField("g") else attr.graphs:
                yield from _graph_nodes(sub)


def op_nodes(model: onnx.ModelProto) -> Iterator[onnx.NodeProto]:
    """Every ascend.grad node: in the graph, its subgraphs, and the model's other functions."""
    bodies = [_graph_nodes(model.graph)]
    bodies += [f.node for f in model.functions if not _is_ours(f)]
    for nodes in bodies:
        for node in nodes:
            if node.domain == DOMAIN and node.op_type in BODIES:
                yield node


def _is_ours(function: onnx.FunctionProto) -> bool:
    return function.domain == DOMAIN and function.name in BODIES


def onnx_opset(model: onnx.ModelProto) -> int | None:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def _elem_types(model: onnx.ModelProto, names: set[str]) -> dict[str, int]:
    """The element type of each named value, running shape inference only if the graph does not say."""

    def declared(graph: onnx.GraphProto) -> dict[str, int]:
        found = {v.name: v.type.tensor_type.elem_type for v in [*graph.input, *graph.value_info, *graph.output]}
        found.update({t.name: t.data_type for t in graph.initializer})
        return found

    types = declared(model.graph)
    if not names <= {n for n, t in types.items() if t}:
        types.update(declared(onnx.shape_inference.infer_shapes(model).graph))
    return types


def _mish_pairs(model: onnx.ModelProto) -> list[tuple[int, int]]:
    nodes = [n for n in op_nodes(model) if n.op_type == mish_backward.OP_TYPE]
    types = _elem_types(model, {name for n in nodes for name in n.input[:2]})
    return [(types.get(n.input[0], 0), types.get(n.input[1], 0)) for n in nodes]


def _spell_out_defaults(node: onnx.NodeProto) -> None:
    """Write the attributes a node leaves at their defaults: function-attribute defaults are an
    IR 9 feature that not every runtime applies (onnx's ReferenceEvaluator does not)."""
    schema = onnx.defs.get_schema(node.op_type, OPSET_VERSION, DOMAIN)
    present = {a.name for a in node.attribute}
    for name, attr in sorted(schema.attributes.items()):
        if name not in present and attr.default_value.type:
            node.attribute.append(attr.default_value)


def function_bodies(used: set[str], onnx_opset: int, mish_pairs) -> list[onnx.FunctionProto]:
    """The bodies of the ops `used`, importing ai.onnx at `onnx_opset` (MishBackward's chosen for the
    model's (gradOutput, self) dtype pairs)."""
    bodies = []
    for op_type in sorted(used):
        if op_type == mish_backward.OP_TYPE:
            body = mish_backward.function_for_pairs(mish_pairs)
        else:
            body = BODIES[op_type]()
        bodies.append(stamp_opset(body, onnx_opset))
    return bodies


def attach_functions(model):
    """Give `model` (an onnx.ModelProto or onnx_ir.Model; in place, and returned) the function body
    of every ascend.grad op it uses.

    Bodies already there for our ops are replaced, so attaching twice changes nothing. The bodies
    import the model's ai.onnx version (15 or newer; 18 is added when the model has none). Nodes get
    their default attributes written out, so runtimes without function-attribute defaults work too.
    """
    if isinstance(model, ir.Model):
        return _attach_to_ir(model)
    nodes = list(op_nodes(model))
    for node in nodes:
        _spell_out_defaults(node)
    used = {n.op_type for n in nodes}
    if not used:
        return model
    version = onnx_opset(model)
    if version is None:
        version = DEFAULT_ONNX_OPSET
        model.opset_import.append(helper.make_opsetid("", version))
    if not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, OPSET_VERSION))
    keep = [f for f in model.functions if not _is_ours(f)]
    pairs = _mish_pairs(model) if mish_backward.OP_TYPE in used else []
    del model.functions[:]
    model.functions.extend(keep + function_bodies(used, version, pairs))
    return model


def _attach_to_ir(model: ir.Model) -> ir.Model:
    """attach_functions on an onnx_ir model: nothing is serialised, so external weights stay where
    they are (a model over 2 GB is never loaded)."""
    bodies = [model.graph] + [f for f in model.functions.values() if not (f.domain == DOMAIN and f.name in BODIES)]
    nodes = [n for body in bodies for n in (body.all_nodes() if isinstance(body, ir.Graph) else body)
             if n.domain == DOMAIN and n.op_type in BODIES]
    for node in nodes:
        schema = onnx.defs.get_schema(node.op_type, OPSET_VERSION, DOMAIN)
        for name, attr in sorted(schema.attributes.items()):
            if name not in node.attributes and attr.default_value.type:
                node.attributes[name] = ir.serde.deserialize_attribute(attr.default_value)
    used = {n.op_type for n in nodes}
    if not used:
        return model
    version = model.opset_imports.setdefault("", DEFAULT_ONNX_OPSET)
    model.opset_imports.setdefault(DOMAIN, OPSET_VERSION)
    pairs = [tuple(int(v.dtype) if v is not None and v.dtype is not None else 0 for v in n.inputs[:2])
             for n in nodes if n.op_type == mish_backward.OP_TYPE]
    for key in [k for k, f in model.functions.items() if f.domain == DOMAIN and f.name in BODIES]:
        del model.functions[key]
    for body in function_bodies(used, version, pairs):
        function = ir.serde.deserialize_function(body)
        model.functions[function.identifier()] = function
    return model


def _input_value_info(name: str, value) -> onnx.ValueInfoProto:
    if isinstance(value, (np.ndarray, np.generic)):
        value = np.asarray(value)
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
    elem_type, shape = value
    return helper.make_tensor_value_info(name, elem_type, shape)


def make_node_model(
    op_type: str,
    inputs: Mapping[str, np.ndarray | tuple[int, Sequence[int | str | None] | None]],
    outputs: Sequence[str] | None = None,
    onnx_opset: int = DEFAULT_ONNX_OPSET,
    **attributes,
) -> onnx.ModelProto:
    """A model of one ascend.grad node, with its function attached.

    `inputs` maps each input name, in the op's order, to an example array or to (elem_type, shape);
    `outputs` names the outputs ("" leaves an optional one out; default: the schema's names).
    Output types come from the op's shape inference, so a bad combination raises its error here.
    """
    schema = onnx.defs.get_schema(op_type, OPSET_VERSION, DOMAIN)
    if outputs is None:
        outputs = [p.name for p in schema.outputs]
    node = helper.make_node(op_type, list(inputs), list(outputs), domain=DOMAIN, name=op_type, **attributes)
    graph_inputs = [_input_value_info(name, value) for name, value in inputs.items()]
    opsets = [helper.make_opsetid("", onnx_opset), helper.make_opsetid(DOMAIN, OPSET_VERSION)]
    inferred = onnx.shape_inference.infer_node_outputs(
        schema, node, {vi.name: vi.type for vi in graph_inputs}, opset_imports=opsets, ir_version=IR_VERSION
    )
    graph_outputs = [helper.make_value_info(name, inferred[name]) for name in outputs if name]
    graph = helper.make_graph([node], op_type, graph_inputs, graph_outputs)
    model = helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)
    return attach_functions(model)
