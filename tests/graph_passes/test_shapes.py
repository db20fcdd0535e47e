"""Graphs beyond the bundled ones, exported here from PyTorch: GroupNorm with G == 1, G == C,
HxW == 1, rank 3 and 5, odd sizes, a scaled swish; the loss taken right after the activation (so
the incoming gradient is itself computed from the activation). Each fuses as expected and its
outputs are at least as close to PyTorch's float64 autograd as the unfused graph's."""

import copy

import numpy as np
import pytest

from ascend_grad.graph_passes import fuse_backward_ops
from ascend_grad.testing import run_kernels, run_onnxruntime

torch = pytest.importorskip("torch")
routes = pytest.importorskip("ascend_grad.models.routes")


class ScaledGroupNormSwish(torch.nn.Module):
    """x * scale (so the graph needs dx) -> GroupNorm -> swish with b -> the loss."""

    def __init__(self, C, G, beta=1.0):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.linspace(0.8, 1.2, C))
        self.norm = torch.nn.GroupNorm(G, C)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.2)
            self.norm.bias.normal_(0.0, 0.2)
        self.beta = beta

    def forward(self, x):
        z = self.norm(x * self.scale.reshape(1, -1, *[1] * (x.dim() - 2)))
        return torch.nn.functional.silu(z) if self.beta == 1.0 else z * torch.sigmoid(self.beta * z)


class LastActivation(torch.nn.Module):
    """Linear -> activation -> the loss: dy = 2 y / n depends on the activation itself."""

    def __init__(self, activation):
        super().__init__()
        self.fc = torch.nn.Linear(16, 24)
        self.activation = activation

    def forward(self, x):
        return self.activation(self.fc(x))


CASES = {
    "G=1": (lambda: ScaledGroupNormSwish(8, 1), (2, 8, 4, 4), "GroupNormSwishGrad"),
    "G=C": (lambda: ScaledGroupNormSwish(8, 8), (2, 8, 4, 4), "GroupNormSwishGrad"),
    "HxW=1": (lambda: ScaledGroupNormSwish(8, 4), (3, 8, 1, 1), "GroupNormSwishGrad"),
    "rank 3": (lambda: ScaledGroupNormSwish(8, 4), (2, 8, 5), "GroupNormSwishGrad"),
    "rank 5": (lambda: ScaledGroupNormSwish(8, 2), (2, 8, 2, 3, 3), "GroupNormSwishGrad"),
    "odd sizes": (lambda: ScaledGroupNormSwish(6, 3), (1, 6, 7, 3), "GroupNormSwishGrad"),
    "scaled swish": (lambda: ScaledGroupNormSwish(8, 2, beta=0.7), (2, 8, 3, 3), "GroupNormSwishGrad"),
    "SiLU then loss": (lambda: LastActivation(torch.nn.SiLU()), (5, 16), "SiluBackward"),
    "Mish then loss": (lambda: LastActivation(torch.nn.Mish()), (5, 16), "MishBackward"),
}


def _float64_autograd(module, x):
    module = copy.deepcopy(module).double()
    loss = module(x.double()).square().mean()
    grads = torch.autograd.grad(loss, list(module.parameters()))
    return {"loss": loss.detach().numpy()} | {f"grad.{n}": g.numpy() for (n, _), g in zip(module.named_parameters(), grads)}


def _error(got, want):
    return float(np.abs(got.astype(np.float64) - want).max() / (np.abs(want).max() or 1.0))


@pytest.mark.parametrize("route", ["aot", "export"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_fuses_and_is_as_exact_as_the_unfused_graph(case, route):
    make, shape, op = CASES[case]
    torch.manual_seed(0)
    module, x = make(), torch.randn(shape)
    joint = routes.aot_joint(module, (x,)) if route == "aot" else routes.export_joint(module, (x,))
    fused, report = fuse_backward_ops(joint)
    expected = {op: 1} | ({"GroupNormSwish": 1} if op == "GroupNormSwishGrad" else {})  # and its forward
    assert {k: v for k, v in report.counts.items() if v} == expected, report.refused
    feeds = {"input_0": x.numpy()}
    unfused, ours, exact = run_onnxruntime(joint, feeds), run_kernels(fused, feeds), _float64_autograd(module, x)
    assert ours.keys() == unfused.keys() == exact.keys()
    for name in exact:
        # float32 1e-5, or the unfused graph's own error where the output is ill-conditioned
        # (G == C: the gradient of a scale before GroupNorm sums values that cancel)
        bound = max(1e-5, 2 * _error(unfused[name], exact[name]))
        assert _error(ours[name], exact[name]) <= bound, name
