"""Every op and dtype combination of the op set through `export_for_ascend`, run on onnxruntime-cann
1.24.4 over the simulated CANN runtime: after the export every ascend.grad node is on the NPU (the
combinations the CANN kernels do not take are made into ones they do; MishBackward needs no rewrite
for any pair), onnxruntime's placement is
the plan's, each node makes one aclnn call, and the outputs equal the float64 reference within
SPEC's bounds and the original graph on the CPU kernels."""

import collections
import itertools

import numpy as np
import onnx

from ascend_grad import DOMAIN, ops
from ascend_grad.graph_passes.ascend import export_for_ascend
from ascend_grad.testing import FLOAT_DTYPES, TOLERANCE, away_from, cast_wrapped, group_norm_feeds, random_array

DTYPES = list(FLOAT_DTYPES.values())
ACLNN = {"SiluBackward": "aclnnSiluBackward", "MishBackward": "aclnnMishBackward",
         "GroupNormSwishGrad": "aclnnGroupNormSwishGrad", "GroupNormSwish": "aclnnGroupNormSwish"}


def _cases(rng):
    """(name, (model, feeds), {output: reference}, bound)"""
    for T in DTYPES:
        go, x = random_array(rng, (3, 37), T), away_from(random_array(rng, (3, 37), T, scale=4.0), -1.28)
        x.flat[:3] = np.array([90, -90, np.nan], np.float32).astype(T)
        yield f"silu-{T.name}", cast_wrapped("SiluBackward", {"gradOutput": go, "self": x}, ["gradInput"]), {
            "out_gradInput": ops.reference.silu_backward(go, x)}, TOLERANCE[T]
    for a, b in itertools.product(DTYPES, repeat=2):
        go, x = random_array(rng, (3, 1, 33), a), away_from(random_array(rng, (4, 33), b, scale=4.0), -1.19)
        x.flat[:3] = np.array([90, -90, np.nan], np.float32).astype(b)
        # computed and returned in the promoted dtype (float for any mix): that dtype's bound
        yield f"mish-{a.name}-{b.name}", cast_wrapped("MishBackward", {"gradOutput": go, "self": x}, ["gradInput"]), {
            "out_gradInput": ops.reference.mish_backward(go, x)}, TOLERANCE[a] if a == b else TOLERANCE[np.dtype(np.float32)]
    for T, U in itertools.product(DTYPES, repeat=2):
        bound = max(TOLERANCE[T], TOLERANCE[U])
        inputs = group_norm_feeds(rng, (2, 12, 3, 5), 4, T, U)
        dx, dgamma, dbeta = ops.reference.group_norm_swish_grad(*inputs.values(), 4)
        yield f"gnsgrad-{T.name}-{U.name}", cast_wrapped("GroupNormSwishGrad", inputs, ["dx", "dgamma", "dbeta"], num_groups=4), {
            "out_dx": dx, "out_dgamma": dgamma, "out_dbeta": dbeta}, bound
        # dgamma not asked for (empty output name): aclnn wants it anyway, the kernel gives it scratch
        yield f"gnsgrad-no-dgamma-{T.name}-{U.name}", cast_wrapped("GroupNormSwishGrad", inputs, ["dx", "", "dbeta"], num_groups=4), {
            "out_dx": dx, "out_dbeta": dbeta}, bound
        forward = {k: inputs[k] for k in ("x", "gamma", "beta")}
        y, mean, rstd = ops.reference.group_norm_swish(*forward.values(), 4, swish_scale=1.5)
        yield f"gns-{T.name}-{U.name}", cast_wrapped("GroupNormSwish", forward, ["y", "mean", "rstd"], num_groups=4, swish_scale=1.5), {
            "out_y": y, "out_mean": mean, "out_rstd": rstd}, bound


def _error(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    finite = np.isfinite(want)
    assert np.array_equal(np.isnan(got), np.isnan(want)), "NaN where the reference has none, or none where it has"
    scale = np.max(np.abs(want[finite]), initial=0.0) or 1.0
    return float(np.max(np.abs(got[finite] - want[finite]), initial=0.0) / scale)


def test_every_combination_on_the_npu(rng, run_plans):
    cases = list(_cases(rng))
    exported = {name: export_for_ascend(model) for name, (model, _), _, _ in cases}
    results = run_plans([(name, *exported[name], model, feeds) for name, (model, feeds), _, _ in cases], library_for_original=True)
    placed = collections.Counter()
    for name, (model, _), references, bound in cases:
        out, plan = exported[name]
        result = results[name]
        assert result["error"] is None, f"{name}: {result['error']}"
        onnx.checker.check_model(out, full_check=True)
        nodes = [n for n in out.graph.node if n.domain == DOMAIN]
        assert len(nodes) == 1, f"{name}: {[n.op_type for n in nodes]}"
        assert result["placement"][nodes[0].name] == [nodes[0].op_type, "CANNExecutionProvider"], (name, plan["rewrites"])
        placed[ACLNN[nodes[0].op_type]] += 1
        if nodes[0].op_type == "MishBackward":  # one aclnn call as it is: nothing rewritten
            assert plan["rewrites"] == [] and len(out.graph.node) == len(model.graph.node), (name, plan["rewrites"])
        want = {p["node"]: p["device"] for p in plan["placement"]}
        have = {n: "npu" if p == "CANNExecutionProvider" else "host" for n, (op, p) in result["placement"].items()
                if not op.startswith("Memcpy")}
        assert have == want, name
        for output, reference in references.items():
            assert _error(result["cann"][output], reference) <= bound, f"{name}/{output} against float64"
            assert _error(result["cann"][output], result["cpu"][output]) <= 2 * bound, f"{name}/{output} against the CPU kernel"
    calls = next(iter(results.values()))["report"]["aclnn_calls"]  # one process ran every case
    assert {k: calls.get(k, 0) for k in ACLNN.values()} == dict(placed)  # one aclnn call per node
