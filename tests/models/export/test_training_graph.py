"""export_training_graph (SPEC.md "PyTorch export"): the interface, the numbers against PyTorch
autograd in float64, our ops emitted for every SiLU / Mish / GroupNorm+SiLU, buffers, frozen
parameters, train and eval mode, a dynamic batch, and the error naming every untranslatable op.

Every graph runs twice: in stock onnxruntime (the ascend.grad nodes as their function bodies) and
with the kernel library. Bound: float32 results within 1e-5 of max |float64 reference| (SPEC's
float bound), per output.
"""

from collections import Counter

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from ascend_grad import DOMAIN  # noqa: E402
from ascend_grad.models import export_training_graph, modules  # noqa: E402
from ascend_grad.models.export.reference import activation_counts, step_errors, torch_step  # noqa: E402
from ascend_grad.models.export.unsupported import UnsupportedOpsError  # noqa: E402
from ascend_grad.testing import assert_close, run_kernels, run_onnxruntime  # noqa: E402

TOLERANCE = 1e-5
RUNNERS = {"function_bodies": run_onnxruntime, "kernels": run_kernels}


def feeds_of(inputs):
    return {f"input_{k}": t.numpy() for k, t in enumerate(inputs) if isinstance(t, torch.Tensor)}


def ours(model) -> Counter:
    return Counter(n.op_type for n in model.graph.node if n.domain == DOMAIN)


def assert_step_matches(model, module, inputs, runner=run_onnxruntime, what=""):
    """Every graph output equals PyTorch's float64 step (step_errors: an output zero by the math is
    measured against the largest of its kind); the buffers the graph does not return are the ones
    the step leaves unchanged."""
    want = torch_step(module, inputs)
    got = runner(model, feeds_of(inputs))
    assert got.keys() <= want.keys(), f"{what}: unexpected outputs {set(got) - set(want)}"
    errors = step_errors(got, want)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOLERANCE, f"{what}: {worst} differs from PyTorch by {errors[worst]:.3g} (relative)"
    state = dict(module.named_buffers())
    for name, value in want.items():
        if name.startswith("buffer.") and name not in got:
            np.testing.assert_array_equal(value, state[name.removeprefix("buffer.")].double().numpy(), err_msg=name)


def make(factory, seed=0):
    torch.manual_seed(seed)
    return factory()


# ---- the interface


