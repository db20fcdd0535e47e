"""ascend_grad.training (SPEC.md "onnxruntime-training"): generate_artifacts for a forward model that
holds GroupNorm, SiLU and Mish as torch.onnx exports them, which stock onnxruntime-training 1.19.2
refuses; the artifacts hold our ops and train as PyTorch does.

generate_artifacts runs where onnxruntime-training is installed, so these tests run it in a venv
holding onnxruntime-training-cpu 1.19.2 with this repository pip-installed beside it, as a user
would (the `installed_beside` fixture, shared with tests/test_package.py; it brings onnx 1.18+, with
which onnxruntime writes an optimizer model of an IR version 1.19.2 refuses: the pass lowers it).
PyTorch runs here.
"""

import io
import json
import subprocess
import sys
import sysconfig
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from ascend_grad import DOMAIN, training

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

FLAVOUR = "onnxruntime-training-cpu==1.19.2"
STEPS, LR = 5, 1e-2
# onnxruntime's AdamW (OptimType.AdamW, onnxblock.optim.AdamW) is HuggingFace's (adam_mode 1): eps
# added to sqrt(v) before the bias correction, which torch.optim.AdamW applies first, and weight decay
# after the step. The same steps only where eps is negligible against sqrt(v): at eps 1e-8 the
# parameters of this model differ by up to 6e-5 (relative) for that alone, and even at 1e-12 an
# element whose first gradient is 1.8e-7 moved 1.05e-5 apart (seed 3365416951; against
# onnxruntime's formula 5e-7). So PyTorch's side takes onnxruntime's steps (_adamw_step).
EPS = 1e-12
BETAS = (0.9, 0.999)


def _adamw_step(parameters, moments, step: int) -> None:
    """One AdamW step as onnxruntime's (adam_mode 1, no weight decay): p -= lr sqrt(1 - b2^t) / (1 - b1^t)
    * m / (sqrt(v) + eps), in the parameters' own dtype; moments maps each parameter to its (m, v)."""
    b1, b2 = BETAS
    scale = LR * (1 - b2 ** step) ** 0.5 / (1 - b1 ** step)
    with torch.no_grad():
        for p in parameters:
            m, v = moments.setdefault(p, (torch.zeros_like(p), torch.zeros_like(p)))
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.sub_(scale * m / (v.sqrt() + EPS))


def make_module() -> nn.Module:
    """Conv -> GroupNorm -> SiLU -> Conv -> Mish -> Conv (a diffusion ResBlock's core, a YOLO CSP activation)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(4, 8), nn.SiLU(), nn.Conv2d(8, 8, 3, padding=1),
                         nn.Mish(), nn.Conv2d(8, 3, 1))


def export_forward(module: nn.Module, x: torch.Tensor) -> onnx.ModelProto:
    """As a user of onnxruntime-training exports: TorchScript exporter, opset 17, training mode."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), buffer, dynamo=False, opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["input"], output_names=["output"])
    return onnx.load_from_string(buffer.getvalue())


CHILD = """
import json, sys, numpy as np, onnx
from ascend_grad import runtime_ext, training
training.onnxruntime_training()  # (this venv has no torch)
from onnxruntime.training import artifacts, onnxblock
from onnxruntime.training.api import CheckpointState, Module, Optimizer

forward, stock, folder, data, out = sys.argv[1:6]
names, steps, lr, eps = json.loads(sys.argv[6]), int(sys.argv[7]), float(sys.argv[8]), float(sys.argv[9])
result = {}
try:
    artifacts.generate_artifacts(onnx.load(forward), requires_grad=names, loss=artifacts.LossType.MSELoss,
                                 optimizer=onnxblock.optim.AdamW(eps=eps), artifact_directory=stock)
except Exception as error:
    result["stock"] = str(error)
report = training.generate_artifacts(forward, requires_grad=names, loss=training.LossType.MSELoss,
                                     optimizer=onnxblock.optim.AdamW(eps=eps), artifact_directory=folder)
result["report"] = report.to_dict()
state = CheckpointState.load_checkpoint(f"{folder}/checkpoint")
module = Module(f"{folder}/training_model.onnx", state, f"{folder}/eval_model.onnx", session_options=runtime_ext.session_options())
optimizer = Optimizer(f"{folder}/optimizer_model.onnx", module)
optimizer.set_learning_rate(lr)
batch = np.load(data)
losses = []
for _ in range(steps):
    losses.append(module(batch["input"], batch["target"]))
    optimizer.step()
    module.lazy_reset_grad()
np.savez(out, losses=np.array(losses), **{f"parameter/{k}": p.data for k, p in state.parameters})
json.dump(result, sys.stdout)
"""


