"""The CANN kernels under the real onnxruntime-cann 1.24.4, on the simulated CANN runtime
(tests/runtime_ext/cann_sim): every op and dtype combination its seed allows (MishBackward: every
pair, in one call) is placed on the CANN EP (profile), makes exactly one aclnn call, respects the
runtime's protocol, and gives the float64 reference's numbers within SPEC.md's bounds for the
output's dtype - the same as the CPU kernels. Combinations aclnn does not take run on the CPU
kernel; failures come back as clean onnxruntime errors."""

import itertools
import json
import os
import warnings

import numpy as np
import onnx
import pytest

from ascend_grad import ops, runtime_ext
from ascend_grad.testing import FLOAT_DTYPES, TOLERANCE, assert_close, away_from, cast_wrapped, group_norm_feeds, random_array, run_onnxruntime

F32, F16, BF16 = FLOAT_DTYPES.values()
CANN, CPU = "CANNExecutionProvider", "CPUExecutionProvider"

# Runs in the onnxruntime-cann environment: each case in its own session, one run; what onnxruntime
# placed where (profile), the outputs, the aclnn calls the run made (the simulator's counters).
CHILD = r"""
import ctypes, glob, json, os, sys
import numpy as np, onnxruntime as ort
library, folder = sys.argv[1], sys.argv[2]
sim = ctypes.CDLL("libascendcl.so")
sim.simcann_report.restype = ctypes.c_char_p
def calls():
    return json.loads(sim.simcann_report().decode())["aclnn_calls"]
for path in sorted(glob.glob(os.path.join(folder, "*.onnx"))):
    stem = path[:-5]
    feeds = dict(np.load(stem + ".inputs.npz"))
    options = runtime_options = ort.SessionOptions()
    options.register_custom_ops_library(library)
    options.enable_profiling = True
    options.profile_file_prefix = stem
    try:
        session = ort.InferenceSession(path, options, providers=[("CANNExecutionProvider", {"enable_cann_graph": "0"}), "CPUExecutionProvider"])
        before = calls()
        outputs = session.run(None, feeds)
        after = calls()
        profile = json.load(open(session.end_profiling()))
        placed = {e["name"][:-len("_kernel_time")]: e["args"]["provider"] for e in profile
                  if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")}
        made = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
        np.savez(stem + ".outputs.npz", **{o.name: v for o, v in zip(session.get_outputs(), outputs)})
        json.dump({"placed": placed, "calls": made}, open(stem + ".run.json", "w"))
    except Exception as error:
        open(stem + ".error.txt", "w").write(str(error))
"""


def _reference_cases(rng):
    """(name, model, feeds, {output: reference}, op placement): every dtype combination of every op."""
    for T in FLOAT_DTYPES.values():
        go, x = random_array(rng, (3, 517), T), away_from(random_array(rng, (3, 517), T, scale=4.0), -1.28)
        x.flat[:4] = np.array([90, -90, np.nan, 0], dtype=np.float32).astype(T)  # large |x|, NaN
        yield f"silu-{T.name}", cast_wrapped("SiluBackward", {"gradOutput": go, "self": x}, ["gradInput"]), {
            "out_gradInput": ops.reference.silu_backward(go, x)}, CANN
    # every (gradOutput, self) pair is one aclnnMishBackward call (the seed's dtype deduction)
    for a, b in itertools.product(FLOAT_DTYPES.values(), repeat=2):
        go, x = random_array(rng, (3, 1, 257), a), away_from(random_array(rng, (4, 257), b, scale=4.0), -1.19)
        x.flat[:4] = np.array([90, -90, np.nan, 0], dtype=np.float32).astype(b)  # large |x|, NaN
        yield f"mish-{a.name}-{b.name}", cast_wrapped("MishBackward", {"gradOutput": go, "self": x}, ["gradInput"]), {
            "out_gradInput": ops.reference.mish_backward(go, x)}, CANN
    for (T, U), (shape, G) in itertools.product(
        itertools.product(FLOAT_DTYPES.values(), repeat=2), [((2, 32, 6, 7), 8), ((3, 12, 5), 12), ((2, 10), 1)]
    ):
        tag = f"{T.name}-{U.name}-{'x'.join(map(str, shape))}-g{G}"
        inputs = group_norm_feeds(rng, shape, G, T, U)
        ref = ops.reference.group_norm_swish_grad(*inputs.values(), G)
        yield f"gn-grad-{tag}", cast_wrapped("GroupNormSwishGrad", inputs, ["dx", "dgamma", "dbeta"], num_groups=G), {
            "out_dx": ref[0], "out_dgamma": ref[1], "out_dbeta": ref[2]}, CANN if T == U else CPU
        forward = {k: inputs[k] for k in ("x", "gamma", "beta")}
        ref = ops.reference.group_norm_swish(*forward.values(), G)
        yield f"gn-{tag}", cast_wrapped("GroupNormSwish", forward, ["y", "mean", "rstd"], num_groups=G), {
            "out_y": ref[0], "out_mean": ref[1], "out_rstd": ref[2]}, CANN if U in (T, F32) else CPU


