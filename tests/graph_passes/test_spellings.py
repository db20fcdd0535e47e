"""The spellings exporters use for the same gradient all fuse: the ones operand in every form,
commuted operands, 1 - s written other ways, the product rule, a sigmoid or softplus written out,
a sigmoid shared with the forward, float16 through Casts; the fused graph computes what the
original did."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ascend_grad.graph_passes import fuse_backward_ops
from ascend_grad.testing import assert_close, run_kernels, run_onnxruntime

F, F16, D = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE
SHAPE = [3, 5, 7]


class Graph:
    """A tiny builder: g.op("Mul", a, b) appends a node and returns its output name."""

    def __init__(self, dtype=F):
        self.nodes, self.initializers, self.dtype, self.count = [], [], dtype, 0

    def op(self, op_type, *inputs, **attributes):
        self.count += 1
        out = f"t{self.count}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attributes))
        return out

    def const(self, value, shape=(), dtype=np.float32):
        self.count += 1
        name = f"c{self.count}"
        self.initializers.append(numpy_helper.from_array(np.full(shape, value, dtype), name))
        return name

    def model(self, outputs, inputs=("dy", "x")):
        graph = helper.make_graph(
            self.nodes, "g", [helper.make_tensor_value_info(n, self.dtype, SHAPE) for n in inputs],
            [helper.make_tensor_value_info(o, self.dtype, SHAPE) for o in outputs], self.initializers,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
        return onnx.shape_inference.infer_shapes(model, strict_mode=True)


ONES = {
    "scalar": lambda g: g.const(1.0),
    "full_shape": lambda g: g.const(1.0, SHAPE),
    "constant_node": lambda g: g.op("Constant", value=numpy_helper.from_array(np.array(1.0, np.float32))),
    "constant_of_shape": lambda g: g.op("ConstantOfShape", g.op("Shape", "x"), value=numpy_helper.from_array(np.ones(1, np.float32))),
    "expand": lambda g: g.op("Expand", g.const(1.0), g.op("Shape", "x")),
    "cast_like": lambda g: g.op("CastLike", g.const(1.0, dtype=np.float64), "x"),
    "cast": lambda g: g.op("Cast", g.const(1, dtype=np.int64), to=F),
}

SIGMOIDS = {
    "Sigmoid": lambda g, a: g.op("Sigmoid", a),
    "1/(1+exp(-a))": lambda g, a: g.op("Div", g.const(1.0), g.op("Add", g.const(1.0), g.op("Exp", g.op("Neg", a)))),
    "Reciprocal": lambda g, a: g.op("Reciprocal", g.op("Add", g.op("Exp", g.op("Neg", a)), g.const(1.0))),
}

ONE_MINUS = {
    "Sub(1, s)": lambda g, one, s: g.op("Sub", one, s),
    "Neg(Sub(s, 1))": lambda g, one, s: g.op("Neg", g.op("Sub", s, one)),
    "Add(1, Neg(s))": lambda g, one, s: g.op("Add", g.op("Neg", s), one),
}


def torch_silu_backward(g, one, s, one_minus=ONE_MINUS["Sub(1, s)"], commute=False):
    """dy * s * (1 + x * (1 - s)), torch's silu_backward decomposition."""
    inner = g.op("Add", g.op("Mul", "x", one_minus(g, one, s)), one)
    d = g.op("Mul", s, inner)
    return g.op("Mul", d, "dy") if commute else g.op("Mul", "dy", d)


def product_rule(g, one, s):
    """autograd of y = x * sigmoid(x): dy * s + (dy * x) * (s * (1 - s))."""
    return g.op("Add", g.op("Mul", "dy", s), g.op("Mul", g.op("Mul", "dy", "x"), g.op("Mul", s, g.op("Sub", one, s))))


def _fuses_and_matches(model, op, rng, outputs=None):
    fused, report = fuse_backward_ops(model)
    assert report.counts[op] == 1, report.refused
    feeds = {i.name: rng.standard_normal(SHAPE).astype(np.float32) * 4 for i in model.graph.input}
    if model.graph.input[0].type.tensor_type.elem_type == F16:
        feeds = {k: v.astype(np.float16) for k, v in feeds.items()}
    want, got = run_onnxruntime(model, feeds), run_kernels(fused, feeds)
    for name in outputs or want:
        assert_close(got[name], want[name].astype(np.float64), name, tolerance=2e-3 if want[name].dtype == np.float16 else 1e-5)
    return fused


