"""aten.convolution_backward's translation (models/export/convolution.py): modules whose forward is
calls of that op, exported by torch.onnx with the translation and run in onnxruntime, against
PyTorch's own convolution_backward in float64 on the same values; then a small CNN's joint graph
against autograd.

Bound: max |out - ref| / max |ref| <= 1e-5 per float32 output (the project's float bound, through
testing.assert_close). Every output is a float32 sum of at most a few hundred products here
(grad_weight: N * S_out terms, grad_input: C_out / groups * taps), whose rounding stays near
sqrt(terms) * 2^-24 of the largest value, well under 1e-6 (measured up to 5e-7). float16 and
bfloat16 outputs are computed in float32 and rounded once: within 2^-11 (2^-8) of max |ref|, under
the project's 1e-3 (8e-3) bounds.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from ascend_grad.bench.translations import conv_shapes  # noqa: E402
from ascend_grad.models.export import convolution  # noqa: E402
from ascend_grad.testing import BFLOAT16, assert_close, run_onnxruntime  # noqa: E402

ALL = (True, True, True)


class _Calls(nn.Module):
    """forward(grad_output_0, input_0, weight_0, grad_output_1, ...) = the outputs of
    convolution_backward(grad_output_k, input_k, weight_k, *constants[k]) for each k, in order."""

    def __init__(self, constants):
        super().__init__()
        self.constants = constants

    def forward(self, *tensors):
        outputs = []
        for k, constants in enumerate(self.constants):
            results = torch.ops.aten.convolution_backward.default(*tensors[3 * k : 3 * k + 3], *constants)
            outputs += [r for r, wanted in zip(results, constants[-1]) if wanted]
        return tuple(outputs)


def export(calls, dynamic_shapes=None):
    """One graph for the calls [(tensors, constants), ...] (torch.onnx with the translation);
    dynamic_shapes: one entry per tensor."""
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            _Calls([c for _, c in calls]), tuple(t for tensors, _ in calls for t in tensors), dynamo=True,
            dynamic_shapes=dynamic_shapes and (tuple(dynamic_shapes),),  # one entry: forward's *tensors
            custom_translation_table=convolution.TABLE, verbose=False,
        )
    return program.model_proto


def run(model, calls) -> list[list[np.ndarray]]:
    """The model's outputs in onnxruntime, one list per call."""
    tensors = [t for tensors, _ in calls for t in tensors]
    outputs = iter(run_onnxruntime(model, {i.name: _numpy(t) for i, t in zip(model.graph.input, tensors)}).values())
    return [[next(outputs) for wanted in constants[-1] if wanted] for _, constants in calls]


@functools.cache
def exported_together(group: str) -> dict[str, tuple]:
    """Every case of GROUPS[group] in one exported graph run in one session (the exporter's ~0.5 s
    per export would be most of this file's time): case -> (outputs, tensors, constants)."""
    calls = {case: conv_case(**spec) for case, spec in GROUPS[group].items()}
    outputs = run(export(list(calls.values())), list(calls.values()))
    return {case: (got, *call) for (case, call), got in zip(calls.items(), outputs)}


def conv_case(n, c_in, c_out, size, k, stride=1, padding=0, dilation=1, groups=1, transposed=False, output_padding=0,
              mask=ALL, bias=True, dtype=torch.float32, seed=0):
    """(grad_output, input, weight) and the op's constants for a convolution over (n, c_in, *size)."""
    rank = len(size)
    out, weight = conv_shapes(c_in, c_out, size, k, stride, padding, groups, dilation, transposed, output_padding)
    generator = torch.Generator().manual_seed(seed)
    tensors = [torch.randn(shape, generator=generator).to(dtype) for shape in [(n, c_out, *out), (n, c_in, *size), weight]]
    constants = ([c_out] if bias else None, [stride] * rank, [padding] * rank, [dilation] * rank, transposed,
                 [output_padding] * rank, groups, list(mask))
    return tensors, constants


def _numpy(tensor):
    if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: through ml_dtypes' (exact)
        return tensor.float().numpy().astype(BFLOAT16)
    return tensor.numpy()


def assert_matches_aten(got, tensors, constants, what=""):
    """The outputs `got` equal the requested outputs of aten's convolution_backward computed in
    float64 on the same values."""
    want = torch.ops.aten.convolution_backward.default(*[t.double() for t in tensors], *constants)
    names = [name for name, wanted in zip(["grad_input", "grad_weight", "grad_bias"], constants[-1]) if wanted]
    want = [w for w, wanted in zip(want, constants[-1]) if wanted]
    assert len(got) == len(want), f"{what}: {len(got)} outputs, {len(want)} requested"
    for name, g, w in zip(names, got, want):
        assert g.dtype == _numpy(tensors[0]).dtype, f"{what} {name}: dtype {g.dtype}"
        assert_close(g, w.numpy(), f"{what} {name}")