def test_interface_names_inputs_parameters_gradients_and_buffers():
    """input_<k> for the tensor inputs (a Python number is baked in), parameters and buffers as
    initializers under their own names, outputs loss, grad.<p> (requires_grad only, in
    named_parameters() order), buffer.<b> (the updated ones, in named_buffers() order)."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.bn = nn.BatchNorm2d(8)
            self.head = nn.Linear(8, 4)
            self.embed = nn.Embedding(5, 8)

        def forward(self, x, scale, labels):
            h = F.silu(self.bn(self.conv(x))).mean((2, 3)) * scale
            return self.head(h + self.embed(labels))

    module = make(Net)
    module.embed.weight.requires_grad_(False)  # frozen: no gradient output
    inputs = (torch.randn(2, 3, 6, 6), 0.5, torch.tensor([1, 3]))
    before = {n: b.clone() for n, b in module.named_buffers()}
    model = export_training_graph(module, inputs)

    assert [i.name for i in model.graph.input] == ["input_0", "input_2"]
    elem = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    assert elem == {"input_0": onnx.TensorProto.FLOAT, "input_2": onnx.TensorProto.INT64}
    initializers = {t.name for t in model.graph.initializer}
    assert {n for n, _ in module.named_parameters()} | {n for n, _ in module.named_buffers()} <= initializers
    assert [o.name for o in model.graph.output] == [
        "loss", "grad.conv.weight", "grad.conv.bias", "grad.bn.weight", "grad.bn.bias", "grad.head.weight",
        "grad.head.bias", "buffer.bn.running_mean", "buffer.bn.running_var", "buffer.bn.num_batches_tracked",
    ]
    assert all(torch.equal(b, before[n]) for n, b in module.named_buffers()), "exporting changed the module's buffers"
    assert ours(model) == {"SiluBackward": 1}
    for runner in RUNNERS.values():
        assert_step_matches(model, module, inputs, runner, "Net")


def test_a_parameter_the_forward_never_reads_gets_a_zero_gradient():
    """PyTorch gives it None (AOTAutograd refuses it outright); the graph keeps SPEC's interface."""

    class Unused(nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.spare = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            return F.silu(self.used(x))

    module = make(Unused)
    inputs = (torch.randn(3, 4),)
    model = export_training_graph(module, inputs)
    outputs = [o.name for o in model.graph.output]
    assert outputs == ["loss", "grad.used.weight", "grad.used.bias", "grad.spare.weight", "grad.spare.bias"]
    got = run_kernels(model, feeds_of(inputs))
    assert not got["grad.spare.weight"].any() and got["grad.spare.weight"].shape == (4, 4)
    assert_step_matches(model, module, inputs, what="unused parameter")
    assert all(p.requires_grad for p in module.parameters())  # the module itself is left as it was


def test_eval_mode_updates_no_buffer_and_uses_the_running_statistics():
    module = make(lambda: modules.ConvBNAct(3, 8, 3)).eval()
    inputs = (torch.randn(2, 3, 5, 7),)
    model = export_training_graph(module, inputs)
    assert [o.name for o in model.graph.output] == ["loss", "grad.0.weight", "grad.1.weight", "grad.1.bias"]
    assert_step_matches(model, module, inputs, what="eval")


def test_custom_loss_and_structured_output():
    """loss_fn receives the module's output as it is (a tuple here); default_loss sums over a tuple."""

    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 8)

        def forward(self, x):
            h = F.mish(self.fc(x))
            return h[:, :4], h[:, 4:]

    module = make(TwoHeads)
    inputs = (torch.randn(3, 6),)
    custom = export_training_graph(module, inputs, loss_fn=lambda out: (out[0] - out[1]).abs().sum())
    want = torch_step(module, inputs, loss_fn=lambda out: (out[0] - out[1]).abs().sum())
    got = run_kernels(custom, feeds_of(inputs))
    for name in ("loss", "grad.fc.weight", "grad.fc.bias"):
        assert_close(got[name], want[name], name, tolerance=TOLERANCE)
    assert_step_matches(export_training_graph(module, inputs), module, inputs, what="default loss on a tuple")


# ---- our ops, emitted for every occurrence


MODULES = {
    # name: (factory, input shape)
    "conv_bn_silu_inplace": (lambda: modules.ConvBNAct(4, 8, 3), (2, 4, 9, 7)),  # odd sizes, nn.SiLU(inplace=True)
    "conv_bn_mish": (lambda: modules.ConvBNAct(4, 8, 1, act="mish"), (2, 4, 5, 5)),
    "resblock": (lambda: modules.ResBlock(channels=4, hidden=32, groups=8), (2, 4, 8, 8)),
    "resblock_g_eq_c": (lambda: modules.ResBlock(channels=3, hidden=16, groups=16), (2, 3, 6, 6)),  # G == C
    "resblock_g1": (lambda: modules.ResBlock(channels=3, hidden=16, groups=1), (2, 3, 6, 6)),  # G == 1
    "resblock_hw1": (lambda: modules.ResBlock(channels=3, hidden=16, groups=4), (3, 3, 1, 1)),  # HxW == 1
    "resblock_no_affine": (lambda: nn.Sequential(nn.Conv2d(3, 16, 3), nn.GroupNorm(4, 16, affine=False), nn.SiLU(),
                                                 nn.Conv2d(16, 2, 1)), (2, 3, 6, 6)),  # GroupNorm without gamma/beta
    "gn_hand_swish": (lambda: modules.GroupNormSwishBlock(), (2, 4, 8, 8)),  # x * sigmoid(x): the graph pass
    "gn_scaled_swish": (lambda: modules.GroupNormSwishBlock(beta=1.5), (2, 4, 8, 8)),  # swish_scale 1.5
    "silu_mlp": (lambda: modules.SiluMLP(), (4, 16)),
    "mish_mlp": (lambda: modules.MishMLP(), (4, 16)),
}