def _edge_cases(rng):
    """Outputs the node leaves out or switches off, empty tensors, swish_scale, eps."""
    inputs = group_norm_feeds(rng, (2, 16, 3, 3), 4, F32, F32)
    ref = ops.reference.group_norm_swish_grad(*inputs.values(), 4, swish_scale=1.7)
    yield "gn-grad-dx-only", cast_wrapped("GroupNormSwishGrad", inputs, ["dx", "", ""], num_groups=4, swish_scale=1.7), {"out_dx": ref[0]}, CANN
    zeros = np.zeros(16)
    yield "gn-grad-flags-off", cast_wrapped(
        "GroupNormSwishGrad", inputs, ["dx", "dgamma", "dbeta"], num_groups=4, swish_scale=1.7, dgamma_is_require=0, dbeta_is_require=0
    ), {"out_dx": ref[0], "out_dgamma": zeros, "out_dbeta": zeros}, CANN
    forward = {k: inputs[k] for k in ("x", "gamma", "beta")}
    ref = ops.reference.group_norm_swish(*forward.values(), 4, eps=1e-3, swish_scale=0.5, activate_swish=False)
    yield "gn-y-only", cast_wrapped("GroupNormSwish", forward, ["y"], num_groups=4, eps=1e-3, swish_scale=0.5, activate_swish=0), {
        "out_y": ref[0]}, CANN
    go = np.zeros((0, 5), np.float32)
    yield "silu-empty", cast_wrapped("SiluBackward", {"gradOutput": go, "self": go}, ["gradInput"]), {"out_gradInput": go}, CANN
    inputs = group_norm_feeds(rng, (2, 8, 0), 2, F16, F16)
    yield "gn-grad-empty", cast_wrapped("GroupNormSwishGrad", inputs, ["dx", "dgamma", "dbeta"], num_groups=2), {
        "out_dx": np.zeros((2, 8, 0)), "out_dgamma": np.zeros(8), "out_dbeta": np.zeros(8)}, CANN
    forward = {k: inputs[k] for k in ("x", "gamma", "beta")}
    yield "gn-empty", cast_wrapped("GroupNormSwish", forward, ["y", "mean", "rstd"], num_groups=2), {
        "out_y": np.zeros((2, 8, 0)), "out_mean": np.full((2, 2), np.nan), "out_rstd": np.full((2, 2), np.nan)}, CANN


ACLNN = {"SiluBackward": "aclnnSiluBackward", "MishBackward": "aclnnMishBackward",
         "GroupNormSwishGrad": "aclnnGroupNormSwishGrad", "GroupNormSwish": "aclnnGroupNormSwish"}


@pytest.fixture(scope="module")
def ran(cann, tmp_path_factory):
    folder = tmp_path_factory.mktemp("cann-kernels")
    seed = int(os.environ.get("ASCEND_GRAD_SEED") or np.random.SeedSequence().entropy % 2**32)
    print(f"cann kernels: ASCEND_GRAD_SEED={seed}")
    rng = np.random.default_rng(seed)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():  # (the empty groups' NaN)
        warnings.simplefilter("ignore", RuntimeWarning)
        cases = list(_reference_cases(rng)) + list(_edge_cases(rng))
    for name, (model, feeds), _, _ in cases:
        onnx.save(model, folder / f"{name}.onnx")
        np.savez(folder / f"{name}.inputs.npz", **feeds)
    done, report = cann.run(CHILD, runtime_ext.library_path(), str(folder))
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, cases, report, cann