CASES = {
    # 1-D
    "1d": dict(n=2, c_in=3, c_out=5, size=(17,), k=3, padding=1),
    "1d_stride2_groups2": dict(n=2, c_in=4, c_out=6, size=(20,), k=4, stride=2, padding=1, groups=2),
    # 2-D, stride 1
    "2d_odd_sizes_c_in_lt_c_out": dict(n=3, c_in=3, c_out=10, size=(9, 13), k=3, padding=1),  # H != W, not multiples of 8
    "2d_c_in_gt_c_out": dict(n=2, c_in=12, c_out=5, size=(11, 7), k=3, padding=1),  # windows of grad_output
    "2d_c_in_gt_c_out_dilation2_groups2": dict(n=2, c_in=8, c_out=4, size=(10, 9), k=3, padding=2, dilation=2, groups=2),
    "2d_dilation2": dict(n=2, c_in=6, c_out=6, size=(12, 10), k=3, padding=2, dilation=2),  # the flipped-weight Conv, dilated
    "2d_padding_past_the_kernel": dict(n=2, c_in=4, c_out=8, size=(5, 6), k=1, padding=1),  # 1x1 with padding 1
    "2d_pointwise": dict(n=3, c_in=16, c_out=24, size=(7, 5), k=1),
    "2d_groups2_multiplier3": dict(n=2, c_in=4, c_out=6, size=(9, 10), k=3, padding=1, groups=2),
    "2d_depthwise": dict(n=2, c_in=8, c_out=8, size=(10, 9), k=3, padding=1, groups=8),
    "2d_depthwise_5x5": dict(n=2, c_in=8, c_out=8, size=(11, 12), k=5, padding=2, groups=8),
    "2d_16_channels_per_group": dict(n=2, c_in=16, c_out=16, size=(18, 17), k=3, padding=1),  # one GEMM per tap
    # 2-D, stride > 1
    "2d_stride2_padding1": dict(n=2, c_in=6, c_out=8, size=(15, 12), k=3, stride=2, padding=1),
    "2d_stride2_padding0_odd": dict(n=2, c_in=8, c_out=6, size=(13, 13), k=3, stride=2),  # after an explicit F.pad
    "2d_stride3_padding2": dict(n=2, c_in=5, c_out=7, size=(14, 11), k=3, stride=3, padding=2),  # rows past the last window
    "2d_stride2_dilation2": dict(n=2, c_in=4, c_out=6, size=(15, 14), k=3, stride=2, padding=1, dilation=2),
    "2d_pointwise_stride2": dict(n=2, c_in=16, c_out=8, size=(9, 8), k=1, stride=2),  # a ResNet shortcut
    "2d_depthwise_stride2": dict(n=2, c_in=8, c_out=8, size=(12, 11), k=3, stride=2, padding=1, groups=8),
    "2d_depthwise_5x5_stride2_multiplier2": dict(n=2, c_in=6, c_out=12, size=(13, 11), k=5, stride=2, padding=2, groups=6),
    "2d_stride2_groups2_16_channels_per_group": dict(n=2, c_in=32, c_out=8, size=(11, 10), k=3, stride=2, padding=1, groups=2),
    "1d_stride2_16_channels": dict(n=2, c_in=16, c_out=24, size=(40,), k=5, stride=2, padding=2),
    # 3-D
    "3d": dict(n=2, c_in=3, c_out=4, size=(5, 6, 7), k=3, padding=1),
    "3d_stride2_groups2": dict(n=2, c_in=4, c_out=4, size=(7, 6, 5), k=3, stride=2, padding=1, groups=2),
    # transposed
    "transposed_2d_4x4_stride2": dict(n=2, c_in=6, c_out=4, size=(5, 7), k=4, stride=2, padding=1, transposed=True),
    "transposed_2d_output_padding_groups2": dict(n=2, c_in=4, c_out=6, size=(5, 6), k=3, stride=2, padding=1,
                                                 output_padding=1, groups=2, transposed=True),
    "transposed_2d_output_padding_past_stride": dict(n=2, c_in=3, c_out=4, size=(6, 5), k=3, padding=1, dilation=2,
                                                     output_padding=1, transposed=True),  # output_padding >= stride
    "transposed_2d_16_channels": dict(n=2, c_in=8, c_out=16, size=(5, 6), k=4, stride=2, padding=1, transposed=True),
    "transposed_1d": dict(n=2, c_in=4, c_out=3, size=(9,), k=3, stride=2, output_padding=1, transposed=True),
    "transposed_3d": dict(n=2, c_in=3, c_out=4, size=(3, 4, 5), k=2, stride=2, transposed=True),
    "transposed_2d_no_grad_input": dict(n=2, c_in=6, c_out=4, size=(5, 7), k=4, stride=2, padding=1, transposed=True,
                                        mask=(False, True, True)),
    # no bias
    "no_bias": dict(n=2, c_in=4, c_out=6, size=(8, 8), k=3, padding=1, bias=False, mask=(True, True, False)),
}