@pytest.mark.parametrize("ones", sorted(ONES))
def test_silu_with_every_ones_spelling(ones, rng):
    g = Graph()
    one = ONES[ones](g)
    _fuses_and_matches(g.model([torch_silu_backward(g, one, g.op("Sigmoid", "x"))]), "SiluBackward", rng)


@pytest.mark.parametrize("sigmoid", sorted(SIGMOIDS))
@pytest.mark.parametrize("one_minus", sorted(ONE_MINUS))
@pytest.mark.parametrize("commute", [False, True])
def test_silu_structural_variants(sigmoid, one_minus, commute, rng):
    g = Graph()
    one = g.const(1.0)
    out = torch_silu_backward(g, one, SIGMOIDS[sigmoid](g, "x"), ONE_MINUS[one_minus], commute)
    _fuses_and_matches(g.model([out]), "SiluBackward", rng)


def test_product_rule_with_the_sigmoid_shared_with_the_forward(rng):
    g = Graph()
    s = g.op("Sigmoid", "x")
    y = g.op("Mul", "x", s)  # the forward's output, also a graph output: s must stay
    dx = product_rule(g, g.const(1.0), s)
    fused = _fuses_and_matches(g.model([y, dx]), "SiluBackward", rng)
    assert "Sigmoid" in [n.op_type for n in fused.graph.node]


def test_float16_through_casts(rng):
    g = Graph(F16)
    x32, dy32 = g.op("Cast", "x", to=F), g.op("Cast", "dy", to=F)
    one = g.const(1.0)
    s = g.op("Sigmoid", x32)
    d = g.op("Mul", s, g.op("Add", g.op("Mul", x32, g.op("Sub", one, s)), one))
    out = g.op("Cast", g.op("Mul", dy32, d), to=F16)
    _fuses_and_matches(g.model([out]), "SiluBackward", rng)


SOFTPLUS = {
    "Softplus": lambda g, x: g.op("Softplus", x),
    "log(1+exp(x))": lambda g, x: g.op("Log", g.op("Add", g.const(1.0), g.op("Exp", x))),
    "torch threshold 20": lambda g, x: g.op("Where", g.op("Greater", x, g.const(20.0)), x, g.op("Softplus", x)),
}


@pytest.mark.parametrize("softplus", sorted(SOFTPLUS))
@pytest.mark.parametrize("form", ["torch", "expanded"])
def test_mish_spellings(softplus, form, rng):
    g = Graph()
    one = g.const(1.0)
    t = g.op("Tanh", SOFTPLUS[softplus](g, "x"))
    s = g.op("Sigmoid", "x")
    if form == "torch":  # dy * (t + x * s * (1 - t * t))
        d = g.op("Add", t, g.op("Mul", g.op("Mul", "x", s), g.op("Sub", one, g.op("Mul", t, t))))
        out = g.op("Mul", "dy", d)
    else:  # dy * t + (dy * x) * s - (dy * x) * s * t^2
        dyx_s = g.op("Mul", g.op("Mul", "dy", "x"), s)
        t2 = g.op("Pow", t, g.const(2.0))
        out = g.op("Sub", g.op("Add", g.op("Mul", "dy", t), dyx_s), g.op("Mul", dyx_s, t2))
    _fuses_and_matches(g.model([out]), "MishBackward", rng)


# onnxruntime-training's gradient of Mish as ascend_grad.training respells it (softplus overflow-free:
# relu(x) + log(1 + exp(-|x|))): TanhGrad, ReluGrad, Sign and a division, summed by Sum
def _ort_mish_backward(with_x_factor=True):
    ms = "com.microsoft"
    nodes = [helper.make_node("Abs", ["x"], ["abs"]), helper.make_node("Neg", ["abs"], ["neg"]),
             helper.make_node("Exp", ["neg"], ["e"]), helper.make_node("Add", ["e", "one"], ["1p"]),
             helper.make_node("Log", ["1p"], ["log"]), helper.make_node("Relu", ["x"], ["relu"]),
             helper.make_node("Add", ["relu", "log"], ["sp"]), helper.make_node("Tanh", ["sp"], ["t"]),
             helper.make_node("Mul", ["dy", "t"], ["g1"]),
             helper.make_node("Mul", ["dy", "x"] if with_x_factor else ["dy", "dy"], ["dt"]),
             helper.make_node("TanhGrad", ["dt", "t"], ["dsp"], domain=ms),
             helper.make_node("ReluGrad", ["dsp", "relu"], ["g2"], domain=ms),
             helper.make_node("Div", ["dsp", "1p"], ["q"]), helper.make_node("Mul", ["q", "e"], ["m"]),
             helper.make_node("Neg", ["m"], ["nm"]), helper.make_node("Sign", ["x"], ["sign"]),
             helper.make_node("Mul", ["nm", "sign"], ["g0"]), helper.make_node("Sum", ["g0", "g1", "g2"], ["dx"])]
    graph = helper.make_graph(nodes, "ort_mish", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 8]) for n in ("dy", "x")],
                              [helper.make_tensor_value_info("dx", TensorProto.FLOAT, [4, 8])],
                              [numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ms, 1)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model)


