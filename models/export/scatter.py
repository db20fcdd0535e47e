"""ScatterND with reduction "add", respelled: onnxruntime's CPU kernel splits the updates among its
threads with no care for two updates landing on one element, so with duplicate indices a sum
comes out wrong now and then (microsoft/onnxruntime#23396, #18048; measured here with onnxruntime
1.32 at 2 threads: 2 of 300 runs of an upsampling backward wrong by 36%). Exported training graphs
hold it wherever a decomposition scatters with `index_put(accumulate=True)` (the backward of
indexing, of an embedding).

The same sum through ScatterElements (reduction "add"), which onnxruntime runs deterministically
(0 of 300): the indexed leading axes of `data` flattened into one, each index tuple into its row
number (negative indices counted from the end, as ScatterND allows), every update row scattered
into that row:

    rows = prod(data.shape[:k]);  row = sum_j (i_j mod shape_j) * stride_j;  out[row, :] += update
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx_ir import tape

_TO_END = 2**63 - 1


def respell_scatter_nd_add(graph: ir.Graph) -> int:
    """Replace every ScatterND(reduction="add") of `graph` whose index depth k is known; returns how
    many."""
    done = 0
    for node in list(graph):
        if node.op_type != "ScatterND" or node.domain not in ("", "ai.onnx"):
            continue
        reduction = node.attributes.get("reduction")
        data, indices, updates = node.inputs
        depth = indices.shape[-1] if indices.shape is not None and indices.shape.rank() else None
        if reduction is None or reduction.as_string() != "add" or not isinstance(depth, int):
            continue
        builder = tape.Tape(graph)
        result = _scatter_elements_add(builder, data, indices, updates, depth)
        graph.insert_before(node, builder.nodes)
        result.shape, result.type = node.outputs[0].shape, node.outputs[0].type
        node.outputs[0].replace_all_uses_with(result, replace_graph_outputs=True)
        name = node.outputs[0].name
        graph.remove(node, safe=True)
        result.name = name
        done += 1
    return done


def _ints(builder: tape.Tape, values) -> ir.Value:
    return builder.op("Constant", [], {"value": ir.tensor(np.array(values, np.int64))})


def _concat(builder: tape.Tape, values) -> ir.Value:
    return builder.op("Concat", values, {"axis": 0})


def _product(builder: tape.Tape, sizes) -> ir.Value:
    """[prod(sizes)] (1 for none)."""
    return builder.op("ReduceProd", [_concat(builder, [sizes, _ints(builder, [1])])], {"keepdims": 1})


def _scatter_elements_add(builder: tape.Tape, data, indices, updates, depth: int) -> ir.Value:
    shape = builder.op("Shape", [data])
    lead = builder.op("Slice", [shape, _ints(builder, [0]), _ints(builder, [depth])])  # the indexed axes
    # row-major strides of the indexed axes: stride_j = prod(lead[j + 1:]) (a 1 appended: never an empty product)
    strides = _concat(builder, [_product(builder, builder.op("Slice", [lead, _ints(builder, [j + 1]), _ints(builder, [_TO_END])]))
                                for j in range(depth)])
    wrapped = builder.op("Mod", [indices, lead], {"fmod": 0})  # -1 -> shape_j - 1, as ScatterND reads it
    rows = builder.op("ReduceSum", [builder.op("Mul", [wrapped, strides]), _ints(builder, [-1])], {"keepdims": 0})
    width = _product(builder, builder.op("Slice", [shape, _ints(builder, [depth]), _ints(builder, [_TO_END])]))
    rows_by_width = _concat(builder, [_ints(builder, [-1]), width])
    flat_data = builder.op("Reshape", [data, rows_by_width])
    flat_updates = builder.op("Reshape", [updates, rows_by_width])
    row_per_element = builder.op("Expand", [builder.op("Reshape", [rows, _ints(builder, [-1, 1])]),
                                            builder.op("Shape", [flat_updates])])
    summed = builder.op("ScatterElements", [flat_data, row_per_element, flat_updates], {"axis": 0, "reduction": "add"})
    return builder.op("Reshape", [summed, shape])