MASKS = [(True, True, False), (True, False, True), (False, True, True), (True, False, False), (False, True, False),
         (False, False, True)]
HALF = [("2d_stride2_padding1", torch.float16), ("2d_c_in_gt_c_out", torch.float16), ("2d_depthwise", torch.float16),
        ("transposed_2d_4x4_stride2", torch.float16), ("2d_stride2_padding1", torch.bfloat16),
        ("2d_c_in_gt_c_out", torch.bfloat16)]
GROUPS = {
    "cases": CASES,
    "masks": {f"{case} {mask}": {**CASES[case], "mask": mask} for case in ["2d_c_in_gt_c_out", "2d_stride2_padding1"]
              for mask in MASKS},
    # computed in float32 (onnxruntime's CPU Conv and MatMul have no bfloat16), rounded once
    "half": {f"{case} {dtype}": {**CASES[case], "dtype": dtype} for case, dtype in HALF},
}


@pytest.mark.parametrize("case", GROUPS["cases"])
def test_matches_aten(case):
    assert_matches_aten(*exported_together("cases")[case], case)


@pytest.mark.parametrize("case", GROUPS["masks"])
def test_output_mask(case):
    """Only the requested outputs are graph outputs (any pattern of output_mask)."""
    assert_matches_aten(*exported_together("masks")[case], case)


@pytest.mark.parametrize("mask", [(False, True, True), (False, False, True)])
def test_unrequested_gradients_are_not_computed(mask):
    """No Conv or ConvTranspose without grad_input (a network's first conv), nothing but grad_bias's
    ReduceSum when only it is asked for: the placeholder torch.onnx needs in their place is gone."""
    calls = [conv_case(**{**CASES["2d_stride2_padding1"], "mask": mask})]
    model = export(calls)
    assert_matches_aten(run(model, calls)[0], *calls[0], str(mask))
    ops = {node.op_type for node in model.graph.node}
    assert not ops & {"Conv", "ConvTranspose"}, ops
    if not mask[1]:
        assert ops == {"ReduceSum"}, ops


@pytest.mark.parametrize("case", GROUPS["half"])
def test_half_precision(case):
    assert_matches_aten(*exported_together("half")[case], case)


@pytest.mark.parametrize("case", ["2d_dilation2", "2d_c_in_gt_c_out", "2d_stride2_padding1", "transposed_2d_4x4_stride2"])
def test_symbolic_batch(case):
    """Exported with a dynamic batch (torch.export.Dim on dim 0), run at two batch sizes."""
    batch = torch.export.Dim("batch", min=2)
    model = export([conv_case(**CASES[case])], dynamic_shapes=({0: batch}, {0: batch}, None))
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param, "the batch was specialised"
    for n in (3, 5):
        calls = [conv_case(**{**CASES[case], "n": n}, seed=n)]
        assert_matches_aten(run(model, calls)[0], *calls[0], f"{case} batch {n}")


@pytest.mark.parametrize("case", ["2d_dilation2", "2d_c_in_gt_c_out", "2d_stride2_padding1", "transposed_2d_4x4_stride2"])
def test_symbolic_height(case):
    """The height symbolic too (the path that reads sizes from the graph), run at two heights. The
    cases keep the output's height the input's times (or over) the stride, so one Dim spans both."""
    spec = {**CASES[case], "size": (8, 7)}
    height = torch.export.Dim("height", min=2, max=64)
    stride = spec.get("stride", 1)
    input_height, output_height = (height, stride * height) if spec.get("transposed") else (stride * height, height)
    model = export([conv_case(**spec)], dynamic_shapes=({2: output_height}, {2: input_height}, None))
    assert model.graph.input[1].type.tensor_type.shape.dim[2].dim_param, "the height was specialised"
    for h in (6, 10):
        calls = [conv_case(**{**spec, "size": (h, 7)}, seed=h)]
        assert_matches_aten(run(model, calls)[0], *calls[0], f"{case} height {h}")


def test_unsupported_dtype_is_named():
    with pytest.raises(Exception, match="dtype"):  # onnxruntime has no float64 Conv
        export([conv_case(**CASES["1d"], dtype=torch.float64)])


# ---- a joint graph: the translation inside a training graph


def test_joint_graph_of_a_small_cnn_matches_autograd():
    from ascend_grad.models.export.reference import torch_step
    from ascend_grad.models.routes import export_joint

    torch.manual_seed(0)
    module = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1),  # the first conv: no grad_input
        nn.SiLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8),  # depthwise
        nn.ReLU(),
        nn.Conv2d(8, 16, 1),  # pointwise
        nn.ConvTranspose2d(16, 4, 4, stride=2, padding=1),
    )
    x = torch.randn(2, 3, 10, 12)
    model = export_joint(module, (x,))
    got = run_onnxruntime(model, {"input_0": x.numpy()})
    want = torch_step(module, (x,))
    assert set(got) == {"loss", *(f"grad.{name}" for name, _ in module.named_parameters())}
    for name, value in got.items():
        assert_close(value, want[name], name)
