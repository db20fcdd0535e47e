"""The forward fusion: GroupNorm (every spelling) followed by a swish, or alone, becomes one
GroupNormSwish; the result equals the graph as written and the float64 reference; what is not
exactly the op's math stays, with the reason; in training graphs the statistics chain goes."""

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from ascend_grad import DOMAIN
from ascend_grad.graph_passes import fuse_backward_ops
from ascend_grad.models import graph_path, modules
from ascend_grad.ops import reference
from ascend_grad.testing import run_kernels, run_onnxruntime

F = TensorProto.FLOAT
SHAPE, C, G = (2, 6, 5, 3), 6, 3  # odd sizes: C/G = 2, HxW = 15


def _const(name, array):
    return numpy_helper.from_array(np.asarray(array, np.float32), name)


def _normalise(spelling, eps):
    """Nodes normalising g (N, G, M) into n: InstanceNormalization, LayerNormalization, or
    the statistics written out, as exporters spell them."""
    if spelling == "InstanceNormalization":
        return [helper.make_node("InstanceNormalization", ["g", "ones_G", "zeros_G"], ["n"], epsilon=eps)]
    if spelling == "LayerNormalization":
        return [helper.make_node("LayerNormalization", ["g", "one", "zero"], ["n"], axis=2, epsilon=eps)]
    mean = [helper.make_node("ReduceMean", ["g", "axis2"], ["m"], keepdims=1)]
    centred = [helper.make_node("Sub", ["g", "m"], ["d"])]
    if spelling == "statistics (sum / M, Pow -0.5)":
        mean = [helper.make_node("ReduceSum", ["g", "axis2"], ["total"], keepdims=1), helper.make_node("Div", ["total", "M"], ["m"])]
        var = [helper.make_node("Pow", ["d", "two"], ["d2"]), helper.make_node("ReduceMean", ["d2", "axis2"], ["v"], keepdims=1)]
        rstd = [helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Pow", ["ve", "minus_half"], ["r"])]
        return mean + centred + var + rstd + [helper.make_node("Mul", ["d", "r"], ["n"])]
    var = [helper.make_node("Mul", ["d", "d"], ["d2"]), helper.make_node("ReduceMean", ["d2", "axis2"], ["v"], keepdims=1),
           helper.make_node("Add", ["eps", "v"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["sd"])]
    if spelling == "statistics (divide by sqrt)":
        return mean + centred + var + [helper.make_node("Div", ["d", "sd"], ["n"])]
    return mean + centred + var + [helper.make_node("Reciprocal", ["sd"], ["r"]), helper.make_node("Mul", ["r", "d"], ["n"])]


SPELLINGS = ["InstanceNormalization", "LayerNormalization", "statistics", "statistics (divide by sqrt)",
             "statistics (sum / M, Pow -0.5)", "GroupNormalization-21", "GroupNormalization-18"]


def group_norm_graph(spelling, activation="silu", eps=1e-5, folded=False, extra_output=None, opset=21, seed=0):
    """x (N, C, H, W) -> GroupNorm(G) -> activation ("silu", a scale b for z * sigmoid(b z), None)."""
    rng = np.random.default_rng(seed)
    gamma, beta = rng.normal(1.0, 0.3, C).astype(np.float32), rng.normal(0.0, 0.3, C).astype(np.float32)
    inits = [_const("gamma", gamma), _const("beta", beta), _const("ones_G", np.ones(G)), _const("zeros_G", np.zeros(G)),
             _const("one", 1.0), _const("zero", 0.0), _const("two", 2.0), _const("minus_half", -0.5),
             _const("eps", eps), _const("M", C // G * 15), numpy_helper.from_array(np.array([2], np.int64), "axis2"),
             numpy_helper.from_array(np.array([0, G, -1], np.int64), "groups_shape"),
             numpy_helper.from_array(np.array(SHAPE, np.int64), "x_shape"),
             numpy_helper.from_array(np.array([1, 2], np.int64), "trailing")]
    if spelling.startswith("GroupNormalization"):
        opset = int(spelling.split("-")[1])
        if opset == 18:  # one scale and bias per group
            inits += [_const("gamma_G", gamma[::C // G]), _const("beta_G", beta[::C // G])]
            gamma, beta = np.repeat(gamma[::C // G], C // G), np.repeat(beta[::C // G], C // G)  # per channel
            nodes = [helper.make_node("GroupNormalization", ["x", "gamma_G", "beta_G"], ["z"], num_groups=G, epsilon=eps)]
        else:
            nodes = [helper.make_node("GroupNormalization", ["x", "gamma", "beta"], ["z"], num_groups=G, epsilon=eps)]
    else:
        nodes = [helper.make_node("Reshape", ["x", "groups_shape"], ["g"]), *_normalise(spelling, eps),
                 helper.make_node("Reshape", ["n", "x_shape"], ["back"])]
        if folded:  # the exporter's optimizer folded Unsqueeze(gamma) into a (C, 1, 1) constant
            inits += [_const("gamma_c11", gamma.reshape(C, 1, 1)), _const("beta_c11", beta.reshape(C, 1, 1))]
            weight, bias = "gamma_c11", "beta_c11"
        else:
            nodes += [helper.make_node("Unsqueeze", ["gamma", "trailing"], ["gamma_u"]),
                      helper.make_node("Unsqueeze", ["beta", "trailing"], ["beta_u"])]
            weight, bias = "gamma_u", "beta_u"
        nodes += [helper.make_node("Mul", ["back", weight], ["scaled"]), helper.make_node("Add", ["scaled", bias], ["z"])]
    if activation == "silu":
        nodes += [helper.make_node("Sigmoid", ["z"], ["s"]), helper.make_node("Mul", ["z", "s"], ["y"])]
    elif activation is not None:
        inits.append(_const("b", activation))
        nodes += [helper.make_node("Mul", ["b", "z"], ["bz"]), helper.make_node("Sigmoid", ["bz"], ["s"]),
                  helper.make_node("Mul", ["s", "z"], ["y"])]
    else:
        nodes.append(helper.make_node("Identity", ["z"], ["y"]))
    outputs = [helper.make_tensor_value_info("y", F, list(SHAPE))]
    if extra_output:
        outputs.append(helper.make_tensor_value_info(extra_output, F, None))
    graph = helper.make_graph(nodes, "group_norm", [helper.make_tensor_value_info("x", F, list(SHAPE))], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return onnx.shape_inference.infer_shapes(model), gamma, beta


def _x(seed=1, offset=3.0):
    return (np.random.default_rng(seed).standard_normal(SHAPE) * 2 + offset).astype(np.float32)


def _error(got, want):
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


# gamma and beta as views of the parameters, or as the folded (C, 1, 1) copies an optimizer makes
# (GroupNormalization reads its parameters directly: no folded variant)
PARAMETERS = [(s, False) for s in SPELLINGS] + [(s, True) for s in SPELLINGS if not s.startswith("GroupNormalization")]


@pytest.mark.parametrize("activation", ["silu", 1.7, None], ids=["SiLU", "swish 1.7", "no activation"])
@pytest.mark.parametrize("spelling, folded", PARAMETERS, ids=[f"{s}-{'folded' if f else 'views'}" for s, f in PARAMETERS])
def test_every_spelling_fuses_to_one_node_equal_to_the_graph(spelling, activation, folded):
    model, gamma, beta = group_norm_graph(spelling, activation, folded=folded)
    fused, report = fuse_backward_ops(model)
    assert {k: v for k, v in report.counts.items() if v} == {"GroupNormSwish": 1}, report.refused
    (node,) = [n for n in fused.graph.node if n.domain == DOMAIN]
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attributes["num_groups"] == G and attributes["activate_swish"] == int(activation is not None)
    assert attributes["swish_scale"] == pytest.approx(1.0 if activation in ("silu", None) else activation)
    assert {n.op_type for n in fused.graph.node} <= {"GroupNormSwish", "Identity"}  # nothing of the GroupNorm is left
    x = _x()
    want = reference.group_norm_swish(x, gamma, beta, G, 1e-5, 1.0 if activation in ("silu", None) else activation,
                                      activation is not None)[0]
    written = run_onnxruntime(model, {"x": x})["y"]
    assert _error(written, want) <= 1e-5  # (the graph as written is GroupNorm: the test's own check)
    assert _error(run_kernels(fused, {"x": x})["y"], want) <= 1e-5
    assert _error(run_onnxruntime(fused, {"x": x})["y"], want) <= 1e-5  # the function body
    again, second = fuse_backward_ops(fused)
    assert sum(second.counts.values()) == 0 and len(again.graph.node) == len(fused.graph.node)


@pytest.mark.parametrize("case, expected", [
    ("affine off", "affine off"),
    ("intermediate read elsewhere", "read beyond the GroupNorm"),
    ("InstanceNormalization with a scale", "its own scale or bias"),
    ("unbiased variance", None),
    ("eps outside the sqrt", None),
    ("variance around another mean", None),
    ("GroupNormalization in double", "computes in type"),
])
def test_what_is_not_the_math_stays(case, expected):
    model, _, _ = group_norm_graph("statistics" if case in ("unbiased variance", "eps outside the sqrt",
                                                            "variance around another mean") else "InstanceNormalization")
    graph = model.graph
    nodes = {n.output[0]: n for n in graph.node}
    if case == "affine off":  # y = silu(back)
        for n in graph.node:
            n.input[:] = ["back" if v == "z" else v for v in n.input]
    elif case == "intermediate read elsewhere":
        model, _, _ = group_norm_graph("InstanceNormalization", extra_output="n")
    elif case == "InstanceNormalization with a scale":
        graph.initializer.append(_const("twos_G", np.full(G, 2.0)))
        nodes["n"].input[1] = "twos_G"
    elif case == "unbiased variance":  # ReduceSum / (M - 1) is not the biased variance
        v = nodes["v"]
        graph.node.remove(v)
        graph.initializer.append(_const("M1", C // G * 15 - 1))
        graph.node.extend([helper.make_node("ReduceSum", ["d2", "axis2"], ["v_sum"], keepdims=1),
                           helper.make_node("Div", ["v_sum", "M1"], ["v"])])
    elif case == "eps outside the sqrt":  # 1 / (sqrt(var) + eps)
        for name, node in (("ve", nodes["ve"]), ("sd", nodes["sd"])):
            graph.node.remove(node)
        graph.node.extend([helper.make_node("Sqrt", ["v"], ["sv"]), helper.make_node("Add", ["sv", "eps"], ["sd"])])
    elif case == "variance around another mean":  # (g - mean)^2 averaged, with mean of 2 g
        graph.initializer.append(_const("two_", 2.0))
        graph.node.extend([helper.make_node("Mul", ["g", "two_"], ["g2"]),
                           helper.make_node("ReduceMean", ["g2", "axis2"], ["m2"], keepdims=1),
                           helper.make_node("Sub", ["g", "m2"], ["d_other"])])
        nodes["d2"].input[:] = ["d_other", "d_other"]
    elif case == "GroupNormalization in double":
        model, _, _ = group_norm_graph("GroupNormalization-21")
        model.graph.node[0].attribute.append(helper.make_attribute("stash_type", 11))
    sorted_model = _toposorted(model)
    fused, report = fuse_backward_ops(sorted_model)
    assert report.counts["GroupNormSwish"] == 0
    if expected is not None:
        assert any(expected in reason for reason in report.refused.values()), report.refused
    if case != "GroupNormalization in double":  # (onnxruntime runs only float stash types)
        x = _x()
        np.testing.assert_array_equal(run_onnxruntime(fused, {"x": x})["y"], run_onnxruntime(sorted_model, {"x": x})["y"])


def _toposorted(model):
    import onnx_ir as ir
    from onnx_ir.passes.common import TopologicalSortPass

    m = ir.serde.deserialize_model(model)
    TopologicalSortPass()(m)
    return ir.serde.serialize_model(m)


@pytest.mark.parametrize("name", ["resblock.aot.opt", "resblock.export.dyn", "gn_scaled_swish.aot.noopt", "resblock.aot.fp16"])
def test_training_graphs_lose_the_statistics_chain(name):
    """The fused backward reads the fused forward's mean and rstd: no ReduceMean is left."""
    model = onnx.load(graph_path(name))
    fused, report = fuse_backward_ops(model)
    assert report.counts["GroupNormSwish"] == 1 and report.counts["GroupNormSwishGrad"] == 1
    means = [sum(n.op_type == "ReduceMean" for n in m.graph.node) for m in (model, fused)]
    assert means[1] <= means[0] - 2  # the statistics' mean and variance (the loss keeps its own)
    assert not [n for n in fused.graph.node if n.op_type in ("InstanceNormalization", "Sqrt", "Reciprocal")]
    (forward,) = [n for n in fused.graph.node if n.op_type == "GroupNormSwish"]
    (backward,) = [n for n in fused.graph.node if n.op_type == "GroupNormSwishGrad"]
    producers = {o: n for n in fused.graph.node for o in n.output}
    for k in (1, 2):  # mean, rstd: the forward's outputs (through a Cast in a float16 graph)
        source = producers[backward.input[k]]
        source = producers[source.input[0]] if source.op_type == "Cast" else source
        assert source is forward


def _export_inference(module, x, dynamo):
    import io

    buffer = io.BytesIO()
    module.eval()
    if dynamo:
        program = torch.onnx.export(module, (x,), dynamo=True, opset_version=18, optimize=True)
        return program.model_proto
    torch.onnx.export(module, (x,), buffer, dynamo=False, opset_version=17, input_names=["x"], output_names=["y"])
    return onnx.load_from_string(buffer.getvalue())


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("block", ["resblock", "gn_swish"])
def test_inference_exports_fuse_the_forward(block, dynamo):
    torch.manual_seed(0)
    module = modules.ResBlock() if block == "resblock" else modules.GroupNormSwishBlock()
    x = torch.randn(2, 4, 8, 8)
    model = _export_inference(module, x, dynamo)
    fused, report = fuse_backward_ops(model)
    assert report.counts["GroupNormSwish"] >= 1, report.refused
    assert len(fused.graph.node) < len(model.graph.node)
    name = model.graph.input[0].name
    with torch.no_grad():
        want = module(x).double().numpy()
    got = list(run_kernels(fused, {name: x.numpy()}).values())[0]
    assert _error(got, want) <= 1e-5


def test_z_read_beyond_the_swish_fuses_the_group_norm_alone():
    """y = silu(z) and z itself read elsewhere (a residual): the swish cannot take z from its other
    reader, so the GroupNorm fuses alone (activate_swish = 0) and the swish stays."""
    model, _, _ = group_norm_graph("InstanceNormalization", "silu")
    model.graph.node.append(helper.make_node("Add", ["y", "z"], ["out"]))
    model.graph.output[0].name = "out"
    fused, report = fuse_backward_ops(model)
    assert report.counts["GroupNormSwish"] == 1 and report.refused == {}
    (node,) = [n for n in fused.graph.node if n.domain == DOMAIN]
    assert {a.name: helper.get_attribute_value(a) for a in node.attribute}["activate_swish"] == 0
    assert sorted(n.op_type for n in fused.graph.node) == ["Add", "GroupNormSwish", "Mul", "Sigmoid"]
    x = _x()
    want = run_onnxruntime(model, {"x": x})["out"].astype(np.float64)
    assert _error(run_kernels(fused, {"x": x})["out"], want) <= 1e-5


@pytest.mark.parametrize("spelling", ["GroupNormalization-18", "GroupNormalization-21", "InstanceNormalization"])
def test_parameters_as_graph_inputs(spelling):
    """gamma and beta fed at run time: the fused node reads them (GroupNormalization-18's per-group
    values repeated per channel by nodes, not folded)."""
    model, _, _ = group_norm_graph(spelling, "silu")
    names = ["gamma_G", "beta_G"] if spelling.endswith("18") else ["gamma", "beta"]
    feeds = {"x": _x()}
    for name in names:
        (init,) = [i for i in model.graph.initializer if i.name == name]
        feeds[name] = numpy_helper.to_array(init)
        model.graph.initializer.remove(init)
        model.graph.input.append(helper.make_tensor_value_info(name, F, list(feeds[name].shape)))
    fused, report = fuse_backward_ops(model)
    assert report.counts["GroupNormSwish"] == 1, report.refused
    (node,) = [n for n in fused.graph.node if n.domain == DOMAIN]
    want = run_onnxruntime(model, feeds)["y"].astype(np.float64)
    assert _error(run_kernels(fused, feeds)["y"], want) <= 1e-5
    assert _error(run_onnxruntime(fused, feeds)["y"], want) <= 1e-5


def test_rank_3_with_one_channel_per_group_needs_no_reshape_back():
    """(N, C, L) with G == C (a diffusers attention block's GroupNorm): the regrouping keeps x's
    shape, and exporters write no Reshape back; the GroupNorm alone still fuses."""
    N, C3, L = 2, 4, 6
    rng = np.random.default_rng(5)
    gamma, beta = rng.normal(1, 0.3, C3).astype(np.float32), rng.normal(0, 0.3, C3).astype(np.float32)
    nodes = [helper.make_node("Reshape", ["x", "groups_shape"], ["g"]),
             helper.make_node("InstanceNormalization", ["g", "ones", "zeros"], ["n"], epsilon=1e-5),
             helper.make_node("Mul", ["n", "gamma_c1"], ["scaled"]), helper.make_node("Add", ["scaled", "beta_c1"], ["y"])]
    inits = [numpy_helper.from_array(np.array([0, C3, -1], np.int64), "groups_shape"), _const("ones", np.ones(C3)),
             _const("zeros", np.zeros(C3)), _const("gamma_c1", gamma.reshape(C3, 1)), _const("beta_c1", beta.reshape(C3, 1))]
    graph = helper.make_graph(nodes, "attention_norm", [helper.make_tensor_value_info("x", F, [N, C3, L])],
                              [helper.make_tensor_value_info("y", F, [N, C3, L])], inits)
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10))
    fused, report = fuse_backward_ops(model)
    assert report.counts["GroupNormSwish"] == 1, report.refused
    x = (rng.standard_normal((N, C3, L)) * 3 + 1).astype(np.float32)
    want = reference.group_norm_swish(x, gamma, beta, C3, 1e-5, 1.0, False)[0]
    assert _error(run_kernels(fused, {"x": x})["y"], want) <= 1e-5


def test_a_cast_of_x_read_elsewhere_too_is_not_the_group_norms():
    """x arrives in float16 and is cast to float once, for the GroupNorm and a residual: the Cast
    belongs to x, not to the GroupNorm, so the GroupNorm+SiLU still fuses (reading x cast)."""
    model, gamma, beta = group_norm_graph("InstanceNormalization", "silu")
    graph = model.graph
    for node in graph.node:
        node.input[:] = ["xf" if v == "x" else v for v in node.input]
    graph.node.insert(0, helper.make_node("Cast", ["x"], ["xf"], to=F))
    graph.node.append(helper.make_node("Add", ["y", "xf"], ["out"]))
    graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    graph.output[0].name = "out"
    del graph.value_info[:]
    model = onnx.shape_inference.infer_shapes(model)
    fused, report = fuse_backward_ops(model)
    assert report.counts["GroupNormSwish"] == 1, report.refused
    x = _x().astype(np.float16)
    want = run_onnxruntime(model, {"x": x})["out"].astype(np.float64)
    assert _error(run_kernels(fused, {"x": x})["out"], want) <= 1e-5