@pytest.mark.parametrize("name", MODULES)
def test_every_activation_becomes_our_op_and_the_step_matches(name):
    factory, shape = MODULES[name]
    module = make(factory)
    inputs = (torch.randn(shape),)
    model = export_training_graph(module, inputs)
    found, counted = ours(model), activation_counts(module, inputs)
    fused_norms = counted["GroupNorm+SiLU"] + (1 if name.startswith("gn_") else 0)  # hand-written swish: not F.silu
    assert found["GroupNormSwishGrad"] == fused_norms, found
    assert found["SiluBackward"] == counted["SiLU"] and found["MishBackward"] == counted["Mish"], (found, counted)
    assert found["GroupNormSwish"] == counted["GroupNorm"], found  # every GroupNorm's forward too
    for what, runner in RUNNERS.items():
        assert_step_matches(model, module, inputs, runner, f"{name} ({what})")


class Attention(nn.Module):
    """q, k, v projections and F.scaled_dot_product_attention, with a mask or causal."""

    def __init__(self, causal: bool, masked: bool):
        super().__init__()
        self.qkv, self.out = nn.Linear(16, 48), nn.Linear(16, 16)
        self.causal, self.masked = causal, masked

    def forward(self, x):
        q, k, v = self.qkv(x).unflatten(-1, (3, 2, 8)).permute(2, 0, 3, 1, 4)  # (N, heads 2, L, 8) each
        mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril(1) if self.masked else None
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)
        return self.out(F.silu(y.transpose(1, 2).flatten(2)))


class Indexing(nn.Module):
    """An embedding, then indexing with repeated (and negative) positions: both backwards scatter
    with index_put(accumulate=True), which torch.onnx writes as ScatterND(add), a racy kernel in
    onnxruntime (models/export/scatter.py respells it)."""

    def __init__(self):
        super().__init__()
        self.embed, self.fc = nn.Embedding(20, 32), nn.Linear(32, 32)

    def forward(self, tokens, positions):
        return F.silu(self.fc(self.embed(tokens)))[:, positions] * 2


LAYERS = {
    # the other layers of real models, around one of our activations: their backward must export too
    "layer_norm_gelu": (lambda: nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.SiLU(), nn.Linear(16, 4)),
                        lambda: (torch.randn(3, 5, 8),)),
    "embedding": (lambda: nn.Sequential(nn.Embedding(10, 8), nn.Mish(), nn.Linear(8, 4)), lambda: (torch.tensor([[1, 2, 2, 9]]),)),
    "indexing": (Indexing, lambda: (torch.randint(0, 20, (8, 64)), torch.randint(-64, 64, (200,)))),
    # (a head after the encoder's final LayerNorm: mean(LayerNorm(x)^2) is 1 up to eps, whose gradient
    # would be nothing but rounding)
    "multihead_attention": (lambda: nn.Sequential(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, activation=F.silu,
                                                                             batch_first=True), nn.Linear(16, 3)),
                            lambda: (torch.randn(2, 5, 16),)),
    "sdpa_causal": (lambda: Attention(causal=True, masked=False), lambda: (torch.randn(2, 6, 16),)),
    "sdpa_mask": (lambda: Attention(causal=False, masked=True), lambda: (torch.randn(2, 6, 16),)),
    "relu_family": (lambda: nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.LeakyReLU(0.1), nn.Hardswish(), nn.SiLU(),
                                          nn.ReLU6(), nn.Conv2d(8, 4, 1)), lambda: (torch.randn(2, 3, 7, 7),)),
    "conv_transpose_pixel_shuffle": (lambda: nn.Sequential(nn.ConvTranspose2d(4, 8, 4, 2, 1), nn.SiLU(), nn.Conv2d(8, 16, 1),
                                                           nn.PixelShuffle(2)), lambda: (torch.randn(2, 4, 5, 5),)),
    "instance_norm": (lambda: nn.Sequential(nn.Conv2d(3, 8, 3), nn.InstanceNorm2d(8, affine=True), nn.SiLU()),
                      lambda: (torch.randn(2, 3, 6, 6),)),
    "bilinear_upsample": (lambda: nn.Sequential(nn.Conv2d(3, 8, 1), nn.Upsample(scale_factor=2, mode="bilinear"), nn.SiLU()),
                          lambda: (torch.randn(2, 3, 5, 4),)),
}


