"""Upsampling through export_training_graph (models/export/upsample.py): every F.interpolate mode
becomes our op, so the graph holds pooling.py's backward translations (no index_put / ScatterND),
and the step equals PyTorch autograd in float64, static and dynamic batch; which nodes are left as
PyTorch spells them; the forward translation alone against ATen in every dtype.

Bound: float32 results within 1e-5 of max |float64 reference| (SPEC's float bound), per output;
nearest upsampling's forward exactly ATen's.
"""

import contextlib
import io
import logging
import warnings
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from ascend_grad.models.export import TABLE, export_training_graph, upsample  # noqa: E402
from ascend_grad.models.export.reference import step_errors, torch_step  # noqa: E402
from ascend_grad.testing import assert_close, run_onnxruntime  # noqa: E402

TOLERANCE = 1e-5
SIZES = {1: (7,), 2: (5, 6), 3: (3, 4, 5)}  # odd, unequal, not multiples of the factors
# what index / index_put (upsampling's decomposition) become in ONNX
INDEXING = {"ScatterND", "ScatterElements", "GatherND"}

VARIANTS = {  # name -> (rank, F.interpolate's keywords)
    "nearest_x2": (2, {"scale_factor": 2}),  # UNet / VAE Upsample2D
    "nearest_size": (2, {"size": (7, 9)}),
    "nearest_x1_5": (2, {"scale_factor": 1.5}),  # a Gather of ATen's indices
    "nearest_x2_x1_1": (2, {"scale_factor": (2.0, 1.1)}),  # ATen's 2-D kernel copies W whatever its scale
    "nearest_exact_x2": (2, {"scale_factor": 2, "mode": "nearest-exact"}),
    "bilinear_x2": (2, {"scale_factor": 2, "mode": "bilinear"}),  # FPN / segmentation heads
    "bilinear_x2_corners": (2, {"scale_factor": 2, "mode": "bilinear", "align_corners": True}),
    "bilinear_size": (2, {"size": (11, 13), "mode": "bilinear"}),
    "bilinear_x1_7": (2, {"scale_factor": 1.7, "mode": "bilinear"}),  # the scale, not out / in, places samples
    "bilinear_x1_7_recomputed": (2, {"scale_factor": 1.7, "mode": "bilinear", "recompute_scale_factor": True}),
    "bilinear_down": (2, {"size": (3, 4), "mode": "bilinear"}),
    "bicubic_x2": (2, {"scale_factor": 2, "mode": "bicubic"}),
    "bicubic_size_corners": (2, {"size": (7, 9), "mode": "bicubic", "align_corners": True}),
    "linear_x2": (1, {"scale_factor": 2, "mode": "linear"}),
    "linear_size_corners": (1, {"size": 11, "mode": "linear", "align_corners": True}),
    "nearest_1d_x2_5": (1, {"scale_factor": 2.5}),
    "nearest_exact_1d_x1_5": (1, {"scale_factor": 1.5, "mode": "nearest-exact"}),
    "trilinear_x2": (3, {"scale_factor": 2, "mode": "trilinear"}),
    "trilinear_size_corners": (3, {"size": (5, 7, 6), "mode": "trilinear", "align_corners": True}),
    "nearest_3d_x122": (3, {"scale_factor": (1, 2, 2)}),
    "nearest_exact_3d_x2": (3, {"scale_factor": 2, "mode": "nearest-exact"}),
}


class Upsamplings(nn.Module):
    """forward(x1, x2, x3) (1-D, 2-D, 3-D inputs): per variant, the input plus a bias of one value
    per position (its gradient is the upsampling's backward, per position, summed over the batch),
    then the upsampling. A failure names the variant (grad.bias.<name>)."""

    def __init__(self, variants):
        super().__init__()
        self.variants = variants
        self.bias = nn.ParameterDict({name: nn.Parameter(torch.randn(2, *SIZES[rank])) for name, (rank, _) in variants.items()})

    def forward(self, x1, x2, x3):
        inputs = {1: x1, 2: x2, 3: x3}
        return tuple(F.interpolate(inputs[rank] + self.bias[name], **keywords)
                     for name, (rank, keywords) in self.variants.items())


def inputs(batch, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(batch, 2, *SIZES[rank], generator=g) for rank in (1, 2, 3))


def op_types(model) -> set:
    return {n.op_type for n in model.graph.node}


def assert_step_matches(model, module, batch_inputs):
    want = torch_step(module, batch_inputs)
    got = run_onnxruntime(model, {f"input_{k}": t.numpy() for k, t in enumerate(batch_inputs)})
    errors = step_errors(got, want)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOLERANCE, f"{worst} differs from PyTorch by {errors[worst]:.3g} (relative)"