def test_every_combination_on_the_npu_or_host_as_registered(ran):
    folder, cases, report, _ = ran
    for name, (model, feeds), expected, device in cases:
        error = folder / f"{name}.error.txt"
        assert not error.exists(), f"{name}: {error.read_text() if error.exists() else ''}"
        run = json.loads((folder / f"{name}.run.json").read_text())
        op = model.graph.node[[n.domain for n in model.graph.node].index("ascend.grad")].op_type
        assert run["placed"][op] == device, f"{name}: {op} on {run['placed'][op]}, expected {device}"
        empty = all(np.size(v) == 0 for k, v in feeds.items() if k in ("in_x", "in_self"))
        aclnn_calls = {k: v for k, v in run["calls"].items() if k.startswith("aclnn")}
        if device == CANN and not empty:
            # one node, one aclnn call (both phases once), and nothing else of aclnn
            assert aclnn_calls == {ACLNN[op] + "GetWorkspaceSize": 1, ACLNN[op]: 1}, f"{name}: {run['calls']}"
        else:
            assert aclnn_calls == {}, f"{name}: {run['calls']}"


def test_numbers_equal_the_reference_and_the_cpu_kernels(ran):
    folder, cases, _, _ = ran
    for name, (model, feeds), expected, _ in cases:
        theirs = dict(np.load(folder / f"{name}.outputs.npz"))
        ours = run_onnxruntime(model, feeds, runtime_ext.session_options())
        node = next(n for n in model.graph.node if n.domain == "ascend.grad")
        for output, reference in expected.items():
            # the bound of the dtype the node computed that output in
            cast = next(n for n in model.graph.node if n.output[0] == output)
            dtype = _value_dtype(model, cast.input[0], node)
            assert_close(theirs[output], reference, f"{name}/{output} (CANN)", tolerance=TOLERANCE[dtype])
            assert_close(theirs[output], ours[output].astype(np.float64), f"{name}/{output} (CANN vs CPU)", tolerance=TOLERANCE[dtype])


def _value_dtype(model, name, node):
    inferred = onnx.shape_inference.infer_shapes(model)
    for value in list(inferred.graph.value_info) + list(inferred.graph.output):
        if value.name == name:
            return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
    raise AssertionError(f"no type for {name}")


def test_protocol_clean(ran):
    """No violation of the runtime's protocol, and at exit every aclTensor destroyed, every executor
    used, every byte of device memory (workspaces, scratch outputs) given back."""
    _, _, report, cann = ran
    cann.assert_clean(report)


def _save(folder, cases):
    for name, (model, feeds) in cases.items():
        onnx.save(model, folder / f"{name}.onnx")
        np.savez(folder / f"{name}.inputs.npz", **feeds)


def _errors(folder, names):
    return {name: (folder / f"{name}.error.txt").read_text() if (folder / f"{name}.error.txt").exists() else None for name in names}


