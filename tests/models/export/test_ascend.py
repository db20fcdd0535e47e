"""models/export/ascend.py: our torch custom ops run eagerly as PyTorch's own ops do (forward and
autograd), and ATen's silu_backward / mish_backward exported alone become our nodes (the op set's
dtypes) or stay the math (float64)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from ascend_grad.bench.translations import Case, _export  # noqa: E402
from ascend_grad.models.export import ascend  # noqa: E402
from ascend_grad.testing import assert_close, run_kernels, run_onnxruntime  # noqa: E402


@pytest.mark.parametrize("activation", ["silu", "mish"])
def test_activation_ops_match_aten_forward_and_backward(activation, rng):
    torch.manual_seed(int(rng.integers(2**31)))
    x = (torch.randn(3, 7, dtype=torch.float64) * 30).requires_grad_()  # |x| up to ~90
    ours, theirs = getattr(ascend, activation), getattr(F, activation)
    dy = torch.randn(3, 7, dtype=torch.float64)
    (got,) = torch.autograd.grad(ours(x), x, dy)
    (want,) = torch.autograd.grad(theirs(x), x, dy)
    assert torch.equal(ours(x), theirs(x)) and torch.allclose(got, want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize(("shape", "groups"), [((2, 8, 5, 3), 4), ((3, 6, 1, 1), 6), ((2, 4, 9), 1)])  # HxW 1, G == C, G 1
def test_group_norm_swish_matches_group_norm_then_silu(shape, groups, affine, rng):
    torch.manual_seed(int(rng.integers(2**31)))
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    C = shape[1]
    weight = (torch.randn(C, dtype=torch.float64) + 1).requires_grad_() if affine else None
    bias = torch.randn(C, dtype=torch.float64).requires_grad_() if affine else None
    y, mean, rstd = ascend.group_norm_swish(x, weight, bias, groups, 1e-5)
    want = F.silu(F.group_norm(x, groups, weight, bias, 1e-5))
    assert torch.allclose(y, want, rtol=1e-12, atol=1e-14) and mean.shape == rstd.shape == (shape[0], groups)
    dy = torch.randn(shape, dtype=torch.float64)
    wrt = [t for t in (x, weight, bias) if t is not None]
    for got, expected in zip(torch.autograd.grad(y, wrt, dy), torch.autograd.grad(want, wrt, dy)):
        assert torch.allclose(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("op_name", ["silu_backward", "mish_backward"])
def test_aten_backward_ops_export_as_our_nodes(op_name, dtype, rng):
    """torch.onnx with our table: ATen's backward op is our node in float32/float16 and the math in
    float64 (the op set has none); values against ATen in float64, NaN and |x| = 90 included."""
    op = getattr(torch.ops.aten, op_name).default
    x = torch.from_numpy(rng.standard_normal((4, 9)) * 3)
    x[0, :3] = torch.tensor([90.0, -90.0, float("nan")])
    g, x = torch.from_numpy(rng.standard_normal((4, 9))).to(getattr(torch, dtype)), x.to(getattr(torch, dtype))
    model = _export(torch, Case(op_name, lambda _: op, lambda _: (g, x)), (g, x))
    held = [n.op_type for n in model.graph.node if n.domain == "ascend.grad"]
    assert held == ([] if dtype == "float64" else [{"silu_backward": "SiluBackward", "mish_backward": "MishBackward"}[op_name]])
    feeds = {i.name: v.numpy() for i, v in zip(model.graph.input, (g, x))}
    (got,) = (run_kernels if held else run_onnxruntime)(model, feeds).values()
    want = op(g.double(), x.double()).numpy()
    assert np.isnan(got[0, 2]) and np.isnan(want[0, 2])
    assert_close(got, want, op_name, tolerance=1e-12 if dtype == "float64" else None)
