"""Shape mutations of the GroupNorm subgraphs the pass fuses: every Reshape, Unsqueeze, Squeeze and
Flatten the pass removes gets targets and axes that mean the same thing or something else.

For each Reshape (its target as the graph computes it, read off a run): the target spelt with 0s
(copy the input's dim) and a -1 (inferred) where they mean the same; permutations of the written
target and of such spellings, 0 and -1 moved to other places (the issue's [0, 32, -1] -> [-1, 32, 0]
takes H for N and groups rows of 8 across samples); allowzero = 1 (0 is then a zero-sized dim);
targets that regroup across samples (1 for N, N folded into a later dim); another layout of the
same count (two dims swapped). For each Unsqueeze / Squeeze / Flatten: every other valid axis. The
mutated graphs keep their stale value_info, as an edited graph does (onnxruntime only warns).

Each mutant that onnxruntime runs unfused must, after fuse_backward_ops, give every output of the
unfused mutant within test_bundled_graphs' bound (verify.fused_graph_bound: SPEC.md's bound in
float32, twice it in float16), fused or not; a spelling of the same target must keep every fusion, and a refused mutant
must say why. Prints the seed, each mutant and its verdict.

ASCEND_GRAD_SEED=<n> replays a run (the rng fixture of tests/conftest.py).
"""

from __future__ import annotations

import collections
import itertools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from ascend_grad.graph_passes import fuse_backward_ops
from ascend_grad.models import graph_path
from ascend_grad.testing import run_kernels, run_onnxruntime
from ascend_grad.verify import fused_graph_bound, random_feeds

# every GroupNorm spelling among the bundled graphs: torch.export (static and dynamic batch),
# AOTAutograd, onnxruntime-training's LayerNormalizationGrad, a scaled swish, float16
GRAPHS = ["resblock.export.opt", "gn_scaled_swish.export.opt", "resblock.export.dyn", "resblock.aot.opt",
          "resblock.ort_training", "gn_swish.aot.opt", "resblock.aot.fp16"]
PER_GRAPH = 28  # runnable mutants per graph, shared among the families that have sites
ATTEMPTS = 40  # mutants drawn per family at most (most permutations and layouts do not fit their input)
SAME = {"spelling", "allowzero", "axes_spelling"}  # families that keep the math: fusions must stay
TALLY = collections.Counter()
ort.set_default_logger_severity(4)  # mutants onnxruntime cannot run make it log errors; stale value_info, warnings


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    print(f"\nshape mutations: {TALLY['tried']} run ({TALLY['invalid']} drawn but not runnable unfused); "
          f"fused {TALLY['fused']}, refused {TALLY['refused']}")
    for key in sorted(k for k in TALLY if "/" in k):
        print(f"  {key}: {TALLY[key]}")


def _removed_nodes(model):
    fused, _ = fuse_backward_ops(model)
    after = {o for n in fused.graph.node for o in n.output}
    return [i for i, n in enumerate(model.graph.node) if n.output and not set(n.output) <= after]


def _in_process(models, feeds):
    """Each (model, with the kernel library?) run here: its outputs, or the error it raised."""
    found = []
    for model, kernels in models:
        try:
            found.append(run_kernels(model, feeds) if kernels else run_onnxruntime(model, feeds))
        except Exception as error:  # (a mutant that onnxruntime cannot run, say)
            found.append(error)
    return found


def _in_onnxruntime_training(in_onnxruntime_training):
    """_in_process's twin for graphs of onnxruntime-training's ops: one child process a batch."""
    def run(models, feeds):
        results, errors = in_onnxruntime_training.many({str(k): m for k, m in enumerate(models)}, feeds)
        return [RuntimeError(errors[str(k)]) if str(k) in errors else
                {o.split("/", 1)[1]: v for o, v in results.items() if o.split("/", 1)[0] == str(k)} for k in range(len(models))]
    return run