def test_onnxruntime_training_mish_backward_fuses_and_equals_it_at_zero_and_far_out(in_onnxruntime_training):
    """Its derivative of softplus, relu'(x) - sign(x) e / (1 + e), is sigmoid(x) except at x = 0,
    where the term it multiplies, dy * x * (1 - t^2), is 0 too: the sum is MishBackward exactly;
    checked in onnxruntime-training on x = 0, tiny, moderate and +-90."""
    model = _ort_mish_backward()
    fused, report = fuse_backward_ops(model)
    assert {k: v for k, v in report.counts.items() if v} == {"MishBackward": 1}, report.refused
    assert [n.op_type for n in fused.graph.node] == ["MishBackward"]
    rng = np.random.default_rng(3)
    x = np.concatenate([[0.0, -0.0, 1e-30, -1e-30, 1e-4, -1e-4, 90.0, -90.0, 30.0, -30.0, 3.0, -3.0],
                        rng.standard_normal(20)]).astype(np.float32).reshape(4, 8)
    results = in_onnxruntime_training(model, fused, {"x": x, "dy": rng.standard_normal((4, 8)).astype(np.float32)})
    np.testing.assert_allclose(results["fused/dx"], results["original/dx"], rtol=2e-6, atol=1e-7)


def test_onnxruntime_training_softplus_derivative_without_the_factor_x_stays():
    """d * (relu'(x) - sign(x) e / (1 + e)) is not d * sigmoid(x) at x = 0 unless d is 0 there."""
    _, report = fuse_backward_ops(_ort_mish_backward(with_x_factor=False))
    assert report.counts["MishBackward"] == 0


def _fold_parameter_views(model):
    """The graph as an optimizer that folds constants leaves it: every Reshape, Unsqueeze or Squeeze
    of an initializer (gamma unsqueezed for the forward, grouped for the backward's c1, ...) becomes
    an initializer of its own, so the pattern reads copies of the parameter in other shapes."""
    from onnx.reference import ReferenceEvaluator

    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    known = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    known |= {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in graph.node
              if n.op_type == "Constant" and n.attribute[0].name == "value"}
    folded = 0
    for node in list(graph.node):
        if node.op_type in ("Reshape", "Unsqueeze", "Squeeze") and all(i in known for i in node.input):
            arrays = [known[i] for i in node.input]
            names = [f"i{k}" for k in range(len(arrays))]
            info = lambda name, a: helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), None)  # noqa: E731
            single = helper.make_model(helper.make_graph(
                [helper.make_node(node.op_type, names, ["o"], **{a.name: helper.get_attribute_value(a) for a in node.attribute})],
                "view", [info(n, a) for n, a in zip(names, arrays)], [info("o", arrays[0])]), opset_imports=model.opset_import)
            known[node.output[0]] = ReferenceEvaluator(single).run(None, dict(zip(names, arrays)))[0]
            graph.initializer.append(numpy_helper.from_array(known[node.output[0]], node.output[0]))
            graph.node.remove(node)
            folded += 1
    return model, folded


def _with_parameters(model, gamma, beta):
    """model with norm.weight and norm.bias holding `gamma` and `beta` everywhere (None: as trained)."""
    for tensor in model.graph.initializer:
        value = {"norm.weight": gamma, "norm.bias": beta}.get(tensor.name)
        if value is not None:
            tensor.CopyFrom(numpy_helper.from_array(np.full(tuple(tensor.dims), value, np.float32), tensor.name))
    return model


# a fresh GroupNorm (gamma ones, beta zeros: the algebra reads a constant of one repeated value as
# that number, so c1 = rstd * ones is rstd * 1) and one of another repeated value
PARAMETERS = {"as trained": (None, None), "fresh": (1.0, 0.0), "repeated": (2.0, -0.5)}