@pytest.mark.parametrize("name", LAYERS)
def test_other_layers_export_around_our_ops(name):
    factory, make_inputs = LAYERS[name]
    module, inputs = make(factory), make_inputs()
    model = export_training_graph(module, inputs)
    counted = activation_counts(module, inputs)
    assert sum(ours(model)[op] for op in ("SiluBackward", "MishBackward")) == counted["SiLU"] + counted["Mish"] > 0
    assert not [n for n in model.graph.node if n.op_type == "ScatterND"]
    for what, runner in RUNNERS.items():
        assert_step_matches(model, module, inputs, runner, f"{name} ({what})")


@pytest.mark.parametrize("name", ["resblock", "conv_bn_mish", "silu_mlp"])
def test_float16_module(name):
    """A float16 module: float16 graph inputs, parameters and outputs, our ops in float16. Bound:
    SPEC's float16 1e-3, or twice PyTorch's own float16 error against float64 where that is larger
    (BatchNorm's statistics in float16). bfloat16 exports too, but onnxruntime's CPU provider has no
    bfloat16 Conv or Gemm to run it."""
    factory, shape = MODULES[name]
    module = torch.nn.Module.to(make(factory), torch.float16)
    inputs = (torch.randn(shape, dtype=torch.float16),)
    model = export_training_graph(module, inputs)
    assert {v.type.tensor_type.elem_type for v in model.graph.input} == {onnx.TensorProto.FLOAT16}
    assert ours(model)
    want = torch_step(module, inputs)
    pytorch = max(step_errors({k: v for k, v in torch_step(module, inputs, dtype=torch.float16).items() if k in want}, want).values())
    for what, runner in RUNNERS.items():
        errors = step_errors(runner(model, feeds_of(inputs)), want)
        worst = max(errors, key=errors.get)
        assert errors[worst] <= max(1e-3, 2 * pytorch), f"{name} ({what}): {worst} off by {errors[worst]:.3g}, PyTorch's {pytorch:.3g}"


def test_in_place_silu_on_a_view_stays_correct():
    """silu_ on a slice writes into its base: not substituted (the base is read later), still exact."""

    class SliceSilu(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 8)

        def forward(self, x):
            h = self.fc(x)
            F.silu(h[:, :4], inplace=True)
            return h * 2

    module = make(SliceSilu)
    inputs = (torch.randn(3, 6),)
    assert_step_matches(export_training_graph(module, inputs), module, inputs, what="silu_ on a view")


def test_float64_module_exports_without_our_ops():
    """The op set has no float64: such activations keep their spelled-out backward, still exact."""
    # (onnxruntime has no float64 Conv or InstanceNormalization: no GroupNorm here)
    module = make(lambda: nn.Sequential(nn.Linear(6, 16), nn.SiLU(), nn.Linear(16, 8), nn.Mish(), nn.Linear(8, 3))).double()
    inputs = (torch.randn(5, 6, dtype=torch.float64),)
    loss = lambda out: out.square().mean()  # noqa: E731  (default_loss rounds to float32)
    model = export_training_graph(module, inputs, loss)
    assert not ours(model)
    want, got = torch_step(module, inputs, loss), run_onnxruntime(model, feeds_of(inputs))
    for name, value in got.items():
        assert_close(value, want[name], name, tolerance=1e-12)


