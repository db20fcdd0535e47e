"""The graph pass on every committed training graph: the expected fused ops (one per activation),
the decomposed backward gone, a valid graph, the same outputs as before (with the kernels and with
the function bodies), PyTorch autograd's numbers, and nothing more to do on a second run."""

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest

from ascend_grad import DOMAIN
from ascend_grad.graph_passes import fuse_backward_ops
from ascend_grad.models import GRAPHS, graph_path
from ascend_grad.testing import run_kernels, run_onnxruntime
from ascend_grad.verify import fused_graph_bound, random_feeds

REPO = Path(__file__).resolve().parents[2]
MANIFEST = json.loads((GRAPHS / "manifest.json").read_text())
STOCK = sorted(n for n, e in MANIFEST.items() if e["route"] != "ort_training")  # stock onnxruntime runs these
JOINT = sorted(n for n, e in MANIFEST.items() if e["route"] in ("aot", "export"))
TRAINING = sorted(n for n, e in MANIFEST.items() if e["route"] == "ort_training")
# nodes at least removed per fused op: SiLU's gradient is 5 nodes, Mish's 7, GroupNorm+SiLU's 50, its forward 7
REMOVED = {"SiluBackward": 3, "MishBackward": 5, "GroupNormSwishGrad": 40, "GroupNormSwish": 5}


@pytest.fixture(scope="module")
def fused():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = fuse_backward_ops(onnx.load(graph_path(name)))
        return cache[name]

    return get


def test_every_graph_file_is_in_the_manifest():
    assert {p.stem for p in GRAPHS.glob("*.onnx")} == set(MANIFEST)


def test_the_docs_table_is_what_the_pass_does(fused):
    """docs/graph-pass.md's table of the bundled graphs: every graph, its node counts before and
    after the pass, and the ops it fuses."""
    docs = (REPO / "docs" / "graph-pass.md").read_text()
    rows = {m[1]: (int(m[2]), int(m[3]), m[4].strip()) for m in
            re.finditer(r"^\| `([\w.]+)` \| (\d+) -> (\d+) \| ([^|]+) \|$", docs, re.M)}
    assert set(rows) == set(MANIFEST)
    for name, (before, after, ops) in rows.items():
        _, report = fused(name)
        named = ", ".join(op for op in ("GroupNormSwishGrad", "GroupNormSwish", "MishBackward", "SiluBackward")
                          if report.counts.get(op)) or "nothing"
        assert (before, after, ops) == (report.nodes_before, report.nodes_after, named), name


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_expected_ops_replace_the_decomposed_backward(fused, name):
    original = onnx.load(graph_path(name))
    model, report = fused(name)
    expected = MANIFEST[name]["expected"]
    assert {op: n for op, n in report.counts.items() if n} == expected
    ours = [n for n in model.graph.node if n.domain == DOMAIN]
    assert sorted(n.op_type for n in ours) == sorted(op for op, n in expected.items() for _ in range(n))
    if MANIFEST[name]["route"] == "ort_training":  # one QuickGeluGrad node becomes one SiluBackward
        assert not [n for n in model.graph.node if n.op_type == "QuickGeluGrad"]
    else:
        before = {o for n in original.graph.node for o in n.output}
        after = {o for n in model.graph.node for o in n.output}
        removed = len(before - after)
        assert removed >= sum(REMOVED[op] * n for op, n in expected.items()), f"only {removed} nodes went"
    assert report.nodes_after == len(model.graph.node) and report.nodes_before == len(original.graph.node)
    if not expected:  # the report says why nothing was fused
        assert report.refused, "nothing fused and no reason given"
    else:  # every activation fused: no refusal left over from a subgraph another rule replaced
        assert report.refused == {}
    assert [o.name for o in model.graph.output] == [o.name for o in original.graph.output]


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_result_is_valid_and_a_second_pass_changes_nothing(fused, name):
    model, report = fused(name)
    onnx.checker.check_model(model, full_check=MANIFEST[name]["route"] != "ort_training")
    again, second = fuse_backward_ops(model)
    assert second.fused == [] and second.nodes_before == second.nodes_after == report.nodes_after
    assert [(n.op_type, list(n.input)) for n in again.graph.node] == [(n.op_type, list(n.input)) for n in model.graph.node]


@pytest.mark.parametrize("runner", ["kernels", "function bodies"])
@pytest.mark.parametrize("name", STOCK)
def test_outputs_equal_the_originals(fused, rng, name, runner):
    original = onnx.load(graph_path(name))
    model, _ = fused(name)
    feeds = random_feeds(original, seed=int(rng.integers(2**31)), symbolic=3)
    expected = run_onnxruntime(original, feeds)
    got = run_kernels(model, feeds) if runner == "kernels" else run_onnxruntime(model, feeds)
    # SPEC.md's bound (1e-5) in float32; in float16 each graph rounds in its own places and may lie
    # SPEC's bound (1e-3) from the exact result, so the two may differ by twice that (a weight gradient
    # of silu_mlp.aot.fp16 differed by 1.15e-3 on an Intel Xeon with AVX512-FP16, seed 2442800608)
    bound = fused_graph_bound(original)
    for output, want in expected.items():
        error = np.abs(got[output].astype(np.float64) - want).max() / (np.abs(want.astype(np.float64)).max() or 1.0)
        assert error <= bound, f"{output}: relative error {error:.2e}"


@pytest.mark.parametrize("name", JOINT)
def test_fused_joint_graphs_equal_pytorch_autograd(fused, name):
    torch = pytest.importorskip("torch")
    from ascend_grad.models import build

    entry = MANIFEST[name]
    model, _ = fused(name)
    module = build.make_module(entry["module"]).float()
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    with torch.no_grad():
        for pname, p in module.named_parameters():
            p.copy_(torch.from_numpy(weights[pname].astype(np.float32)))
    x = build.example_input(entry["module"])
    half = entry["options"].get("half", False)
    if half:
        x = x.half().float()  # the graph's own input, widened: torch runs the reference in float
    loss = module(x).float().square().mean()
    grads = torch.autograd.grad(loss, list(module.parameters()))
    expected = {"loss": loss.detach().numpy(), **{f"grad.{n}": g.numpy() for (n, _), g in zip(module.named_parameters(), grads)}}
    feed = x.numpy().astype(np.float16 if half else np.float32)
    got = run_kernels(model, {"input_0": feed})
    tolerance = 2e-2 if half else 1e-5  # a float16 graph against a float32 reference: float16's precision
    for output, want in expected.items():
        error = np.abs(got[output].astype(np.float64) - want).max() / (np.abs(want).max() or 1.0)
        assert error <= tolerance, f"{output}: relative error {error:.2e}"


@pytest.mark.parametrize("name", TRAINING)
def test_onnxruntime_training_graphs_in_onnxruntime_training(fused, in_onnxruntime_training, name):
    """QuickGeluGrad & co. run only in onnxruntime-training: original and fused side by side there."""
    model, _ = fused(name)
    original = onnx.load(graph_path(name))
    results = in_onnxruntime_training(original, model, random_feeds(original))
    for output in [o.name for o in original.graph.output]:
        want, got = results[f"original/{output}"], results[f"fused/{output}"]
        assert np.abs(got - want).max() <= 1e-5 * (np.abs(want).max() or 1.0), output