@pytest.mark.parametrize("dynamic_batch", [False, True], ids=["static", "dynamic"])
def test_every_mode_reaches_the_backward_translations(dynamic_batch):
    torch.manual_seed(0)
    module = Upsamplings(VARIANTS)
    model = export_training_graph(module, inputs(2), dynamic_batch=dynamic_batch)
    assert not op_types(model) & INDEXING
    for batch in (2, 3) if dynamic_batch else (2,):
        assert_step_matches(model, module, inputs(batch, seed=batch))


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_a_last_axis_of_one(mode):
    """(N, C, 5, 1) -> (N, C, 9, 1): the dense axis is not the last one, though everything after it
    has size 1 (its MatMul must go through the reshape, not act on the last axis)."""

    class Tall(nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = nn.Parameter(torch.randn(2, 5, 1))

        def forward(self, x):
            return F.interpolate(x + self.bias, size=(9, 1) if mode == "bilinear" else (10, 1), mode=mode)

    torch.manual_seed(0)
    module, x = Tall(), (torch.randn(2, 2, 5, 1),)
    model = export_training_graph(module, x)
    assert not op_types(model) & INDEXING
    assert_step_matches(model, module, x)


def test_the_unfused_export_is_substituted_too():
    """fuse=False (the graph as PyTorch spells it, without our ops) still takes upsample.py's
    translations: they are export plumbing, not one of the ascend.grad ops."""
    torch.manual_seed(0)
    module = Upsamplings({name: VARIANTS[name] for name in ("nearest_x2", "bilinear_x2")})
    model = export_training_graph(module, inputs(2), fuse=False)
    assert "Resize" in op_types(model) and not op_types(model) & INDEXING
    assert_step_matches(model, module, inputs(2))


@pytest.mark.parametrize("dynamic_batch", [False, True], ids=["static", "dynamic"])
def test_diffusers_vae_upsample2d(real_model, dynamic_batch):
    """AutoencoderKL's decoder upsamples with Upsample2D (F.interpolate nearest 2x, then a conv):
    a Resize forward and an AveragePool backward, no indexing. (The graphs of
    tests/models/export/test_real_models.py: the session's real_model exports each once.)"""
    model = real_model("vae", dynamic_batch=dynamic_batch)[2]
    counts = Counter(n.op_type for n in model.graph.node)
    assert counts["Resize"] == counts["AveragePool"] == 1 and not set(counts) & INDEXING, counts


# ---- what substitute() leaves alone


class Interpolate(nn.Module):
    def __init__(self, **keywords):
        super().__init__()
        self.keywords = keywords

    def forward(self, x):
        return F.interpolate(x, **self.keywords)


def substituted(module, x, dynamic_shapes=None) -> tuple[Counter, list]:
    """What upsample.substitute does to the training IR: its counts, and the upsample nodes left."""
    program = torch.export.export(module, (x,), dynamic_shapes=dynamic_shapes)
    done = upsample.substitute(program.graph_module)
    left = [n.target for n in program.graph.nodes if n.op == "call_function" and "upsample" in str(n.target)]
    return done, left


@pytest.mark.parametrize("keywords, rank", [
    ({"scale_factor": 2}, 2),
    ({"scale_factor": 2, "mode": "nearest-exact"}, 1),
    ({"scale_factor": 2, "mode": "bilinear"}, 2),
    ({"size": (4, 5), "mode": "bicubic"}, 2),
    ({"scale_factor": 2, "mode": "trilinear"}, 3),
], ids=["nearest", "nearest-exact", "bilinear", "bicubic", "trilinear"])
def test_substitute_replaces_the_upsample_node(keywords, rank):
    done, left = substituted(Interpolate(**keywords), torch.randn(2, 3, *SIZES[rank]))
    assert sum(done.values()) == 1 and left == [torch.ops.ascend_grad.upsample.default]


@pytest.mark.parametrize("case", ["antialias", "integers", "symbolic height", "bicubic, same size"])
def test_substitute_leaves_alone(case):
    """Antialiasing: no backward translation; uint8: not a dtype of the translations; a symbolic spatial size: the
    per-axis matrices need static sizes; bicubic keeping the size with a scale: ATen's backward
    copies, its forward interpolates (the backward is not the forward's adjoint)."""
    module, x, dynamic = Interpolate(scale_factor=2, mode="bilinear"), torch.randn(2, 3, 5, 6), None
    if case == "antialias":
        module = Interpolate(scale_factor=2, mode="bilinear", antialias=True)
    elif case == "integers":
        module, x = Interpolate(scale_factor=2), torch.randint(0, 255, (2, 3, 5, 6), dtype=torch.uint8)
    elif case == "bicubic, same size":
        module, x = Interpolate(scale_factor=1.1, mode="bicubic"), torch.randn(2, 3, 4, 5)
    else:
        dynamic = {"x": {2: torch.export.Dim("height", min=2, max=64)}}
    done, left = substituted(module, x, dynamic)
    assert not done and len(left) == 1 and left[0] != torch.ops.ascend_grad.upsample.default


# ---- the forward translation alone, against ATen


def export_ops(calls, tensors):
    """One graph computing calls[k](tensors[k]) for every k, exported by torch.onnx with TABLE."""

    class Calls(nn.Module):
        def forward(self, *xs):
            return tuple(call(x) for call, x in zip(calls, xs))

    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return torch.onnx.export(Calls(), tuple(tensors), dynamo=True, custom_translation_table=TABLE).model_proto


FORWARDS = [  # (mode, input sizes, output sizes, scales, align_corners, the float32 spelling)
    ("nearest", (9, 16), (18, 32), [2.0, 2.0], False, {"Resize"}),  # output i reads input i // 2
    ("nearest", (9, 16), (13, 27), [1.5, 1.7], False, {"Gather"}),  # ATen's indices
    ("nearest", (64,), (19,), [0.3], False, {"Gather"}),  # Resize's i / s and ATen's floorf(i * (1/s)) differ here
    ("nearest-exact", (9, 16), (22, 40), [2.5, 2.5], False, {"Gather"}),
    ("nearest-exact", (4, 5, 3), (8, 10, 6), None, False, {"Resize"}),
    ("linear", (13,), (7,), None, False, {"Resize"}),
    ("linear", (9, 16), (15, 27), [1.7, 1.7], False, {"Resize"}),  # the scale, not out / in, places the samples
    ("linear", (9, 16), (9, 17), [1.1, 1.1], False, {"MatMul"}),  # onnxruntime's Resize copies an unchanged axis
    ("linear", (4, 5, 3), (8, 10, 6), [2.0, 2.0, 2.0], True, {"Resize"}),
    ("cubic", (9, 16), (18, 32), [2.0, 2.0], False, {"Resize"}),
    ("cubic", (9, 16), (4, 5), None, True, {"Resize"}),
    ("cubic", (4, 5), (4, 5), [1.1, 1.1], False, {"MatMul", "Reshape"}),  # ATen interpolates, Resize would copy
]


def upsample_call(case, dtype=None, fed=None):
    mode, _, output_size, scales, align_corners, _ = case
    return lambda x: torch.ops.ascend_grad.upsample(x.to(dtype or x.dtype), list(output_size), scales, mode,
                                                    align_corners).to(fed or x.dtype)


@pytest.mark.parametrize("case", FORWARDS, ids=lambda c: f"{c[0]} {c[1]}->{c[2]} {c[3]}{' corners' if c[4] else ''}")
def test_forward_spelling(case):
    """One Resize, as torch.onnx writes upsampling, where it computes ATen's op (checked at export),
    else ATen's own per-axis indices or matrices."""
    model = export_ops([upsample_call(case)], [torch.randn(2, 3, *case[1])])
    assert op_types(model) == case[5]


# by dtype: one rounding of the result (ATen computes half types in float32 too)
FORWARD_TOLERANCES = {torch.float32: TOLERANCE, torch.float64: 1e-12, torch.float16: 1e-3, torch.bfloat16: 8e-3}


@pytest.mark.parametrize("dtype", list(FORWARD_TOLERANCES), ids=str)
def test_forward_translation(dtype):
    fed = torch.float32 if dtype == torch.bfloat16 else dtype  # numpy has no bfloat16: cast inside the graph
    g = torch.Generator().manual_seed(0)
    tensors = [torch.randn(2, 3, *sizes, generator=g).to(dtype).to(fed) for _, sizes, *_ in FORWARDS]
    model = export_ops([upsample_call(case, dtype, fed) for case in FORWARDS], tensors)
    got = run_onnxruntime(model, {i.name: t.numpy() for i, t in zip(model.graph.input, tensors)})
    for (mode, sizes, output_size, scales, align_corners, _), x, out in zip(FORWARDS, tensors, got.values()):
        want = torch.ops.ascend_grad.upsample(x.double(), list(output_size), scales, mode, align_corners).numpy()
        what = f"{mode} {sizes} -> {output_size} scales {scales}{' align_corners' if align_corners else ''}"
        if mode.startswith("nearest"):  # a copy of ATen's picks
            np.testing.assert_array_equal(out, want.astype(out.dtype), err_msg=what)
        else:
            assert_close(out, want, what, tolerance=FORWARD_TOLERANCES[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64], ids=str)
def test_backward_translation_other_dtypes(dtype):
    """pooling.py's translations (float16 through float32 there, bfloat16 through float32 here:
    onnxruntime has no bfloat16 MatMul, AveragePool or Resize) against ATen's backward in float64."""
    fed = torch.float32 if dtype == torch.bfloat16 else dtype
    g = torch.Generator().manual_seed(0)
    # (not bicubic at an unchanged size: ATen's backward copies there, no adjoint of its forward; never substituted)
    cases = [case for case in FORWARDS if case[1] != case[2]]
    tensors = [torch.randn(2, 3, *case[2], generator=g).to(dtype).to(fed) for case in cases]

    def backward(case, grad, to=None):
        mode, sizes, output_size, scales, align_corners, _ = case
        return torch.ops.ascend_grad.upsample_backward(grad.to(to or grad.dtype), list(output_size), list(sizes), scales,
                                                       mode, align_corners).to(grad.dtype)

    model = export_ops([lambda grad, case=case: backward(case, grad, dtype) for case in cases], tensors)
    got = run_onnxruntime(model, {i.name: t.numpy() for i, t in zip(model.graph.input, tensors)})
    for case, grad, out in zip(cases, tensors, got.values()):
        assert_close(out, backward(case, grad.double()).numpy(), f"{case[:5]}", tolerance=FORWARD_TOLERANCES[dtype])