def test_large_inputs_give_no_nan():
    """|x| up to 90 through SiLU and Mish: finite gradients, equal to PyTorch's."""
    module = make(lambda: nn.Sequential(nn.Linear(8, 8), nn.SiLU(), nn.Linear(8, 8), nn.Mish(), nn.Linear(8, 2)))
    with torch.no_grad():
        module[0].weight.mul_(30)
    inputs = (torch.randn(4, 8) * 3,)
    model = export_training_graph(module, inputs)
    for runner in RUNNERS.values():
        got = runner(model, feeds_of(inputs))
        assert all(np.isfinite(v).all() for v in got.values())
        assert_step_matches(model, module, inputs, runner, "large |x|")


# ---- dynamic batch


def test_dynamic_batch_runs_at_other_batch_sizes():
    module = make(lambda: modules.ResBlock(channels=3, hidden=16, groups=4))
    model = export_training_graph(module, (torch.randn(2, 3, 6, 6),), dynamic_batch=True)
    (value,) = model.graph.input
    assert value.type.tensor_type.shape.dim[0].dim_param and value.type.tensor_type.shape.dim[0].dim_value == 0
    assert {p.key: p.value for p in model.metadata_props}["ascend_grad.batch_range"] == "2.."
    for batch in (1, 5):
        inputs = (torch.randn(batch, 3, 6, 6),)
        for runner in RUNNERS.values():
            assert_step_matches(model, module, inputs, runner, f"batch {batch}")


class Pads(nn.Module):
    """F.pad growing one side and cropping another (negative pads), between convs: the backward of a
    pad is a crop and the other way round."""

    def __init__(self):
        super().__init__()
        self.before, self.after = nn.Conv2d(3, 4, 1), nn.Conv2d(4, 2, 3, stride=2)

    def forward(self, x):
        return self.after(F.silu(F.pad(self.before(x), (0, 1, -1, 2))))


@pytest.mark.parametrize("dynamic", [False, True])
def test_pads_and_crops(dynamic):
    module = make(Pads)
    model = export_training_graph(module, (torch.randn(2, 3, 8, 7),), dynamic_batch=dynamic)
    for batch in (2, 3) if dynamic else (2,):
        inputs = (torch.randn(batch, 3, 8, 7),)
        assert_step_matches(model, module, inputs, run_kernels, f"pads, batch {batch}")


