"""models/: the committed graphs are what models/build.py says and makes.

- The manifest, GRAPH_SET and the .onnx files agree (names, recipe, graph inputs); every committed
  graph is valid and has routes.py's interface, holding make_module's parameters.
- Rebuilt today, one graph per route equals the committed one (torch's export is deterministic up
  to the stack traces it records per node) and gives PyTorch autograd's loss and gradients; the
  onnxruntime-training graph, which only onnxruntime-training runs, is run there.
"""

import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from ascend_grad.models import GRAPHS, graph_path
from ascend_grad.testing import assert_close, run_onnxruntime
from ascend_grad.venvs import venv_python

REPO = Path(__file__).resolve().parents[2]
MANIFEST = json.loads((GRAPHS / "manifest.json").read_text())
TOLERANCE = 1e-5  # float32, relative to max |torch|
STACK_TRACE = "pkg.torch.onnx.stack_trace"  # names torch's per-process "<eval_with_key>.N": differs per build


@pytest.fixture(scope="module")
def build():
    pytest.importorskip("torch")
    from ascend_grad.models import build

    return build


def dims(value):
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in value.type.tensor_type.shape.dim]


def without_stack_traces(model):
    for node in model.graph.node:
        kept = [p for p in node.metadata_props if p.key != STACK_TRACE]
        del node.metadata_props[:]
        node.metadata_props.extend(kept)
    return model


def torch_reference(module, x):
    """Loss and parameter gradients by PyTorch autograd, keyed by the graphs' output names."""
    import torch

    from ascend_grad.models.modules import default_loss

    loss = default_loss(module(x))
    grads = torch.autograd.grad(loss, list(module.parameters()))
    return {"loss": loss.detach().numpy(), **{f"grad.{n}": g.numpy() for (n, _), g in zip(module.named_parameters(), grads)}}


def assert_like_torch(got, want, what):
    assert list(got) == list(want), f"{what}: outputs {list(got)}"
    for output, value in want.items():
        assert_close(got[output], value, f"{what} {output}", tolerance=TOLERANCE)


# ---- the committed graphs


def test_manifest_records_the_graph_set(build):
    assert set(MANIFEST) == set(build.GRAPH_SET) == {p.stem for p in GRAPHS.glob("*.onnx")}
    for name, (module, route, options, expected, note) in build.GRAPH_SET.items():
        recipe = {k: MANIFEST[name][k] for k in ("module", "route", "options", "expected", "note")}
        assert recipe == {"module": module, "route": route, "options": options, "expected": expected, "note": note}, name


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_committed_graph_is_valid_and_has_the_manifest_inputs(name):
    model = onnx.load(graph_path(name))
    # onnx has no schemas for onnxruntime-training's com.microsoft gradient ops: no full check there
    onnx.checker.check_model(model, full_check=MANIFEST[name]["route"] != "ort_training")
    assert {i.name: dims(i) for i in model.graph.input} == MANIFEST[name]["inputs"]
    assert [i.name for i in model.graph.input] == list(MANIFEST[name]["inputs"])


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_committed_graph_has_the_routes_interface(build, name):
    """Joint graphs: `input_0` in, `loss` then `grad.<p>` out, the parameters as initializers.
    Backward-only graphs (compile_bw): AOTAutograd's `args_<k>` in, `grad.<p>` out, no parameters."""
    entry = MANIFEST[name]
    model = onnx.load(graph_path(name))
    params = dict(build.make_module(entry["module"]).named_parameters())
    grads = [f"grad.{p}" for p in params]
    inputs, outputs = [i.name for i in model.graph.input], [o.name for o in model.graph.output]
    backward_only = entry["route"] == "compile_bw"
    assert inputs == ([f"args_{k}" for k in range(len(inputs))] if backward_only else ["input_0"])
    assert outputs == (grads if backward_only else ["loss", *grads])
    shapes = {o.name: dims(o) for o in model.graph.output}
    assert [shapes[g] for g in grads] == [list(value.shape) for value in params.values()]
    initializers = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    if backward_only:
        assert not set(params) & set(initializers)
        return
    assert shapes["loss"] == []
    dtype = np.float16 if entry["options"].get("half") else np.float32
    for p, value in params.items():  # make_module's own values (seed 0)
        assert initializers[p].dtype == dtype and np.array_equal(initializers[p], value.detach().numpy().astype(dtype)), p


# ---- rebuilt today


