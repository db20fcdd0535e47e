"""Real models on the simulated NPU: diffusers' UNet2DModel and AutoencoderKL and the CNNs of
models/modules.py, exported with export_training_graph, made right for onnxruntime-cann by
export_for_ascend and run on its CANN EP over the simulated CANN runtime. onnxruntime's placement
and Memcpy nodes are the plan's, every ascend.grad node is one aclnn call, the runtime protocol is
clean, and the loss, every gradient and every buffer update equal PyTorch autograd in float64 as
the CPU run of the graph does (models/export/reference.step_errors: SPEC's 1e-5, or twice
PyTorch's own float32 error where PyTorch misses it)."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from ascend_grad import DOMAIN  # noqa: E402
from ascend_grad.graph_passes.ascend import export_for_ascend  # noqa: E402
from ascend_grad.models.export.reference import step_errors, torch_step  # noqa: E402
from ascend_grad.models.modules import REAL_MODELS  # noqa: E402

ACLNN = {"SiluBackward": "aclnnSiluBackward", "MishBackward": "aclnnMishBackward",
         "GroupNormSwishGrad": "aclnnGroupNormSwishGrad", "GroupNormSwish": "aclnnGroupNormSwish"}


@pytest.fixture(scope="module")
def ran(run_plans, real_model):
    cases, modules = [], {}
    for name in REAL_MODELS:
        module, inputs, original = real_model(name)  # exported once per session
        model, plan = export_for_ascend(original)
        feeds = {f"input_{k}": t.numpy() for k, t in enumerate(inputs)}
        cases.append((name, model, plan, original, feeds))
        modules[name] = (module, inputs, model, plan)
    return modules, run_plans(cases, library_for_original=True)


@pytest.mark.parametrize("name", list(REAL_MODELS))
def test_real_model_on_the_simulated_npu(ran, name):
    modules, results = ran
    module, inputs, model, plan = modules[name]
    result = results[name]
    assert result["error"] is None, result["error"]

    want = {p["node"]: p["device"] for p in plan["placement"]}
    have = {n: "npu" if p == "CANNExecutionProvider" else "host" for n, (op, p) in result["placement"].items()
            if not op.startswith("Memcpy")}
    assert have == want
    memcpy = [n for n in result["optimized"].graph.node if n.op_type.startswith("Memcpy")]
    assert len(memcpy) == plan["host_device_copies"]
    ours = [n for n in model.graph.node if n.domain == DOMAIN]
    assert ours and all(want[n.name] == "npu" for n in ours)

    reference = torch_step(module, inputs)
    pytorch = max(step_errors({k: v for k, v in torch_step(module, inputs, dtype=torch.float32).items()
                               if k in result["cann"]}, reference).values())
    bound = max(1e-5, 2 * pytorch)
    errors = step_errors(result["cann"], reference)
    worst = max(errors, key=errors.get)
    assert set(result["cann"]) == set(result["cpu"]) and "loss" in errors
    assert errors[worst] <= bound, f"{name}: {worst} differs from float64 autograd by {errors[worst]:.3g} (bound {bound:.3g})"
    print(f"{name}: {plan['npu_nodes']} nodes on the NPU, {plan['host_nodes']} on the host, copies "
          f"{plan['host_device_copies_before']} -> {plan['host_device_copies']}, largest error {errors[worst]:.2e}")


def test_one_aclnn_call_per_node_and_a_clean_protocol(ran, cann):
    modules, results = ran
    counted = {aclnn: 0 for aclnn in ACLNN.values()}
    for _, _, model, _ in modules.values():
        for node in model.graph.node:
            if node.domain == DOMAIN:
                counted[ACLNN[node.op_type]] += 1
    report = next(iter(results.values()))["report"]  # one process ran every model
    assert {k: report["aclnn_calls"].get(k, 0) for k in counted} == counted
    assert counted["aclnnGroupNormSwishGrad"] and counted["aclnnSiluBackward"] and counted["aclnnMishBackward"]
    cann.assert_clean(report, "real models")