@torch.library.custom_op("ascend_grad_test::doubled", mutates_args=())
def doubled(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@torch.library.custom_op("ascend_grad_test::doubled_backward", mutates_args=())
def doubled_backward(grad: torch.Tensor) -> torch.Tensor:
    return grad * 2


@doubled_backward.register_fake
def _(grad):
    if grad.shape[0] == 2:  # shape logic that branches on the batch: it fixes the symbol to 2
        return torch.empty_like(grad)
    return torch.empty_like(grad)


doubled.register_fake(lambda x: torch.empty_like(x))
doubled.register_autograd(lambda ctx, grad: doubled_backward(grad))


def test_a_batch_fixed_while_tracing_is_an_error_not_a_static_graph():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return doubled(F.silu(self.fc(x)))

    # torch.export itself refuses a forward that fixes it; only the backward's kernels get past it
    with pytest.raises(NotImplementedError, match="tracing the backward fixed the batch size of input .* to 2"):
        export_training_graph(Net(), (torch.randn(2, 4),), dynamic_batch=True)


def test_dynamic_batch_with_batch_norm_updates_buffers():
    module = make(lambda: modules.ConvBNAct(3, 8, 3))
    model = export_training_graph(module, (torch.randn(4, 3, 6, 6),), dynamic_batch=True)
    inputs = (torch.randn(3, 3, 6, 6),)
    assert_step_matches(model, module, inputs, run_kernels, "dynamic BatchNorm")


# ---- one trace of the joint graph, not two


def _canonical(model: onnx.ModelProto):
    """The graph with its names left out: every value named by where it first appears, every
    constant by its contents (two exports number their values and constants differently)."""
    names = {i.name: f"input {k}" for k, i in enumerate(model.graph.input)}
    for t in model.graph.initializer:
        names[t.name] = t.name if "." in t.name else onnx.numpy_helper.to_array(t).tobytes() + bytes(t.dims)
    nodes = []
    for n in model.graph.node:
        outputs = [names.setdefault(o, f"value {len(names)}") for o in n.output]
        attributes = sorted((a.name, a.SerializeToString(deterministic=True)) for a in n.attribute)
        nodes.append((n.domain, n.op_type, [names.get(i, i) for i in n.input], outputs, attributes))
    shapes = sorted((str(names.get(v.name, v.name)), v.type.SerializeToString(deterministic=True)) for v in model.graph.value_info)
    return nodes, [(o.name, names.get(o.name)) for o in model.graph.output], shapes


@pytest.mark.parametrize("dynamic", [False, True])
def test_one_trace_gives_the_graph_of_two(monkeypatch, dynamic):
    """torch.onnx's decompositions go into the joint trace, and its own decomposition of the joint
    graph (a second trace of all of it) is skipped: the graph is the one the two traces give, where
    they are still made (an op torch.onnx decomposes left in the joint graph: here BatchNorm's
    functional forward, with PyTorch's core decompositions only)."""
    from torch.onnx._internal.exporter import _core

    from ascend_grad.models.export import TABLE, joint, training_graph

    module = make(lambda: nn.Sequential(modules.ConvBNAct(3, 8, 3), modules.ResBlock(channels=8, hidden=16, groups=4)))
    inputs = (torch.randn(2, 3, 7, 6),)
    torch_prepare, second_traces = _core._prepare_exported_program_for_export, []
    monkeypatch.setattr(_core, "_prepare_exported_program_for_export",
                        lambda program, registry: second_traces.append(1) or torch_prepare(program, registry=registry))
    one = export_training_graph(module, inputs, dynamic_batch=dynamic)
    assert not second_traces
    monkeypatch.setattr(training_graph, "_decompositions", lambda: joint.decomposition_table(TABLE))
    two = export_training_graph(module, inputs, dynamic_batch=dynamic)
    assert second_traces
    assert _canonical(one) == _canonical(two)
    assert ours(one) == {"SiluBackward": 1, "GroupNormSwishGrad": 1, "GroupNormSwish": 1}, ours(one)
    assert_step_matches(one, module, inputs, run_kernels, "one trace")


# ---- what cannot be exported


@torch.library.custom_op("ascend_grad_test::twist", mutates_args=())
def twist(x: torch.Tensor) -> torch.Tensor:
    return x.flip(-1) * 2


@torch.library.custom_op("ascend_grad_test::twist_backward", mutates_args=())
def twist_backward(grad: torch.Tensor) -> torch.Tensor:
    return grad.flip(-1) * 2


twist.register_fake(lambda x: torch.empty_like(x))
twist_backward.register_fake(lambda grad: torch.empty_like(grad))
twist.register_autograd(lambda ctx, grad: twist_backward(grad))


class Twist(nn.Module):
    def forward(self, x):
        return twist(x)


def test_every_untranslatable_op_is_named_at_once_with_its_modules():
    """Two ops without a translation (a forward and its backward), used in two places: one error
    names both, each with the module paths that use it, before anything is translated."""
    module = nn.Sequential(nn.Linear(4, 4), Twist(), nn.Sequential(nn.Linear(4, 4), Twist()))
    steps = []
    with pytest.raises(UnsupportedOpsError) as caught:
        export_training_graph(module, (torch.randn(2, 4),), progress=steps.append)
    assert steps == ["trace", "check"]  # stopped before the translation
    assert caught.value.ops == {
        "ascend_grad_test.twist.default": ["1 (Twist)", "2.1 (Twist)"],
        "ascend_grad_test.twist_backward.default": ["1 (Twist)", "2.1 (Twist)"],
    }
    message = str(caught.value)
    assert "2 ops of the training step have no ONNX translation" in message
    assert "ascend_grad_test.twist_backward.default: used by 1 (Twist), 2.1 (Twist)" in message