def _runtime_shapes(model, feeds, names, run):
    """The shapes the values `names` have in a run of the unmutated graph, and for each the axes
    whose size follows a symbolic input dim (seen in a second run with other sizes for those)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    probe.graph.output.extend(helper.make_value_info(n, onnx.TypeProto()) for n in names if n not in known)
    (values,) = run([(probe, False)], feeds)
    (other,) = run([(probe, False)], random_feeds(model, symbolic=5))
    shapes = {n: list(values[n].shape) for n in names}
    dynamic = {n: {k for k, (a, b) in enumerate(zip(values[n].shape, other[n].shape)) if a != b} for n in names}
    return shapes, dynamic


def _written_target(model, name):
    for tensor in model.graph.initializer:
        if tensor.name == name:
            return [int(v) for v in numpy_helper.to_array(tensor).reshape(-1)]
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output[0] == name:
            return [int(v) for v in numpy_helper.to_array(node.attribute[0].t).reshape(-1)]
    return None  # computed (Shape, Concat, ...)


def _reshape_targets(written, source, out, dynamic):
    """{family: [targets]} for a Reshape from `source` to `out` (runtime shapes) written `written`;
    `dynamic`: the axes of `out` that follow a symbolic input dim (a size written there pins it)."""
    rank = len(out)
    spellings, pinned = [], []
    for choice in itertools.product(*[(d, 0, -1) if k < len(source) and source[k] == d else (d, -1) for k, d in enumerate(out)]):
        if list(choice).count(-1) <= 1 and list(choice) != out:
            (pinned if any(choice[k] == out[k] for k in dynamic) else spellings).append(list(choice))
    families = {"spelling": spellings, "pinned": pinned}
    permuted = set()
    for base in [written or out] + spellings[:6]:
        permuted |= set(itertools.permutations(base))
    families["permutation"] = [list(p) for p in permuted if list(p) != (written or out) and list(p) not in spellings]
    # allowzero = 1 with no 0 in the target means what the target says (a 0 would be a zero-sized
    # dim, which no non-empty input fits: such a mutant does not run)
    families["allowzero"] = [t for t in [written or (None if dynamic else out)] + spellings if t is not None and 0 not in t][:3]
    cross = []
    if out[0] > 1:
        for k in range(1, rank):
            t = list(out)
            t[0], t[k] = 1, out[k] * out[0]
            cross.append(t)
        cross.append([1] * (rank - 1) + [-1])
    families["cross_sample"] = cross
    families["layout"] = [[out[b] if k == a else out[a] if k == b else d for k, d in enumerate(out)]
                          for a, b in itertools.combinations(range(rank), 2) if out[a] != out[b]]
    return families


def _mutants(model, removed, shapes, dynamic, rng):
    """(family, its mutants in a random order: (family, description, mutated model)) for the sites among `removed`."""
    pool = collections.defaultdict(list)
    for i in removed:
        node = model.graph.node[i]
        if node.op_type == "Reshape":
            written = _written_target(model, node.input[1])
            for family, targets in _reshape_targets(written, shapes[node.input[0]], shapes[node.output[0]], dynamic[node.output[0]]).items():
                for target in targets:
                    pool[family].append((i, "target", target))
        elif node.op_type in ("Unsqueeze", "Squeeze", "Flatten"):
            in_rank, out_rank = len(shapes[node.input[0]]), len(shapes[node.output[0]])
            axes = _written_target(model, node.input[1]) if len(node.input) > 1 else None
            if node.op_type == "Flatten":
                axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
                for other in range(-in_rank, in_rank + 1):
                    family = "axes_spelling" if other % (in_rank + 1) == axis % (in_rank + 1) and other != axis else "axes"
                    if other != axis:
                        pool[family].append((i, "axis", other))
            elif axes is not None and len(axes) == 1:
                rank = out_rank if node.op_type == "Unsqueeze" else in_rank
                for other in range(-rank, rank):
                    if other != axes[0]:
                        same = other % rank == axes[0] % rank
                        pool["axes_spelling" if same else "axes"].append((i, "axes", [other]))
    def mutants(family, sites):
        for k in rng.permutation(len(sites)):
            i, what, value = sites[int(k)]
            yield family, *_apply(model, i, what, value, allowzero=family == "allowzero")

    return [(family, mutants(family, pool[family])) for family in sorted(f for f in pool if pool[f])]


def _apply(model, i, what, value, allowzero=False):
    """(description, copy of model with node i's target / axes input or axis attribute set to value)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    node = m.graph.node[i]
    if what == "axis":
        kept = [a for a in node.attribute if a.name != "axis"]
        del node.attribute[:]
        node.attribute.extend(kept + [helper.make_attribute("axis", value)])
        return f"{node.op_type} {node.name} axis -> {value}", m
    name = f"{node.input[1]}__mut{i}"
    m.graph.initializer.append(numpy_helper.from_array(np.array(value, np.int64), name))
    node.input[1] = name
    if allowzero:
        kept = [a for a in node.attribute if a.name != "allowzero"]  # (exporters write allowzero = 0)
        del node.attribute[:]
        node.attribute.extend(kept + [helper.make_attribute("allowzero", 1)])
    return f"{node.op_type} {node.name} {what} -> {value}{' allowzero=1' if allowzero else ''}", m


def _relative_error(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return np.inf
    both_nan = np.isnan(got) & np.isnan(want)
    if ((got != want) & ~both_nan & ~(np.isfinite(got) & np.isfinite(want))).any():
        return np.inf
    finite = np.isfinite(want)
    return float(np.abs(got[finite] - want[finite]).max(initial=0.0) / (np.abs(want[finite]).max(initial=0.0) or 1.0))


def _runnable(families, quota, feeds, run, batch):
    """Up to `quota` mutants of each family that onnxruntime runs unfused (ATTEMPTS tried at most,
    `batch` at a time), with their outputs: (family, description, mutated model, outputs)."""
    for _, mutants in families:
        found = 0
        mutants = itertools.islice(mutants, ATTEMPTS)
        while found < quota and (chunk := list(itertools.islice(mutants, batch))):
            for (family, description, mutated), expected in zip(chunk, run([(m, False) for _, _, m in chunk], feeds)):
                if isinstance(expected, Exception):  # a target the input does not fit: not a graph anyone runs
                    TALLY["invalid"] += 1
                elif found < quota:
                    found += 1
                    yield family, description, mutated, expected


@pytest.mark.parametrize("name", GRAPHS)
def test_shape_mutants_fuse_exactly_or_are_refused(rng, request, name):
    original = onnx.load(graph_path(name))
    if name.endswith("ort_training"):  # its com.microsoft gradient ops run only in onnxruntime-training
        run, batch = _in_onnxruntime_training(request.getfixturevalue("in_onnxruntime_training")), ATTEMPTS
    else:
        run, batch = _in_process, 1
    _, base = fuse_backward_ops(original)
    base_counts = {k: v for k, v in base.counts.items() if v}
    removed = _removed_nodes(original)
    feeds = random_feeds(original, seed=int(rng.integers(2**31)), symbolic=3)
    views = [original.graph.node[i] for i in removed if original.graph.node[i].op_type in ("Reshape", "Unsqueeze", "Squeeze", "Flatten")]
    assert views, f"{name}: the pass removes no view"
    shapes, dynamic = _runtime_shapes(original, feeds, sorted({v for n in views for v in (n.input[0], n.output[0])}), run)
    bound = fused_graph_bound(original)  # as test_bundled_graphs
    failures = []
    families = list(_mutants(original, removed, shapes, dynamic, rng))
    quota = -(-PER_GRAPH // len(families))  # runnable mutants per family, where it has that many
    runnable = [(*found, *fuse_backward_ops(found[2])) for found in _runnable(families, quota, feeds, run, batch)]
    outputs = run([(fused, True) for *_, fused, _ in runnable], feeds)
    for (family, description, mutated, expected, fused, report), got in zip(runnable, outputs):
        TALLY["tried"] += 1
        counts = {k: v for k, v in report.counts.items() if v}
        # (a part left decomposed, dgamma say, may leave g to a SiluBackward: more fusions, all exact)
        verdict = "fused" if all(counts.get(op, 0) >= n for op, n in base_counts.items()) else "refused"
        TALLY[verdict] += 1
        TALLY[f"{family}/{verdict}"] += 1
        print(f"{name}: {family}: {description}: {verdict} {counts} {report.refused}")
        if verdict == "refused" and not report.refused:
            failures.append(f"{description}: fusions {counts} (vs {base_counts}) with no reason given")
        if family in SAME and counts != base_counts:
            failures.append(f"{description}: the same target in another spelling lost fusions: {report.refused}")
        if isinstance(got, Exception):
            failures.append(f"{description}: the fused graph does not run ({counts}): {str(got)[:300]}")
            continue
        for output, want in expected.items():
            error = _relative_error(got[output], want)
            if not error <= bound:
                failures.append(f"{description}: {verdict} {counts}: output {output} relative error {error:.3g} > {bound:g}")
    assert len(runnable) >= PER_GRAPH // 2, f"{name}: only {len(runnable)} runnable mutants"
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name, node, target", [
    ("resblock.export.opt", "node_Reshape_5", [-1, 32, 0]),  # the mutant: (32, 32, 8), groups across samples
    ("gn_scaled_swish.export.opt", None, [-1, 8, 0]),
])
def test_zero_and_minus_one_swapped_is_refused_with_the_shapes(name, node, target):
    """[0, G, -1] -> [-1, G, 0]: valid ONNX, but 0 copies the input's dim AT THAT INDEX (H), so the
    rows are (N * C * HxW / (G * H), G, H): not GroupNorm's groups. The pass must refuse and name them."""
    model = onnx.load(graph_path(name))
    grouping = [n for n in model.graph.node if n.op_type == "Reshape" and _written_target(model, n.input[1]) == [0, target[1], -1]]
    reshape = next(n for n in grouping if node is None or n.name == node)
    model.graph.initializer.append(numpy_helper.from_array(np.array(target, np.int64), "swapped"))
    reshape.input[1] = "swapped"
    feeds = random_feeds(model, seed=0)
    expected = run_onnxruntime(model, feeds)
    fused, report = fuse_backward_ops(model)
    assert report.counts["GroupNormSwishGrad"] == 0 and report.counts["GroupNormSwish"] == 0, report.refused
    assert any("not (N, G, C/G * HxW)" in reason for reason in report.refused.values()), report.refused
    got = run_kernels(fused, feeds)
    for output, want in expected.items():
        assert _relative_error(got[output], want) <= fused_graph_bound(model), output
