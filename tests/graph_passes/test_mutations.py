"""Seeded random mutations of the decomposed subgraphs the pass fuses, on small bundled graphs.

The mutated nodes are those the pass removes from the unmutated graph (the decomposed forward and
backward it replaces). Each mutation either changes the math (a constant's value, swapped Sub/Div
operands, a reduction's axes, a Mul turned into an Add) or keeps it (an extra graph output reading
an intermediate, a constant initializer re-spelt as a Constant node of the same value). For every
mutated graph that onnxruntime runs: fuse_backward_ops, then the fused graph with the kernels must
give every output of the mutated unfused graph within test_bundled_graphs' bound
(verify.fused_graph_bound: SPEC.md's bound in float32, twice it in float16), whether or not the pass fused: a change of the math must make
the pass refuse or fuse something still exact. Math-preserving mutations must moreover keep every
fusion of the unmutated graph except where an intermediate the fused node swallows became a graph
output. Prints the seed, the mutations tried and how many the pass fused vs left alone.

ASCEND_GRAD_SEED=<n> replays a run (the rng fixture of tests/conftest.py).
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from ascend_grad.graph_passes import fuse_backward_ops
from ascend_grad.models import graph_path
from ascend_grad.testing import run_kernels, run_onnxruntime
from ascend_grad.verify import fused_graph_bound, random_feeds

GRAPHS = ["silu_mlp.aot.opt", "swish_mlp.aot.opt", "mish_mlp.aot.opt", "gn_swish.aot.opt", "gn_scaled_swish.export.opt"]
PER_GRAPH = 12
KINDS = ["constant_value", "constant_respelt", "swap_operands", "reduction_axes", "mul_to_add", "extra_reader"]
PRESERVING = {"constant_respelt", "extra_reader"}
TALLY = collections.Counter()
ort.set_default_logger_severity(3)  # mutated graphs make onnxruntime warn about shapes it merges leniently


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    print(f"\nmutations: {TALLY['tried']} tried on {len(GRAPHS)} graphs ({TALLY['invalid']} drawn but not runnable "
          f"unfused, redrawn); fused {TALLY['fused']}, left alone {TALLY['left alone']}; "
          f"math-preserving {TALLY['preserving']}, math-changing {TALLY['changing']}")
    for key in sorted(k for k in TALLY if "/" in k):
        print(f"  {key}: {TALLY[key]}")


def _initializers(model):
    return {t.name: t for t in model.graph.initializer}


def _constants(model):
    return {n.output[0]: n for n in model.graph.node if n.op_type == "Constant" and n.output}


def _const_value(model, name):
    inits = _initializers(model)
    if name in inits:
        return numpy_helper.to_array(inits[name])
    node = _constants(model).get(name)
    if node is not None:
        attr = node.attribute[0]
        if attr.name == "value":
            return numpy_helper.to_array(attr.t)
        return np.asarray(helper.get_attribute_value(attr))
    return None


def _set_const(model, name, value):
    """Give the constant `name` a new value under a new name and point the consumers at it."""
    new = f"{name}__mut"
    model.graph.initializer.append(numpy_helper.from_array(np.asarray(value), new))
    return new


def _fused_nodes(model):
    """Indices of the nodes the pass removes from `model` (their outputs vanish)."""
    fused, _ = fuse_backward_ops(model)
    after = {o for n in fused.graph.node for o in n.output}
    return [i for i, n in enumerate(model.graph.node) if n.output and not set(n.output) <= after]


def _mutate(model, targets, kind, rng):
    """A mutated copy of model, or None when kind has no site among the targets."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    nodes = m.graph.node
    if kind in ("constant_value", "constant_respelt"):
        sites = [(i, k) for i in targets for k, name in enumerate(nodes[i].input)
                 if nodes[i].op_type not in ("Reshape", "Expand", "ReduceSum", "ReduceMean", "Squeeze", "Unsqueeze",
                                             "Slice", "Constant", "ConstantOfShape", "Transpose")
                 and (v := _const_value(m, name)) is not None and v.dtype.kind == "f" and v.size <= 16]
        if not sites:
            return None, None
        i, k = sites[int(rng.integers(len(sites)))]
        name = nodes[i].input[k]
        value = _const_value(m, name)
        if kind == "constant_value":
            change = float(rng.choice([0.5, 1.5, -1.0, 2.0]))
            new_value = (value * change + (0.25 if not np.any(value) else 0.0)).astype(value.dtype)
            nodes[i].input[k] = _set_const(m, name, new_value)
            return m, f"{nodes[i].op_type} {nodes[i].name or i} input {k} ({name}={value.ravel()[:4]}) -> {new_value.ravel()[:4]}"
        const = helper.make_node("Constant", [], [f"{name}__respelt{i}"], value=numpy_helper.from_array(value, f"{name}__t"))
        nodes[i].input[k] = const.output[0]
        nodes.insert(i, const)
        return m, f"{nodes[i + 1].op_type} {nodes[i + 1].name or i} input {k} ({name}) as a Constant node"
    if kind == "swap_operands":
        sites = [i for i in targets if nodes[i].op_type in ("Sub", "Div") and nodes[i].input[0] != nodes[i].input[1]]
        if not sites:
            return None, None
        i = sites[int(rng.integers(len(sites)))]
        a, b = nodes[i].input
        nodes[i].input[0], nodes[i].input[1] = b, a
        return m, f"{nodes[i].op_type} {nodes[i].name or i}({a}, {b}) operands swapped"
    if kind == "reduction_axes":
        sites = [i for i in targets if nodes[i].op_type.startswith("Reduce")]
        if not sites:
            return None, None
        i = sites[int(rng.integers(len(sites)))]
        node = nodes[i]
        axes_attr = [a for a in node.attribute if a.name == "axes"]
        old = list(axes_attr[0].ints) if axes_attr else (
            list(_const_value(m, node.input[1]).ravel()) if len(node.input) > 1 and node.input[1] else None)
        if old is None:
            return None, None
        new = sorted({int(a) for a in old} ^ {int(rng.integers(-1, 3))}) or [0]
        if new == sorted(int(a) for a in old):
            new = [int(a) for a in old][:-1] or [1]
        if axes_attr:
            axes_attr[0].ClearField("ints")
            axes_attr[0].ints.extend(new)
        else:
            node.input[1] = _set_const(m, node.input[1], np.asarray(new, np.int64))
        return m, f"{node.op_type} {node.name or i} axes {old} -> {new}"
    if kind == "mul_to_add":
        sites = [i for i in targets if nodes[i].op_type == "Mul"]
        if not sites:
            return None, None
        i = sites[int(rng.integers(len(sites)))]
        nodes[i].op_type = "Add"
        return m, f"Mul {nodes[i].name or i}({', '.join(nodes[i].input)}) -> Add"
    if kind == "extra_reader":
        sites = [i for i in targets if nodes[i].op_type not in ("Constant",)]
        i = sites[int(rng.integers(len(sites)))]
        name = nodes[i].output[0]
        m.graph.output.append(helper.make_value_info(name, onnx.TypeProto()))
        return m, f"{nodes[i].op_type} {nodes[i].name or i} output {name} also a graph output"
    raise ValueError(kind)