@pytest.fixture(scope="module")
def python(installed_beside):
    if sys.version_info[:2] != (3, 11) or sysconfig.get_platform() != "linux-x86_64":
        pytest.skip(f"{FLAVOUR} has wheels for CPython 3.11 on Linux x86_64 here; this is {sysconfig.get_platform()}")
    return installed_beside(FLAVOUR)


def _relative(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


def test_generate_artifacts_trains_as_pytorch(python, tmp_path, rng):
    """Stock generate_artifacts refuses the model (no gradient for InstanceNormalization or Softplus);
    ascend_grad.training.generate_artifacts writes artifacts whose training graph holds ascend.grad
    nodes, every model IR 10 at most, and STEPS AdamW steps with MSELoss in Module + Optimizer (the
    kernel library registered) give PyTorch's losses and parameters within 1e-5."""
    module = make_module()
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    target = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    forward = export_forward(module, torch.from_numpy(x))
    assert {"InstanceNormalization", "Softplus", "Sigmoid"} <= {n.op_type for n in forward.graph.node}
    onnx.save(forward, tmp_path / "forward.onnx")
    np.savez(tmp_path / "batch.npz", input=x, target=target)
    (tmp_path / "stock").mkdir()
    (tmp_path / "artifacts").mkdir()
    names = [n for n, _ in module.named_parameters()]
    done = subprocess.run([python, "-c", CHILD, tmp_path / "forward.onnx", tmp_path / "stock", tmp_path / "artifacts",
                           tmp_path / "batch.npz", tmp_path / "out.npz", json.dumps(names), str(STEPS), str(LR), str(EPS)],
                          capture_output=True, text=True, cwd=tmp_path)
    lines = [line for line in done.stderr.splitlines() if "[I:onnxruntime" not in line and "[W:onnxruntime" not in line]
    assert done.returncode == 0, "\n".join(lines[-15:])
    result = json.loads(done.stdout)
    assert "The gradient builder has not been registered" in result["stock"]
    assert "InstanceNormalization" in result["stock"] or "Softplus" in result["stock"]

    folder = tmp_path / "artifacts"
    report = result["report"]
    assert report["written"]["training_model.onnx"] == "fused"
    assert report["written"]["optimizer_model.onnx"].startswith("copied")  # (", ir_version 14 -> 10" beside onnx 1.23)
    models = {p.name: onnx.load(p) for p in folder.glob("*.onnx")}
    assert sorted(models) == ["eval_model.onnx", "optimizer_model.onnx", "training_model.onnx"]
    assert all(m.ir_version <= 10 for m in models.values()), {k: m.ir_version for k, m in models.items()}
    held = [n.op_type for n in models["training_model.onnx"].graph.node if n.domain == DOMAIN]
    assert len(held) == sum(report["models"]["training_model.onnx"]["counts"].values())
    assert sorted(held) == ["GroupNormSwish", "GroupNormSwishGrad", "MishBackward"]  # forward and backward
    assert [i.name for i in models["training_model.onnx"].graph.input][:2] == ["input", "target"]

    got = np.load(tmp_path / "out.npz")
    losses, moments = [], {}
    for step in range(1, STEPS + 1):
        module.zero_grad()
        loss = F.mse_loss(module(torch.from_numpy(x)), torch.from_numpy(target))
        losses.append(loss.item())
        loss.backward()
        _adamw_step(list(module.parameters()), moments, step)
    assert losses[-1] < losses[0]
    errors = {"loss": _relative(got["losses"], np.array(losses))}
    errors.update({name: _relative(got[f"parameter/{name}"], p.detach().numpy()) for name, p in module.named_parameters()})
    print(f"ascend.grad nodes {sorted(held)}; relative errors after {STEPS} AdamW steps: {errors}")
    assert max(errors.values()) <= 1e-5, errors


OPTIONS_CHILD = """
import sys, numpy as np
from ascend_grad import runtime_ext, training
training.onnxruntime_training()
from onnxruntime.training.api import CheckpointState, Module, Optimizer

forward, folder, data = sys.argv[1:4]
names = ["0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias", "5.weight", "5.bias"]
training.generate_artifacts(forward, requires_grad=names[:4], frozen_params=names[4:], loss=training.LossType.MSELoss,
                            optimizer=training.OptimType.AdamW, artifact_directory=folder, prefix="p_", ort_format=True,
                            nominal_checkpoint=True)
batch = np.load(data)
losses = []
for kind in ("onnx", "ort"):
    state = CheckpointState.load_checkpoint(f"{folder}/p_checkpoint")
    module = Module(f"{folder}/p_training_model.{kind}", state, f"{folder}/p_eval_model.{kind}",
                    session_options=runtime_ext.session_options())
    optimizer = Optimizer(f"{folder}/p_optimizer_model.{kind}", module)
    for _ in range(2):
        losses.append(float(module(batch["input"], batch["target"])))
        optimizer.step()
    print(sorted(n for n, p in state.parameters if p.requires_grad))
print(losses)
"""


def test_generate_artifacts_passes_onnxruntimes_options_on(python, tmp_path, rng):
    """prefix, frozen_params, nominal_checkpoint and ort_format as onnxruntime takes them: the
    ORT-format models are converted from the fused ones (with the kernel library) and train as the
    ONNX ones do."""
    module = make_module()
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    onnx.save(export_forward(module, torch.from_numpy(x)), tmp_path / "forward.onnx")
    np.savez(tmp_path / "batch.npz", input=x, target=np.zeros_like(x))
    (tmp_path / "artifacts").mkdir()
    done = subprocess.run([python, "-c", OPTIONS_CHILD, tmp_path / "forward.onnx", tmp_path / "artifacts", tmp_path / "batch.npz"],
                          capture_output=True, text=True, cwd=tmp_path)
    lines = [line for line in done.stderr.splitlines() if "[I:onnxruntime" not in line and "[W:onnxruntime" not in line]
    assert done.returncode == 0, "\n".join(lines[-15:])
    trainable, _, losses = done.stdout.strip().splitlines()[-3:]
    assert json.loads(trainable.replace("'", '"')) == ["0.bias", "0.weight", "1.bias", "1.weight"]
    losses = json.loads(losses)
    assert losses[0] > losses[1] and np.allclose(losses[:2], losses[2:], rtol=1e-6, atol=0)
    files = sorted(p.name for p in (tmp_path / "artifacts").iterdir())
    assert {"p_checkpoint", "p_nominal_checkpoint", "p_training_model.onnx", "p_training_model.ort", "p_eval_model.ort",
            "p_optimizer_model.ort"} <= set(files), files
    assert any(n.domain == DOMAIN for n in onnx.load(tmp_path / "artifacts" / "p_training_model.onnx").graph.node)


def _run(model: onnx.ModelProto, feeds: dict) -> list:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_make_differentiable_computes_the_same_forward(rng):
    """The respelled forward (LayerNormalization for GroupNorm's InstanceNormalization, the
    overflow-free softplus) gives the export's output, in stock onnxruntime; the model given is left
    as it was."""
    module = make_module()
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    forward = export_forward(module, torch.from_numpy(x))
    before = forward.SerializeToString()
    respelled = training.make_differentiable(forward)
    assert forward.SerializeToString() == before
    ops = [n.op_type for n in respelled.graph.node]
    assert "InstanceNormalization" not in ops and "Softplus" not in ops and "LayerNormalization" in ops
    want, got = _run(forward, {"input": x})[0], _run(respelled, {"input": x})[0]
    assert _relative(got, want) <= 1e-6

    # softplus at large |x|: log(1 + exp(x)) would overflow to inf from x = 89. (Absolutely, not
    # relatively, accurate below 0: 1 + exp(-|x|) rounds to 1 in float below x = -17, giving 0 for < 4e-8.)
    node = helper.make_node("Softplus", ["x"], ["y"])
    graph = helper.make_graph([node], "softplus", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [7])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    values = np.array([-100, -20, -1, 0, 1, 20, 100], np.float32)
    np.testing.assert_allclose(_run(training.make_differentiable(model), {"x": values})[0],
                               np.logaddexp(0, values.astype(np.float64)), rtol=1e-6, atol=1e-7)


def test_make_differentiable_refuses_what_it_cannot_respell():
    """An InstanceNormalization with a learned scale is not torch's GroupNorm core."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 6])
    node = helper.make_node("InstanceNormalization", ["x", "scale", "bias"], ["y"], name="norm", epsilon=1e-5)
    graph = helper.make_graph([node], "g", [x], [y], [numpy_helper.from_array(np.full(4, 2, np.float32), "scale"),
                                                      numpy_helper.from_array(np.zeros(4, np.float32), "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(ValueError, match="norm: only InstanceNormalization"):
        training.make_differentiable(model)


def test_needs_onnxruntime_training():
    """Here (stock onnxruntime) a clear ImportError, not a traceback from deep inside."""
    with pytest.raises(ImportError, match="pip install onnxruntime-training-cpu"):
        training.generate_artifacts(onnx.ModelProto(), requires_grad=[])
    with pytest.raises(ImportError, match="needs onnxruntime-training"):
        training.LossType  # noqa: B018