@pytest.mark.parametrize("parameters", PARAMETERS)
@pytest.mark.parametrize("name", ["resblock.export.opt", "gn_scaled_swish.export.opt", "resblock.aot.opt"])
def test_parameters_folded_into_copies_of_other_shapes(name, parameters):
    """gamma and beta reach forward and backward as folded constants ((C, 1, 1), (1, G, C/G), (1, C)),
    not as the parameter (a training step exported with its parameters captured as constants and
    folded): read by value, the GroupNorm + swish forward and its backward fuse to one node each, the
    statistics chain goes, and the result equals the graph as written."""
    from ascend_grad.models import graph_path
    from ascend_grad.verify import random_feeds

    model, folded = _fold_parameter_views(_with_parameters(onnx.load(graph_path(name)), *PARAMETERS[parameters]))
    assert folded >= 4
    fused, report = fuse_backward_ops(model)
    assert {k: v for k, v in report.counts.items() if v} == {"GroupNormSwishGrad": 1, "GroupNormSwish": 1}, report.refused
    (forward,) = [n for n in fused.graph.node if n.op_type == "GroupNormSwish"]
    assert helper.get_attribute_value(next(a for a in forward.attribute if a.name == "activate_swish")) == 1
    assert not [n for n in fused.graph.node if n.op_type in ("Sqrt", "InstanceNormalization", "Sigmoid")]
    feeds = random_feeds(model)
    want, got = run_onnxruntime(model, feeds), run_kernels(fused, feeds)
    for output in want:
        assert np.abs(got[output] - want[output]).max() <= 1e-5 * np.abs(want[output]).max(), output


def test_folded_gamma_of_ones_read_by_value_not_by_name():
    """A fresh gamma folded by value: where the backward's copy holds other values than the forward's
    gamma (2 in c1's (1, G, C/G) copy, ones in the forward), the backward is not this GroupNorm's."""
    from ascend_grad.models import graph_path

    model, _ = _fold_parameter_views(_with_parameters(onnx.load(graph_path("resblock.export.opt")), 1.0, 0.0))
    (copy,) = [t for t in model.graph.initializer if list(t.dims) == [1, 32, 2]]  # c1's gamma, grouped
    copy.CopyFrom(numpy_helper.from_array(np.full((1, 32, 2), 2.0, np.float32), copy.name))
    _, report = fuse_backward_ops(model)
    assert report.counts["GroupNormSwishGrad"] == 0
    assert "c1 does not use gamma" in report.refused["GroupNormSwishGrad at getitem"]


def test_fresh_group_norm_folded_by_onnxscripts_optimizer():
    """The issue's spelling end to end: a freshly initialised Conv -> GroupNorm(32) -> SiLU -> Conv
    training step whose parameters the exporter's optimizer treats as constants and folds (gamma all
    ones, beta all zeros): the backward had been refused ('c1 is not rstd * gamma'), which left the
    forward fused as a GroupNorm alone beside its statistics chain."""
    torch = pytest.importorskip("torch")
    import onnx_ir as ir
    import onnxscript.optimizer

    from ascend_grad.models import routes
    from ascend_grad.verify import random_feeds

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(4, 64, 3, padding=1), torch.nn.GroupNorm(32, 64), torch.nn.SiLU(),
                                 torch.nn.Conv2d(64, 4, 3, padding=1))
    folded = ir.serde.deserialize_model(routes.aot_joint(module, (torch.randn(2, 4, 8, 8),)))
    onnxscript.optimizer.optimize(folded)
    model = ir.serde.serialize_model(folded)
    assert [t for t in model.graph.initializer if list(t.dims) == [1, 32, 2]], "the optimizer no longer folds gamma's copy"
    fused, report = fuse_backward_ops(model)
    assert {k: v for k, v in report.counts.items() if v} == {"GroupNormSwishGrad": 1, "GroupNormSwish": 1}, report.refused
    assert [f["activate_swish"] for f in report.fused if f["op"] == "GroupNormSwish"] == [1]
    assert not [n for n in fused.graph.node if n.op_type in ("Sqrt", "InstanceNormalization", "Sigmoid")]
    feeds = random_feeds(model, seed=1)
    want, got = run_onnxruntime(model, feeds), run_kernels(fused, feeds)
    for output in want:
        assert np.abs(got[output] - want[output]).max() <= 1e-5 * np.abs(want[output]).max(), output