def backward_feeds(module, x):
    """The compile_bw graph's inputs for input `x`: what AOTAutograd's forward saves for the backward,
    then the loss's tangent 1 (compiled as routes.compile_backward does)."""
    import torch
    from torch._decomp import get_decompositions
    from torch._functorch.aot_autograd import aot_function, make_boxed_func

    from ascend_grad.models.modules import default_loss

    params = dict(module.named_parameters())
    saved = []

    def forward_compiler(graph_module, _):
        def run(*args):
            outputs = graph_module(*args)
            saved[:] = outputs[1:]  # the loss, then the saved activations
            return outputs

        return make_boxed_func(run)

    decompositions = get_decompositions(
        [torch.ops.aten.silu_backward, torch.ops.aten.mish_backward, torch.ops.aten.native_group_norm_backward]
    )
    compiled = aot_function(
        lambda x, *values: default_loss(torch.func.functional_call(module, dict(zip(params, values)), (x,))),
        fw_compiler=forward_compiler, bw_compiler=lambda gm, _: make_boxed_func(gm.forward), decompositions=decompositions,
    )
    compiled(x, *params.values())
    values = [t.detach().numpy() for t in saved] + [np.array(1.0, np.float32)]
    return {f"args_{k}": v for k, v in enumerate(values)}


@pytest.mark.parametrize(
    "name",
    ["silu_mlp.aot.opt", "mish_mlp.export.dyn", "silu_mlp.compile_bw", "resblock.aot.opt"],
)
def test_rebuilt_graph_equals_committed_and_pytorch(build, rng, name):
    import torch

    rebuilt, entry = build.build(name)
    committed = onnx.load(graph_path(name))
    assert entry == MANIFEST[name]
    ops = lambda model: Counter((n.domain, n.op_type) for n in model.graph.node)  # noqa: E731
    assert ops(rebuilt) == ops(committed)
    # torch's export is deterministic: the same graph, initializers included, but for the stack traces
    assert without_stack_traces(rebuilt).graph == without_stack_traces(committed).graph

    module = build.make_module(entry["module"])
    if entry["route"] == "compile_bw":
        x = build.example_input(entry["module"])  # the shapes the backward graph was traced for
        feeds = backward_feeds(module, x)
        assert {k: list(v.shape) for k, v in feeds.items()} == entry["inputs"]
        want = torch_reference(module, x)
        del want["loss"]  # the backward-only graph returns the gradients only
    else:  # a dynamic batch gets 5, not the example's size
        shape = [d if isinstance(d, int) else 5 for d in entry["inputs"]["input_0"]]
        x = torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
        feeds, want = {"input_0": x.numpy()}, torch_reference(module, x)
    assert_like_torch(run_onnxruntime(rebuilt, feeds), want, name)


CHILD = r"""
import sys, numpy as np, onnxruntime as ort
inputs, out, *models = sys.argv[1:]
feeds = dict(np.load(inputs))
results = {}
for k, path in enumerate(models):
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    results.update({f"{k}/{o.name}": v for o, v in zip(session.get_outputs(), session.run(None, feeds))})
np.savez(out, **results)
"""


def test_rebuilt_onnxruntime_training_graph(build, monkeypatch, tmp_path, rng):
    """The route makes its graph in an onnxruntime-training venv under build/venvs; the graphs run
    in the one test_bundled_graphs.py uses (stock onnxruntime lacks the gradient ops)."""
    import torch

    name = "silu_mlp.ort_training"
    monkeypatch.setenv("ASCEND_GRAD_VENVS", os.environ.get("ASCEND_GRAD_VENVS") or str(REPO / "build" / "venvs"))
    rebuilt, entry = build.build(name)
    committed = onnx.load(graph_path(name))
    assert entry == MANIFEST[name]
    quick_gelu_grads = [n for n in rebuilt.graph.node if n.op_type == "QuickGeluGrad"]
    alpha = lambda node: onnx.helper.get_node_attr_value(node, "alpha")  # noqa: E731
    assert [(n.domain, alpha(n)) for n in quick_gelu_grads] == [("com.microsoft", 1.0)]
    assert without_stack_traces(rebuilt).graph == without_stack_traces(committed).graph

    x = rng.standard_normal(entry["inputs"]["input_0"]).astype(np.float32)
    onnx.save(rebuilt, tmp_path / "rebuilt.onnx")
    np.savez(tmp_path / "inputs.npz", input_0=x)
    from ascend_grad.models.ort_training import SPEC  # (one venv for every onnxruntime-training test)

    python = venv_python(*SPEC, root=REPO / "build" / "venvs")
    done = subprocess.run([python, "-c", CHILD, tmp_path / "inputs.npz", tmp_path / "out.npz", graph_path(name),
                           tmp_path / "rebuilt.onnx"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    results = np.load(tmp_path / "out.npz")
    outputs = [o.name for o in committed.graph.output]
    assert [o.name for o in rebuilt.graph.output] == outputs and len(results.files) == 2 * len(outputs)
    for output in outputs:
        assert_close(results[f"1/{output}"], results[f"0/{output}"], f"rebuilt {output}", tolerance=TOLERANCE)
    want = torch_reference(build.make_module(entry["module"]), torch.from_numpy(x))
    assert_like_torch({o: results[f"1/{o}"] for o in outputs}, want, name)