def test_failures_come_back_as_onnxruntime_errors(cann, tmp_path, rng):
    """A failing aclnn call (forced in the simulator) names the function, its code and CANN's message,
    in either phase, and leaves nothing behind; inputs aclnn cannot take never reach it."""
    go, x = random_array(rng, (4, 9), F32), random_array(rng, (4, 9), F32)
    inputs = group_norm_feeds(rng, (2, 8, 3), 2, F16, F16)
    wide = group_norm_feeds(rng, (1, 4001, 2), 1, F32, F32)   # C/G = 4001 -> 4008 after rounding
    at_limit = group_norm_feeds(rng, (1, 4000, 1), 1, F32, F32)
    cases = {
        "silu": cast_wrapped("SiluBackward", {"gradOutput": go, "self": x}, ["gradInput"]),
        "gn-grad": cast_wrapped("GroupNormSwishGrad", inputs, ["dx", "dgamma", "dbeta"], num_groups=2),
        "over-limit": cast_wrapped("GroupNormSwishGrad", wide, ["dx", "dgamma", "dbeta"], num_groups=1),
        "at-limit": cast_wrapped("GroupNormSwishGrad", at_limit, ["dx", "dgamma", "dbeta"], num_groups=1),
        "nhwc": cast_wrapped("GroupNormSwishGrad", group_norm_feeds(rng, (2, 3, 8), 2, F16, F16, "NHWC"), ["dx"], num_groups=2,
                             data_format="NHWC"),
        "bad-shape": cast_wrapped("SiluBackward", {"gradOutput": go, "self": x[:, :4]}, ["gradInput"]),
    }
    _save(tmp_path, cases)
    done, report = cann.run(CHILD, runtime_ext.library_path(), str(tmp_path), env={"SIMCANN_FAIL": "aclnnSiluBackward=561103"})
    assert done.returncode == 0, done.stderr[-3000:]
    errors = _errors(tmp_path, cases)
    assert "[SiluBackward] aclnnSiluBackward failed with status 561103" in errors["silu"], errors["silu"]
    assert errors["silu"].split("561103", 1)[1].strip(": \n"), "CANN's own message is missing"
    assert errors["gn-grad"] is None and errors["at-limit"] is None
    assert "[GroupNormSwishGrad] C / num_groups = 4001 is over aclnnGroupNormSwishGrad's limit" in errors["over-limit"]
    assert "[GroupNormSwishGrad] data_format 'NHWC'" in errors["nhwc"]
    cpu_message = None
    try:
        run_onnxruntime(cases["bad-shape"][0], cases["bad-shape"][1], runtime_ext.session_options())
    except Exception as error:
        cpu_message = str(error)
    assert "[SiluBackward] gradOutput (4, 9) and self (4, 4) must have the same shape" in errors["bad-shape"]
    assert "[SiluBackward] gradOutput (4, 9) and self (4, 4) must have the same shape" in cpu_message  # the same check
    assert report["aclnn_calls"]["aclnnGroupNormSwishGradGetWorkspaceSize"] == 2  # gn-grad, at-limit: not the refused ones
    cann.assert_clean(report)

    done, report = cann.run(CHILD, runtime_ext.library_path(), str(tmp_path), env={"SIMCANN_FAIL": "aclnnGroupNormSwishGradGetWorkspaceSize=161002"})
    errors = _errors(tmp_path, ["gn-grad"])
    assert "[GroupNormSwishGrad] aclnnGroupNormSwishGradGetWorkspaceSize failed with status 161002" in errors["gn-grad"]
    cann.assert_clean(report)


FIND = r"""
import ctypes, os, sys
import numpy as np, onnxruntime as ort
library, model, lib64 = sys.argv[1], sys.argv[2], sys.argv[3]
for name in ("libascendcl.so", "libacl_op_compiler.so", "libfmk_onnx_parser.so"):  # what the EP itself needs
    ctypes.CDLL(os.path.join(lib64, name), ctypes.RTLD_GLOBAL)
options = ort.SessionOptions()
options.register_custom_ops_library(library)
session = ort.InferenceSession(model, options, providers=[("CANNExecutionProvider", {"enable_cann_graph": "0"}), "CPUExecutionProvider"])
feeds = dict(np.load(model[:-5] + ".inputs.npz"))
try:
    session.run(None, feeds)
    print("ran")
except Exception as error:
    print(error)
"""


def test_finding_cann(cann, tmp_path, rng):
    """CANN through ASCEND_HOME_PATH (set_env.sh's way), through libraries already loaded, and a clear
    error when the aclnn libraries are nowhere (the EP's own libraries loaded, libopapi absent)."""
    go, x = random_array(rng, (4, 9), F32), random_array(rng, (4, 9), F32)
    _save(tmp_path, {"silu": cast_wrapped("SiluBackward", {"gradOutput": go, "self": x}, ["gradInput"])})
    for preload in (False, True):
        done, report = cann.run(CHILD, runtime_ext.library_path(), str(tmp_path), preload=preload)
        assert done.returncode == 0 and not (tmp_path / "silu.error.txt").exists(), done.stderr[-2000:]
        assert report["aclnn_calls"]["aclnnSiluBackward"] == 1
    no_cann = {"ASCEND_HOME_PATH": "", "LD_LIBRARY_PATH": ""}
    done, report = cann.run(FIND, runtime_ext.library_path(), str(tmp_path / "silu.onnx"), cann.lib64, env=no_cann, preload=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[SiluBackward] CANN not found (source CANN's set_env.sh, or set ASCEND_HOME_PATH)" in done.stdout
    assert "/usr/local/Ascend/ascend-toolkit/latest/lib64/libopapi.so" in done.stdout
