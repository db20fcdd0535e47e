"""Every bundled training graph through the graph pass and the Ascend export, then onnxruntime-cann
1.24.4 on the simulated CANN runtime: a valid model, the plan's placement equal to onnxruntime's
node by node (profile), its copy count equal to the Memcpy nodes onnxruntime inserted, and every
output (loss and gradients) equal to the original graph's on the CPU."""

import json

import numpy as np
import onnx
import pytest

from ascend_grad.graph_passes import fuse_backward_ops
from ascend_grad.graph_passes.ascend import CannotLoad, export_for_ascend
from ascend_grad.models import GRAPHS, graph_path
from ascend_grad.verify import random_feeds

MANIFEST = json.loads((GRAPHS / "manifest.json").read_text())
LOADABLE = sorted(n for n, e in MANIFEST.items() if e["route"] != "ort_training")
TRAINING = sorted(n for n, e in MANIFEST.items() if e["route"] == "ort_training")
PROVIDERS = {"npu": "CANNExecutionProvider", "host": "CPUExecutionProvider"}


@pytest.fixture(scope="module")
def exported():
    cases = {}
    for name in LOADABLE:
        original = onnx.load(graph_path(name))
        fused, _ = fuse_backward_ops(original)
        model, plan = export_for_ascend(fused)
        cases[name] = (model, plan, original, random_feeds(original, seed=7))
    return cases


@pytest.fixture(scope="module")
def ran(exported, run_plans):
    return run_plans([(name, *case) for name, case in exported.items()])


@pytest.mark.parametrize("name", LOADABLE)
def test_valid_model(exported, name):
    model, plan, original, _ = exported[name]
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == 10
    assert [o.name for o in model.graph.output] == [o.name for o in original.graph.output]
    assert {p["node"] for p in plan["placement"]} == {n.name for n in model.graph.node}
    assert len(plan["placement"]) == len(model.graph.node)


@pytest.mark.parametrize("name", LOADABLE)
def test_placement_is_onnxruntimes(ran, exported, name):
    result = ran[name]
    assert result["error"] is None, result["error"]
    _, plan, _, _ = exported[name]
    want = {p["node"]: PROVIDERS[p["device"]] for p in plan["placement"]}
    have = {node: provider for node, (op, provider) in result["placement"].items() if not op.startswith("Memcpy")}
    assert have == want  # node by node: no node renamed, added or dropped by onnxruntime
    memcpy = [n for n in result["optimized"].graph.node if n.op_type in ("MemcpyFromHost", "MemcpyToHost")]
    assert len(memcpy) == plan["host_device_copies"], "the plan's copy count is not onnxruntime's"
    counted = {"MemcpyFromHost": plan["copies"]["MemcpyFromHost"], "MemcpyToHost": plan["copies"]["MemcpyToHost"]}
    assert {k: sum(n.op_type == k for n in memcpy) for k in counted} == counted
    print(f"{name}: {plan['npu_nodes']} nodes on the NPU, copies {plan['host_device_copies_before']} -> "
          f"{plan['host_device_copies']}")


@pytest.mark.parametrize("name", LOADABLE)
def test_outputs_equal_the_original_on_cpu(ran, exported, name, assert_outputs_close):
    result = ran[name]
    assert result["error"] is None, result["error"]
    assert set(result["cann"]) == set(result["cpu"])  # loss, every gradient, every buffer update
    model = exported[name][0]
    half = _half_dtype(model)
    assert_outputs_close(result["cann"], result["cpu"], name, computes_in=half)


def _half_dtype(model: onnx.ModelProto):
    """numpy float16 if the graph computes in float16 (some value is float16), else None."""
    inferred = onnx.shape_inference.infer_shapes(model)
    values = [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
    return np.float16 if any(v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16 for v in values) else None


@pytest.mark.parametrize("name", TRAINING)
def test_training_ops_are_reported(name):
    fused, _ = fuse_backward_ops(onnx.load(graph_path(name)))
    with pytest.raises(CannotLoad, match=r"com\.microsoft::\w+.*training ops"):
        export_for_ascend(fused)


@pytest.mark.parametrize("name", LOADABLE)
def test_out_also_runs_on_the_cpu(exported, name, assert_outputs_close):
    """OUT stays a graph any onnxruntime runs: on the CPU EP with default options (where onnxruntime
    inserts its own float16 Casts: ours must not take their names) it equals the original."""
    import onnxruntime as ort

    from ascend_grad import runtime_ext
    from ascend_grad.testing import run_onnxruntime

    model, _, original, feeds = exported[name]
    options = ort.SessionOptions()
    options.register_custom_ops_library(runtime_ext.library_path())
    got, want = run_onnxruntime(model, feeds, options), run_onnxruntime(original, feeds, options)
    assert_outputs_close(got, want, name, computes_in=_half_dtype(model))