def _relative_error(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return np.inf
    same_nonfinite = ~np.isfinite(want) & ((got == want) | (np.isnan(got) & np.isnan(want)))
    if (~np.isfinite(want) & ~same_nonfinite).any() or (~np.isfinite(got) & np.isfinite(want)).any():
        return np.inf
    finite = np.isfinite(want)
    if not finite.any():
        return 0.0
    return float(np.abs(got[finite] - want[finite]).max() / (np.abs(want[finite]).max() or 1.0))


@pytest.mark.parametrize("name", GRAPHS)
def test_mutated_graphs_stay_exact(rng, name):
    original = onnx.load(graph_path(name))
    _, base_report = fuse_backward_ops(original)
    base_counts = {k: v for k, v in base_report.counts.items() if v}
    targets = _fused_nodes(original)
    assert targets, f"{name}: the pass fuses nothing here"
    feeds = random_feeds(original, seed=int(rng.integers(2**31)), symbolic=3)
    bound = fused_graph_bound(original)  # as test_bundled_graphs
    failures, kinds_seen = [], collections.Counter()
    tried = attempts = 0
    while tried < PER_GRAPH and attempts < 6 * PER_GRAPH:
        attempts += 1
        kind = KINDS[tried % len(KINDS)] if attempts <= PER_GRAPH else str(rng.choice(KINDS))
        mutated, what = _mutate(original, targets, kind, rng)
        if mutated is None:
            continue
        try:
            expected = run_onnxruntime(mutated, feeds)
        except Exception:  # e.g. new axes that make shapes disagree: not a graph anyone runs
            TALLY["invalid"] += 1
            continue
        tried += 1
        kinds_seen[kind] += 1
        TALLY["tried"] += 1
        TALLY["preserving" if kind in PRESERVING else "changing"] += 1
        fused, report = fuse_backward_ops(mutated)
        counts = {k: v for k, v in report.counts.items() if v}
        verdict = "fused" if counts == base_counts else ("left alone" if not counts else "fused differently")
        TALLY["fused" if counts else "left alone"] += 1
        TALLY[f"{kind}/{verdict}"] += 1
        print(f"{name}: {what}: {verdict} {counts}")
        try:
            got = run_kernels(fused, feeds)
        except Exception as error:
            failures.append(f"{what}: fused graph does not run ({counts}): {str(error)[:300]}")
            continue
        for output, want in expected.items():
            error = _relative_error(got[output], want)
            if not error <= bound:
                failures.append(f"{what}: {verdict} {counts}: output {output} relative error {error:.3g} > {bound:g}")
        if kind == "constant_respelt" and counts != base_counts:
            failures.append(f"{what}: an equal constant in another spelling lost fusions: {counts} vs {base_counts}")
    assert tried >= PER_GRAPH // 2, f"{name}: only {tried} runnable mutations in {attempts} draws"
    assert not failures, "\n".join(failures)


def test_split_is_sane():
    """Runs last in this module: across all graphs both outcomes occurred, and math-changing
    mutations were refused at least sometimes (a pass that fuses everything it sees is not checking)."""
    if TALLY["tried"] == 0:
        pytest.skip("the mutation tests did not run")
    assert TALLY["fused"] > 0 and TALLY["left alone"] > 0, dict(TALLY)
    refused_changes = sum(v for k, v in TALLY.items() if "/" in k and k.split("/")[0] not in PRESERVING
                          and k.endswith("left alone"))
    assert refused_changes > 0, dict(TALLY)
