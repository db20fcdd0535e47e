"""models/export/scatter.py: ScatterND(reduction="add") respelled as ScatterElements gives numpy's
np.add.at, run after run, at 2 intra-op threads (onnxruntime's own ScatterND add races there)."""

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from ascend_grad.models.export.scatter import respell_scatter_nd_add

CASES = {
    # name: (data shape, indices shape (last: depth k), index range) - duplicates everywhere
    "upsampling backward": ((32, 32, 2, 128), (64, 64, 2), 32),  # the spelling that raced: 2 of 300 runs
    "embedding backward": ((20, 48), (300, 1), 20),  # rows of an embedding table, k = 1
    "every axis indexed": ((6, 7), (500, 2), 6),  # k == rank: one element per update
    "negative indices": ((9, 5, 3), (40, 1), -9),  # -9 .. -1, counted from the end
}


def scatter_nd_model(data_shape, indices_shape):
    updates_shape = list(indices_shape[:-1]) + list(data_shape[indices_shape[-1]:])
    graph = helper.make_graph(
        [helper.make_node("ScatterND", ["data", "indices", "updates"], ["out"], reduction="add")], "g",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, data_shape),
         helper.make_tensor_value_info("indices", TensorProto.INT64, indices_shape),
         helper.make_tensor_value_info("updates", TensorProto.FLOAT, updates_shape)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, data_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10), updates_shape


@pytest.mark.parametrize("case", CASES)
def test_respelled_scatter_add_is_np_add_at_every_run(case, rng):
    data_shape, indices_shape, span = CASES[case]
    model, updates_shape = scatter_nd_model(data_shape, indices_shape)
    ir_model = ir.serde.deserialize_model(model)
    assert respell_scatter_nd_add(ir_model.graph) == 1
    respelled = ir.serde.serialize_model(ir_model)
    onnx.checker.check_model(respelled, full_check=True)
    assert "ScatterND" not in {n.op_type for n in respelled.graph.node}

    k = indices_shape[-1]
    low, high = (span, 0) if span < 0 else (0, span)
    indices = rng.integers(low, high, indices_shape)
    if case == "every axis indexed":
        indices[:, 1] = rng.integers(0, data_shape[1], indices_shape[0])
    data = rng.standard_normal(data_shape).astype(np.float32)
    updates = rng.standard_normal(updates_shape).astype(np.float32)
    want = data.astype(np.float64)
    np.add.at(want, tuple(np.moveaxis(indices, -1, 0)[:k]), updates.astype(np.float64))

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(respelled.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {"data": data, "indices": indices, "updates": updates}
    first = session.run(None, feeds)[0]
    assert np.abs(first - want).max() <= 1e-5 * np.abs(want).max()
    for _ in range(150):
        assert np.array_equal(session.run(None, feeds)[0], first)


def test_other_scatters_stay():
    """reduction none (its duplicates are undefined anyway) and an unknown depth are left alone."""
    model, _ = scatter_nd_model((4, 5), (3, 1))
    model.graph.node[0].attribute[0].s = b"none"
    ir_model = ir.serde.deserialize_model(model)
    assert respell_scatter_nd_add(ir_model.graph) == 0
    model, _ = scatter_nd_model((4, 5), (3, 1))
    model.graph.input[1].type.tensor_type.shape.dim[1].dim_param = "k"
    ir_model = ir.serde.deserialize_model(model)
    assert respell_scatter_nd_add(ir_model.graph) == 0
