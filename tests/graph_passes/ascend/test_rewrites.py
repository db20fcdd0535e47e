"""The Ascend export's rewrites, one small graph each, run on onnxruntime-cann 1.24.4 over the
simulated CANN runtime next to the unexported graph on the CPU kernels: an over-limit
GroupNormSwishGrad (and one exactly at the limit), mixed dtypes, NHWC, and binary ops with both
inputs broadcast (static, constant and symbolic shapes), where the unrewritten graph is also run on
the NPU to show the 1.24.4 bug the rewrite avoids."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ascend_grad.graph_passes.ascend import PROVIDER_OPTIONS, SESSION_OPTIONS, export_for_ascend
from ascend_grad.testing import FLOAT_DTYPES, cast_wrapped, group_norm_feeds, random_array

GNSG = "GroupNormSwishGrad"


def _gnsg(rng, shape, G, T, U, data_format="NCHW"):
    feeds = group_norm_feeds(rng, shape, G, T, U, data_format=data_format)
    return cast_wrapped(GNSG, feeds, ["dx", "dgamma", "dbeta"], num_groups=G, data_format=data_format)


def _mish(rng, T_dy, T_x):
    feeds = {"dy": random_array(rng, (2, 3, 7), T_dy), "x": random_array(rng, (2, 3, 7), T_x, scale=3)}
    return cast_wrapped("MishBackward", feeds, ["dx"])


def _binary(a_shape, b_shape, a_constant=None, op="Add"):
    """y = a op b, both broadcast to the output; a an initializer when a_constant is given."""
    V = helper.make_tensor_value_info
    inputs = [V("b", TensorProto.FLOAT, b_shape)]
    inits = []
    if a_constant is None:
        inputs.insert(0, V("a", TensorProto.FLOAT, a_shape))
    else:
        inits.append(onnx.numpy_helper.from_array(a_constant, "a"))
    # Relu after the op keeps the op's output an NPU-to-NPU value, as in a real graph
    nodes = [helper.make_node(op, ["a", "b"], ["s"], name="both_broadcast"), helper.make_node("Relu", ["s"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "binary", inputs, [V("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _ops(model, op_type):
    return [n for n in model.graph.node if n.op_type == op_type]


def _placed(plan, op_type):
    return [p["device"] for p in plan["placement"] if p["op_type"] == op_type]


def _rewrite(plan, node):
    found = [r for r in plan["rewrites"] if r["node"] == node]
    assert found, f"no rewrite logged for {node}: {plan['rewrites']}"
    return found[0]


def _run(run_plans, cases):
    """[(name, original, feeds)] -> ({name: (model, plan)}, results): each exported and run on the
    simulated NPU, its original run on the CPU with the kernel library."""
    exported = {name: export_for_ascend(original) for name, original, _ in cases}
    results = run_plans([(name, *exported[name], original, feeds) for name, original, feeds in cases], library_for_original=True)
    for name, result in results.items():
        assert result["error"] is None, f"{name}: {result['error']}"
    return exported, results


def _run_as_written(run_plans, cases):
    """[(name, model, feeds)] -> {name: result}: each graph as it was, on the simulated NPU with the
    session options every plan carries, next to itself on the CPU (what the rewrites avoid)."""
    options = {"provider_options": PROVIDER_OPTIONS, "session_options": SESSION_OPTIONS}
    results = run_plans([(f"{name}.as_written", model, options, model, feeds) for name, model, feeds in cases])
    return {name: results[f"{name}.as_written"] for name, _, _ in cases}


def _placement_is_the_plans(result, plan):
    want = {p["node"]: p["device"] for p in plan["placement"]}
    have = {n: ("npu" if prov == "CANNExecutionProvider" else "host") for n, (op, prov) in result["placement"].items()
            if not op.startswith("Memcpy")}
    assert have == want


def test_group_norm_swish_grad_limit_dtypes_and_layout(rng, run_plans, assert_outputs_close):
    cases = [
        ("at_limit", *_gnsg(rng, (2, 4000, 2), 1, np.float32, np.float32)),         # C/G = 4000: accepted
        ("over_limit", *_gnsg(rng, (2, 4008, 2), 1, np.float32, np.float32)),       # 4008
        ("over_limit_half", *_gnsg(rng, (1, 8002, 2), 2, np.float16, np.float16)),  # 4001 rounds up to 4016
        ("mixed", *_gnsg(rng, (2, 6, 5), 3, np.float16, np.float32)),
        ("nhwc", *_gnsg(rng, (2, 3, 4, 6), 3, np.float32, np.float32, data_format="NHWC")),
    ]
    exported, results = _run(run_plans, cases)
    for name, (model, plan) in exported.items():
        onnx.checker.check_model(model, full_check=True)
        _placement_is_the_plans(results[name], plan)
        half = np.float16 if name in ("over_limit_half", "mixed") else None
        assert_outputs_close(results[name]["cann"], results[name]["cpu"], name, computes_in=half)

    model, plan = exported["at_limit"]
    assert _placed(plan, GNSG) == ["npu"] and not [r for r in plan["rewrites"] if r["node"] == GNSG]
    assert results["at_limit"]["report"]["aclnn_calls"]["aclnnGroupNormSwishGrad"] == 3  # at_limit, mixed, nhwc: one each

    for name in ("over_limit", "over_limit_half"):  # no GroupNormSwishGrad left for the NPU to refuse
        model, plan = exported[name]
        assert not _ops(model, GNSG), name
        rewrite = _rewrite(plan, GNSG)
        assert "function body" in rewrite["what"] and "4000" in rewrite["why"], rewrite

    model, plan = exported["mixed"]  # one dtype: every input of the node float, outputs cast back
    (node,) = _ops(model, GNSG)
    assert _placed(plan, GNSG) == ["npu"]
    assert "one dtype" in _rewrite(plan, GNSG)["why"]
    producers = {o: n for n in model.graph.node for o in n.output}
    for name in node.input:  # Casts to float in front of the half inputs
        p = producers.get(name)
        assert p is None or p.op_type != "Cast" or p.attribute[0].i == TensorProto.FLOAT

    model, plan = exported["nhwc"]
    (node,) = _ops(model, GNSG)
    assert helper.get_attribute_value(next(a for a in node.attribute if a.name == "data_format")) == b"NCHW"
    assert _placed(plan, GNSG) == ["npu"] and len(_ops(model, "Transpose")) == 3
    assert "channels-first" in _rewrite(plan, GNSG)["why"]


def test_mish_backward_mixed_dtypes_need_no_rewrite(rng, run_plans, assert_outputs_close):
    """Every (gradOutput, self) pair is one aclnnMishBackward call (the seed's dtype deduction): the
    export leaves the node as it is, no Cast added, and the plan puts it on the NPU."""
    bf16 = FLOAT_DTYPES["bfloat16"]
    cases = [("mish_f16_f32", *_mish(rng, np.float16, np.float32)), ("mish_bf16_f16", *_mish(rng, bf16, np.float16)),
             ("mish_same", *_mish(rng, np.float16, np.float16))]
    exported, results = _run(run_plans, cases)
    for name, original, _ in cases:
        model, plan = exported[name]
        _placement_is_the_plans(results[name], plan)
        assert _placed(plan, "MishBackward") == ["npu"], name
        assert not [r for r in plan["rewrites"] if r["node"] == "MishBackward"], plan["rewrites"]
        assert [n.op_type for n in model.graph.node] == [n.op_type for n in original.graph.node], name
        # mixed pairs compute and return float on both sides: float's bound
        assert_outputs_close(results[name]["cann"], results[name]["cpu"], name,
                             computes_in=np.float16 if name == "mish_same" else None)
    assert results["mish_same"]["report"]["aclnn_calls"]["aclnnMishBackward"] == 3


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_both_inputs_broadcast(rng, run_plans, assert_outputs_close, op):
    """(3, 1) op (1, 4): the rewritten graph on the NPU equals the CPU; the graph as it was does
    not (onnxruntime-cann 1.24.4 computes b op b), which shows the bug is real and avoided."""
    # a in [5, 7], b in [2, 4]: a op b > 0 for every op (the graph ends in a Relu) and never equals
    # b op b, so no seed can make the written graph's error invisible (N(3, 1) for both gave all
    # zeros for Sub with seed 814174072)
    a = rng.uniform(5, 7, (3, 1)).astype(np.float32)
    b = rng.uniform(2, 4, (1, 4)).astype(np.float32)
    cases = [
        (f"static_{op}", _binary([3, 1], [1, 4], op=op), {"a": a, "b": b}),
        (f"constant_{op}", _binary([3, 1], [1, 4], a_constant=a, op=op), {"b": b}),
        (f"symbolic_{op}", _binary(["N", 1], [1, 4], op=op), {"a": a, "b": b}),
    ]
    exported, results = _run(run_plans, cases)
    for name, (model, plan) in exported.items():
        _placement_is_the_plans(results[name], plan)
        assert "computes B" in _rewrite(plan, "both_broadcast")["why"], plan["rewrites"]
        assert _placed(plan, op) == ["npu"] * len(_placed(plan, op)) or name.startswith("symbolic")
        assert_outputs_close(results[name]["cann"], results[name]["cpu"], name)
    assert "Expand" in _rewrite(exported[f"symbolic_{op}"][1], "both_broadcast")["what"]

    # the graph as it was, on the NPU: b op b
    as_was = _run_as_written(run_plans, cases[:1])[cases[0][0]]
    assert as_was["error"] is None, as_was["error"]
    assert as_was["placement"]["both_broadcast"][1] == "CANNExecutionProvider"
    bb = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[op](np.broadcast_to(b, (3, 4)), b)
    np.testing.assert_allclose(as_was["cann"]["y"], np.maximum(bb, 0), rtol=1e-6)
    assert not np.allclose(as_was["cann"]["y"], as_was["cpu"]["y"])


def _chain():
    """MatMul -> Pow(., 2) -> Reshape to 2-D -> MatMul: Pow and Reshape-19 have no CANN kernel at
    opset 20, so as written the chain goes to the host and back twice."""
    V = helper.make_tensor_value_info
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"], name="matmul1"),
        helper.make_node("Pow", ["m1", "two"], ["sq"], name="square"),
        helper.make_node("Reshape", ["sq", "rows"], ["flat"], name="reshape"),
        helper.make_node("MatMul", ["flat", "w2"], ["y"], name="matmul2"),
    ]
    inits = [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]), helper.make_tensor("rows", TensorProto.INT64, [2], [6, 5])]
    graph = helper.make_graph(nodes, "chain", [V("x", TensorProto.FLOAT, [2, 3, 4]), V("w1", TensorProto.FLOAT, [4, 5]),
                                               V("w2", TensorProto.FLOAT, [5, 3])], [V("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)


def test_fewer_copies_where_a_respelling_pays(rng, run_plans, assert_outputs_close):
    model = _chain()
    feeds = {"x": random_array(rng, (2, 3, 4), np.float32), "w1": random_array(rng, (4, 5), np.float32),
             "w2": random_array(rng, (5, 3), np.float32)}
    exported, results = _run(run_plans, [("chain", model, feeds)])
    out, plan = exported["chain"]
    result = results["chain"]
    _placement_is_the_plans(result, plan)
    memcpy = [n for n in result["optimized"].graph.node if n.op_type.startswith("Memcpy")]
    assert len(memcpy) == plan["host_device_copies"] == 0 < plan["host_device_copies_before"]
    assert {p["device"] for p in plan["placement"]} == {"npu"}
    assert [n.op_type for n in out.graph.node] == ["MatMul", "Mul", "Flatten", "MatMul"]
    assert {r["what"] for r in plan["rewrites"]} == {"Pow(x, 2) -> Mul(x, x)", "Reshape -> Flatten(axis=2)"}
    assert_outputs_close(result["cann"], result["cpu"], "chain")
    # exact: the CPU runs of both spellings agree bit for bit
    from ascend_grad.testing import run_onnxruntime

    assert np.array_equal(run_onnxruntime(out, feeds)["y"], run_onnxruntime(model, feeds)["y"])


@pytest.mark.parametrize("opset", [13, 14, 15, 21])
def test_over_limit_decomposed_only_where_its_body_is_valid(rng, opset):
    """The function body (written at opset 18) is valid ai.onnx from opset 15 on; below, the export
    refuses the graph with the reason instead of writing an invalid model."""
    from ascend_grad.graph_passes.ascend import CannotExport
    from ascend_grad.testing import run_onnxruntime

    model, feeds = _gnsg(rng, (1, 4008, 2), 1, np.float32, np.float32)
    model.opset_import[0].version = opset
    if opset < 15:
        with pytest.raises(CannotExport, match=rf"GroupNormSwishGrad node 'GroupNormSwishGrad'.*4008.*opset {opset}.*opset 15"):
            export_for_ascend(model)
        return
    out, plan = export_for_ascend(model)
    onnx.checker.check_model(out, full_check=True)
    assert not _ops(out, GNSG) and out.opset_import[0].version == opset
    import onnxruntime as ort

    from ascend_grad import runtime_ext

    options = ort.SessionOptions()
    options.register_custom_ops_library(runtime_ext.library_path())
    want, got = run_onnxruntime(model, feeds, options), run_onnxruntime(out, feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5 * np.max(np.abs(want[name])))


def _pool(H, W, **attributes):
    V = helper.make_tensor_value_info
    nodes = [helper.make_node("AveragePool", ["x"], ["p"], name="pool", **attributes), helper.make_node("Relu", ["p"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "pool", [V("x", TensorProto.FLOAT, [2, 3, H, W])], [V("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


POOLS = {
    "exclude_pad": (5, 5, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "include_pad": (5, 5, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)),
    "asymmetric": (6, 7, dict(kernel_shape=[2, 3], strides=[1, 2], pads=[1, 0, 0, 2])),
    "same_upper": (6, 7, dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    "same_lower": (6, 7, dict(kernel_shape=[2, 2], strides=[1, 1], auto_pad="SAME_LOWER", count_include_pad=1)),
}


def test_padded_average_pool(rng, run_plans, assert_outputs_close):
    """onnxruntime-cann 1.24.4 passes a padded AveragePool to CANN's AvgPoolV2 with `exclusive`
    inverted and the pads in ONNX's order: on the NPU as written it differs from the CPU; the
    export's Conv(ones) / counts equals it. Without padding the node stays as it is."""
    cases = []
    for name, (H, W, attributes) in {**POOLS, "no_pad": (6, 6, dict(kernel_shape=[2, 2], strides=[2, 2]))}.items():
        model = _pool(H, W, **attributes)
        feeds = {"x": (rng.standard_normal((2, 3, H, W)) + 3).astype(np.float32)}
        cases.append((name, model, feeds))
    exported, results = _run(run_plans, cases)
    before = _run_as_written(run_plans, cases)
    for name, (model, plan) in exported.items():
        _placement_is_the_plans(results[name], plan)
        assert_outputs_close(results[name]["cann"], results[name]["cpu"], name)
        written = before[name]
        assert written["placement"]["pool"][1] == "CANNExecutionProvider"
        if name == "no_pad":
            assert _ops(model, "AveragePool") and not plan["rewrites"]
            np.testing.assert_allclose(written["cann"]["y"], written["cpu"]["y"], rtol=1e-6)
            continue
        assert not _ops(model, "AveragePool") and _placed(plan, "Conv") == ["npu"] and _placed(plan, "Div") == ["npu"]
        assert "exclusive" in _rewrite(plan, "pool")["why"]
        assert not np.allclose(written["cann"]["y"], written["cpu"]["y"], rtol=1e-4), f"{name}: the bug did not show"


@pytest.mark.parametrize("name", list(POOLS))
@pytest.mark.parametrize("H, W", [(5, 5), (1, 4), (8, 3)])
def test_padded_average_pool_respelling_on_the_cpu(rng, name, H, W):
    """The respelling against onnxruntime's own AveragePool on the CPU, over more sizes (windows
    hanging over both edges, a one-row input)."""
    from ascend_grad.testing import run_onnxruntime

    model = _pool(H, W, **POOLS[name][2])
    feeds = {"x": rng.standard_normal((2, 3, H, W)).astype(np.float32)}
    try:
        want = run_onnxruntime(model, feeds)["y"]
    except Exception:
        pytest.skip("onnxruntime refuses these sizes for this pool")
    out, _ = export_for_ascend(model)
    got = run_onnxruntime(out, feeds)["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * max(np.max(np.abs(want), initial=0), 1))


def test_padded_average_pool_refused_where_the_respelling_does_not_hold():
    from ascend_grad.graph_passes.ascend import CannotExport

    model = _pool(7, 7, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    with pytest.raises(CannotExport, match="AveragePool node 'pool': padded.*exclusive.*ceil_mode"):
        export_for_ascend(model)
    model.opset_import[0].version = 19  # AveragePool-19: no CANN kernel, the host runs it right
    assert not export_for_ascend(model)[1]["rewrites"]


def _conv(H, W, kernel, **attributes):
    V = helper.make_tensor_value_info
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", **attributes), helper.make_node("Relu", ["c"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "conv", [V("x", TensorProto.FLOAT, [2, 3, H, W]), V("w", TensorProto.FLOAT, [4, 3, *kernel])],
                              [V("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


CONVS = {
    "square": (6, 6, (3, 3), dict(pads=[1, 1, 1, 1])),                      # reads the same either way
    "same_reading": (6, 7, (2, 3), dict(pads=[0, 1, 1, 2], strides=[2, 1])),  # (t, l, b, r) with l == b: too
    "per_axis": (6, 7, (3, 1), dict(pads=[1, 0, 1, 0])),                    # (3, 1) kernel: pad H only
    "uneven": (6, 7, (2, 3), dict(pads=[0, 2, 1, 0], strides=[2, 1])),
    "same_upper": (7, 6, (3, 2), dict(auto_pad="SAME_UPPER")),              # resolves to [1, 0, 1, 1]
}


def test_conv_padded_unevenly(rng, run_plans, assert_outputs_close):
    """onnxruntime-cann 1.24.4 hands ONNX's pads to CANN's Conv2D, which reads them as (top,
    bottom, left, right): as written such a Conv fails or differs on the NPU; exported (Pad, then
    Conv with pads 0) it equals the CPU."""
    cases = []
    for name, (H, W, kernel, attributes) in CONVS.items():
        model = _conv(H, W, kernel, **attributes)
        feeds = {"x": random_array(rng, (2, 3, H, W), np.float32), "w": random_array(rng, (4, 3, *kernel), np.float32)}
        cases.append((name, model, feeds))
    exported, results = _run(run_plans, cases)
    before = _run_as_written(run_plans, cases)
    for name, (model, plan) in exported.items():
        _placement_is_the_plans(results[name], plan)
        assert_outputs_close(results[name]["cann"], results[name]["cpu"], name)
        assert _placed(plan, "Conv") == ["npu"]
        written = before[name]
        if name in ("square", "same_reading"):
            assert not plan["rewrites"] and written["error"] is None
            np.testing.assert_allclose(written["cann"]["y"], written["cpu"]["y"], rtol=1e-5, atol=1e-5)
            continue
        assert _ops(model, "Pad") and "(top, bottom, left, right)" in _rewrite(plan, "conv")["why"]
        assert written["error"] is not None or not np.allclose(written["cann"]["y"], written["cpu"]["y"], rtol=1e-4), name


def test_padded_average_pool_with_a_symbolic_batch(rng):
    """Only C, H and W must be static (the counts are a constant); the batch may be symbolic."""
    from ascend_grad.graph_passes.ascend import CannotExport
    from ascend_grad.testing import run_onnxruntime

    model = _pool(5, 5, **POOLS["exclude_pad"][2])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    out, plan = export_for_ascend(model)
    assert not _ops(out, "AveragePool") and _rewrite(plan, "pool")
    feeds = {"x": rng.standard_normal((4, 3, 5, 5)).astype(np.float32)}
    np.testing.assert_allclose(run_onnxruntime(out, feeds)["y"], run_onnxruntime(model, feeds)["y"], rtol=1e-6, atol=1e-6)
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "H"
    with pytest.raises(CannotExport, match="static C, H and W"):
        export_for_ascend(model)


def test_conv_same_padding_with_a_symbolic_batch(rng):
    from ascend_grad.testing import run_onnxruntime

    model = _conv(7, 6, (3, 2), auto_pad="SAME_UPPER")  # resolves to [1, 0, 1, 1]
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    out, plan = export_for_ascend(model)
    assert _ops(out, "Pad") and _rewrite(plan, "conv")
    feeds = {"x": random_array(rng, (3, 3, 7, 6), np.float32), "w": random_array(rng, (4, 3, 3, 2), np.float32)}
    np.testing.assert_array_equal(run_onnxruntime(out, feeds)["y"], run_onnxruntime(model, feeds)["y"])
