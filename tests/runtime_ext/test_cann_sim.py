"""The simulated CANN runtime (tests/runtime_ext/cann_sim/): its aclnn ops against the float64
reference and their documented argument rules, its protocol checks, and the real onnxruntime-cann
1.24.4 running ai.onnx graphs (the bundled ones, as they are and fused) on it."""

import glob
import json
import signal
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx import TensorProto as TP

from ascend_grad import graph_passes, runtime_ext
from ascend_grad.ops import reference
from ascend_grad.testing import BFLOAT16, FLOAT_DTYPES, assert_close, run_onnxruntime

NULLPTR, INVALID, RUNTIME = 161001, 161002, 361001  # ACLNN_ERR_PARAM_NULLPTR, _PARAM_INVALID, _RUNTIME_ERROR
GRAPHS = Path(runtime_ext.__file__).resolve().parents[1] / "models" / "graphs"
if not GRAPHS.is_dir():  # an installed package: the repository's folder
    GRAPHS = Path(__file__).resolve().parents[2] / "models" / "graphs"


# ------------------------------------------------------------------ aclnn cases, run in one child

# One child runs every case: each argument is a tensor uploaded from the npz ("tensor"), an output
# ("out": allocated, optionally prefilled, read back after the call), null, or a scalar.
CASES_CHILD = r"""
import json, sys
import numpy as np
import simacl

acl = simacl.Acl()
cases = json.load(open(sys.argv[1]))
arrays = np.load(sys.argv[2])
outputs, statuses = {}, {}
for case in cases:
    args, tensors, buffers, outs = [], [], [], []
    for a in case["args"]:
        kind = a["kind"]
        if kind in ("tensor", "out"):
            host = arrays[a["fill"]] if a.get("fill") else None
            if kind == "tensor":
                host = arrays[a["key"]]
            dtype = simacl.DTYPES[a["dtype"]][1]
            nbytes = a.get("nbytes") or int(np.prod(a["shape"])) * np.dtype(dtype).itemsize
            ptr = acl.upload(host) if host is not None else acl.malloc(nbytes)
            buffers.append(ptr)
            t = acl.tensor(ptr, a["shape"], a["dtype"], a.get("strides"), a.get("offset", 0))
            tensors.append(t)
            args.append(t)
            if kind == "out":
                outs.append((a["name"], ptr, a["shape"], dtype))
        elif kind == "null":
            args.append(None)
        else:
            args.append(a["value"].encode() if kind == "str" and a["value"] is not None else a["value"])
    status, message = acl.call(case["op"], *args)
    statuses[case["id"]] = [status, message]
    if status == 0:
        for name, ptr, shape, dtype in outs:
            outputs[case["id"] + "/" + name] = acl.download(ptr, shape, dtype)
    acl.destroy(*tensors)
    for ptr in buffers:
        acl.free(ptr)
acl.close()
np.savez(sys.argv[3], **outputs)
json.dump(statuses, open(sys.argv[4], "w"))
"""


def _bits(a, dtype):
    """float values -> the numpy array whose bits the device holds (bfloat16 as uint16)."""
    a = np.asarray(a, dtype=np.float64)
    return a.astype(BFLOAT16).view(np.uint16) if dtype == "bfloat16" else a.astype(np.dtype(dtype))


def _from_bits(a, dtype):
    return a.view(BFLOAT16) if dtype == "bfloat16" else a


def _rounded(a, dtype):
    return _from_bits(_bits(a, dtype), dtype).astype(np.float64)


class Cases:
    def __init__(self):
        self.arrays, self.cases = {}, []

    def tensor(self, values, dtype, **view):
        key = f"a{len(self.arrays)}"
        self.arrays[key] = _bits(values, dtype)
        return {"kind": "tensor", "key": key, "dtype": dtype, "shape": list(np.shape(values)), **view}

    def out(self, name, shape, dtype, fill=None):
        arg = {"kind": "out", "name": name, "shape": list(shape), "dtype": dtype}
        if fill is not None:
            arg["fill"] = f"a{len(self.arrays)}"
            self.arrays[arg["fill"]] = _bits(fill, dtype)
        return arg

    def add(self, case_id, op, *args, expect=0, check=None):
        scalars = {int: "int", float: "double", bool: "bool", str: "str"}
        wrapped = [a if isinstance(a, dict) else {"kind": "null"} if a is None else {"kind": scalars[type(a)], "value": a}
                   for a in args]
        self.cases.append({"id": case_id, "op": op, "args": wrapped, "expect": expect, "check": check})

    def run(self, cann, folder: Path, env=None):
        np.savez(folder / "in.npz", **self.arrays)
        spec = [{k: c[k] for k in ("id", "op", "args")} for c in self.cases]
        (folder / "cases.json").write_text(json.dumps(spec))
        done, report = cann.run(CASES_CHILD, folder / "cases.json", folder / "in.npz", folder / "out.npz", folder / "status.json", env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        statuses = json.loads((folder / "status.json").read_text())
        with np.load(folder / "out.npz") as z:
            outputs = {k: z[k] for k in z.files}
        return statuses, outputs, report


def _values(rng, shape, scale=2.0, extremes=True):
    """Normal values with +-90 and NaN in them (where there is room): the stable-form and NaN cases."""
    x = rng.standard_normal(shape) * scale
    flat = x.reshape(-1)
    if extremes and flat.size >= 4:
        flat[0], flat[1], flat[-1] = 90.0, -90.0, np.nan
    return x


def _silu_cases(cases, rng):
    shapes = {"rank0": (), "odd": (3, 5, 7), "rank8": (1, 2, 1, 3, 1, 2, 1, 3), "long": (2, 1001), "empty": (0, 3)}
    for dtype in FLOAT_DTYPES:
        for label, shape in shapes.items():
            go, x = _values(rng, shape, 1.0), _values(rng, shape)
            ref = reference.silu_backward(_rounded(go, dtype), _rounded(x, dtype))
            cases.add(f"silu/{dtype}/{label}", "SiluBackward", cases.tensor(go, dtype), cases.tensor(x, dtype),
                      cases.out("gradInput", shape, dtype), check={"gradInput": (ref, dtype)})
    # a strided view: self read through a transposed, offset view of a larger buffer
    base = rng.standard_normal((6, 5)) * 2
    x = base[1:, :].T  # (5, 5) view: offset 5 elements, strides (1, 5)
    go = rng.standard_normal((5, 5))
    ref = reference.silu_backward(_rounded(go, "float32"), _rounded(x, "float32"))
    view = cases.tensor(base, "float32")
    view.update(shape=[5, 5], strides=[1, 5], offset=5)
    cases.add("silu/float32/strided", "SiluBackward", cases.tensor(go, "float32"), view,
              cases.out("gradInput", (5, 5), "float32"), check={"gradInput": (ref, "float32")})


def _mish_cases(cases, rng):
    promoted = lambda a, b: a if a == b else "float32"  # noqa: E731
    for dy_type in FLOAT_DTYPES:
        for x_type in FLOAT_DTYPES:
            out_type = promoted(dy_type, x_type)
            for label, (gs, xs) in {"broadcast": ((3, 1, 5), (4, 5)), "same": ((2, 3, 7), (2, 3, 7)), "scalar": ((), (2, 3))}.items():
                go, x = _values(rng, gs, 1.0, extremes=label != "scalar"), _values(rng, xs)
                ref = reference.mish_backward(_rounded(go, dy_type), _rounded(x, x_type))
                cases.add(f"mish/{dy_type}-{x_type}/{label}", "MishBackward", cases.tensor(go, dy_type), cases.tensor(x, x_type),
                          cases.out("gradInput", ref.shape, out_type), check={"gradInput": (ref, out_type)})


def _group_norm_inputs(rng, shape, G, dtype):
    x = _rounded(rng.standard_normal(shape) * 2 + 0.5, dtype)
    C = shape[1]
    gamma = _rounded(rng.standard_normal(C) * 1.5, dtype)
    beta = _rounded(rng.standard_normal(C), dtype)
    beta[0], beta[-1] = 90.0, -90.0  # z = +-90: the stable sigmoid
    _, mean, rstd = reference.group_norm_swish(x, gamma, beta, G)
    dy = _rounded(rng.standard_normal(shape), dtype)
    return dy, _rounded(mean, dtype), _rounded(rstd, dtype), x, gamma, beta


def _gns_grad_cases(cases, rng):
    shapes = {"G3": ((2, 6, 5, 3), 3), "G==C": ((2, 6, 4), 6), "G1": ((3, 4, 3, 3), 1), "HxW1": ((3, 8), 4),
              "rank5": ((1, 4, 2, 3, 2), 2)}
    for dtype in FLOAT_DTYPES:
        for label, (shape, G) in shapes.items():
            for scale, flags in ((1.0, (True, True)), (1.5, (True, False)), (0.7, (False, True))):
                dy, mean, rstd, x, gamma, beta = _group_norm_inputs(rng, shape, G, dtype)
                if label == "G3":
                    dy.reshape(-1)[5] = np.nan  # NaN propagates through its group and channel
                dx, dgamma, dbeta = reference.group_norm_swish_grad(dy, mean, rstd, x, gamma, beta, G, scale)
                C = shape[1]
                sentinel = np.full(C, 7.0)  # an output whose flag is off stays as it was
                check = {"dx": (dx, dtype), "dgamma": (dgamma if flags[0] else sentinel, dtype),
                         "dbeta": (dbeta if flags[1] else sentinel, dtype)}
                cases.add(f"gnsgrad/{dtype}/{label}/{scale}", "GroupNormSwishGrad",
                          *(cases.tensor(v, dtype) for v in (dy, mean, rstd, x, gamma, beta)), G, "NCHW", scale, *flags,
                          cases.out("dx", shape, dtype), cases.out("dgamma", (C,), dtype, fill=sentinel),
                          cases.out("dbeta", (C,), dtype, fill=sentinel), check=check)


def _gns_cases(cases, rng):
    for dtype in FLOAT_DTYPES:
        for param_type in sorted({dtype, "float32"}):
            for label, (shape, G, act) in {"G2": ((2, 4, 3, 5), 2, True), "G==C": ((3, 6, 7), 6, False), "HxW1": ((2, 8), 1, True)}.items():
                x = _rounded(rng.standard_normal(shape) * 3 + 1, dtype)
                x.reshape(-1)[0] = 90.0
                gamma, beta = _rounded(rng.standard_normal(shape[1]), param_type), _rounded(rng.standard_normal(shape[1]), param_type)
                y, mean, rstd = reference.group_norm_swish(x, gamma, beta, G, eps=1e-5, swish_scale=1.3, activate_swish=act)
                N = shape[0]
                cases.add(f"gns/{dtype}-{param_type}/{label}", "GroupNormSwish", cases.tensor(x, dtype), cases.tensor(gamma, param_type),
                          cases.tensor(beta, param_type), G, "NCHW", 1e-5, act, 1.3, cases.out("y", shape, dtype),
                          cases.out("mean", (N, G), param_type), cases.out("rstd", (N, G), param_type),
                          check={"y": (y, dtype), "mean": (mean, param_type), "rstd": (rstd, param_type)})


def _compare(case, statuses, outputs):
    status, message = statuses[case["id"]]
    assert status == 0, f"{case['id']}: status {status}: {message}"
    for name, (ref, dtype) in (case["check"] or {}).items():
        got = _from_bits(outputs[f"{case['id']}/{name}"], dtype)
        assert_close(got, ref, f"{case['id']}/{name}")


def test_aclnn_ops_equal_the_float64_reference(cann, rng, tmp_path):
    cases = Cases()
    _silu_cases(cases, rng)
    _mish_cases(cases, rng)
    _gns_grad_cases(cases, rng)
    _gns_cases(cases, rng)
    statuses, outputs, report = cases.run(cann, tmp_path)
    for case in cases.cases:
        _compare(case, statuses, outputs)
    per_op = {}
    for case in cases.cases:
        per_op[case["op"]] = per_op.get(case["op"], 0) + 1
    for op, n in per_op.items():  # both phases once per case
        assert report["aclnn_calls"][f"aclnn{op}GetWorkspaceSize"] == n
        assert report["aclnn_calls"][f"aclnn{op}"] == n
    cann.assert_clean(report)


def _rule_cases(rng):
    """Every documented argument rule, refused with its code; the limits exactly at the edge accepted."""
    c = Cases()
    f32, f16 = "float32", "float16"
    a = rng.standard_normal((2, 3))
    # SiluBackward: one dtype, one shape, rank <= 8, float types only, no null
    c.add("silu/mixed-dtype", "SiluBackward", c.tensor(a, f32), c.tensor(a, f16), c.out("o", (2, 3), f32), expect=INVALID)
    c.add("silu/shapes", "SiluBackward", c.tensor(a, f32), c.tensor(a.T, f32), c.out("o", (2, 3), f32), expect=INVALID)
    r9 = np.ones((1,) * 9)
    c.add("silu/rank9", "SiluBackward", c.tensor(r9, f32), c.tensor(r9, f32), c.out("o", r9.shape, f32), expect=INVALID)
    c.add("silu/int", "SiluBackward", c.tensor(a, "int32"), c.tensor(a, "int32"), c.out("o", (2, 3), "int32"), expect=INVALID)
    c.add("silu/null", "SiluBackward", c.tensor(a, f32), c.tensor(a, f32), None, expect=NULLPTR)
    # MishBackward: broadcast, the seed's dtypes (BFLOAT16, FLOAT16, FLOAT32 for each tensor, the
    # pair deduced by aclnn's table), rank, no empty tensors
    c.add("mish/empty", "MishBackward", c.tensor(np.ones((0, 3)), f32), c.tensor(np.ones((0, 3)), f32), c.out("o", (0, 3), f32), expect=INVALID)
    c.add("mish/rank9", "MishBackward", c.tensor(r9, f32), c.tensor(r9, f32), c.out("o", r9.shape, f32), expect=INVALID)
    c.add("mish/no-broadcast", "MishBackward", c.tensor(a, f32), c.tensor(np.ones((4, 3)), f32), c.out("o", (4, 3), f32), expect=INVALID)
    # float with double deduces double, which aclnnMishBackward does not take; nor integers, in or out
    c.add("mish/double", "MishBackward", c.tensor(a, f32), c.tensor(a, "float64"), c.out("o", (2, 3), "float64"), expect=INVALID)
    c.add("mish/double-out", "MishBackward", c.tensor(a, f32), c.tensor(a, f32), c.out("o", (2, 3), "float64"), expect=INVALID)
    c.add("mish/int", "MishBackward", c.tensor(a, "int32"), c.tensor(a, f32), c.out("o", (2, 3), f32), expect=INVALID)
    c.add("mish/int-out", "MishBackward", c.tensor(a, f16), c.tensor(a, f32), c.out("o", (2, 3), "int32"), expect=INVALID)
    # gradInput narrower than the deduced float: allowed (its dtype deduces with gradOutput's), the
    # float result cast to float16
    go, x = _values(rng, (2, 3), 1.0), _values(rng, (2, 3))
    narrow = reference.mish_backward(_rounded(go, f16), _rounded(x, f32))
    c.add("mish/float16-out", "MishBackward", c.tensor(go, f16), c.tensor(x, f32), c.out("o", (2, 3), f16), check={"o": (narrow, f16)})
    c.add("mish/out-shape", "MishBackward", c.tensor(a, f32), c.tensor(a[:1], f32), c.out("o", (1, 3), f32), expect=INVALID)
    c.add("mish/null", "MishBackward", None, c.tensor(a, f32), c.out("o", (2, 3), f32), expect=NULLPTR)

    def gns_grad(case_id, shape, G, dtype="float32", dtypes=None, fmt="NCHW", nulls=(), flags=(True, True), stats=None, expect=INVALID):
        N, C = shape[:2] if len(shape) > 1 else (1, shape[0])
        valid = expect == 0  # refused cases: any values of the shapes given
        dy, mean, rstd, x, gamma, beta = _group_norm_inputs(rng, shape, G, dtype) if valid else [np.ones(s) for s in (shape, (N, G), (N, G), shape, (C,), (C,))]
        if stats is not None:
            mean = rstd = np.ones(stats)
        values = [dy, mean, rstd, x, gamma, beta]
        names = ["dy", "mean", "rstd", "x", "gamma", "beta", "dx", "dgamma", "dbeta"]
        dtypes = dtypes or {}
        args = [None if n in nulls else c.tensor(v, dtypes.get(n, dtype)) for n, v in zip(names, values)]
        outs = [None if n in nulls else c.out(n, s, dtypes.get(n, dtype)) for n, s in zip(names[6:], (shape, (C,), (C,)))]
        check = None
        if expect == 0:
            dx, dgamma, dbeta = reference.group_norm_swish_grad(*values, G)
            check = {"dx": (dx, dtype), "dgamma": (dgamma, dtype), "dbeta": (dbeta, dtype)}
        c.add(case_id, "GroupNormSwishGrad", *args, G, fmt, 1.0, *flags, *outs, expect=expect, check=check)

    gns_grad("gnsgrad/mixed-dtype", (2, 4, 3), 2, dtypes={"mean": f32, "rstd": f32, "gamma": f32, "beta": f32}, dtype=f16)
    gns_grad("gnsgrad/mixed-out-dtype", (2, 4, 3), 2, dtypes={"dgamma": f32}, dtype=f16)
    gns_grad("gnsgrad/null-dgamma", (2, 4, 3), 2, nulls=("dgamma",), flags=(False, True), expect=NULLPTR)
    gns_grad("gnsgrad/null-dbeta", (2, 4, 3), 2, nulls=("dbeta",), flags=(True, False), expect=NULLPTR)
    gns_grad("gnsgrad/G0", (2, 4, 3), 0, stats=(2, 1))
    gns_grad("gnsgrad/G-not-dividing", (2, 6, 3), 4, stats=(2, 4))
    gns_grad("gnsgrad/NHWC", (2, 4, 3), 2, fmt="NHWC")
    gns_grad("gnsgrad/rank9", (1, 2, 1, 1, 1, 1, 1, 1, 2), 2)
    gns_grad("gnsgrad/rank1", (4,), 2, stats=(2,))
    gns_grad("gnsgrad/stats-size", (2, 4, 3), 2, stats=(3, 2))
    gns_grad("gnsgrad/empty", (2, 4, 0), 2)
    # C/G rounded up to 8 (float) or 16 (half types) must not exceed 4000: the edge accepted
    gns_grad("gnsgrad/float-4000", (1, 4000), 1, expect=0)
    gns_grad("gnsgrad/float-3993", (1, 3993), 1, expect=0)  # rounds up to 4000
    gns_grad("gnsgrad/float-4001", (1, 4001), 1)  # rounds up to 4008
    gns_grad("gnsgrad/float16-3985", (1, 3985), 1, dtype=f16, expect=0)  # rounds up to 4000
    gns_grad("gnsgrad/float16-4001", (1, 4001), 1, dtype=f16)  # rounds up to 4016
    gns_grad("gnsgrad/bfloat16-8002", (1, 8002), 2, dtype="bfloat16")  # C/G 4001
    # GroupNormSwish: x rank 2-8, gamma/beta x's dtype or float, mean/rstd (N, G) in gamma's dtype
    x = rng.standard_normal((2, 4, 3))

    def gns(case_id, x, G, x_type=f32, p_type=f32, stat_shape=None, stat_type=None, expect=INVALID):
        N, C = (x.shape + (1, 1))[:2]
        stat_shape = stat_shape or (N, G)
        c.add(case_id, "GroupNormSwish", c.tensor(x, x_type), c.tensor(np.ones(C), p_type), c.tensor(np.zeros(C), p_type), G, None, 1e-5,
              True, 1.0, c.out("y", x.shape, x_type), c.out("mean", stat_shape, stat_type or p_type),
              c.out("rstd", stat_shape, stat_type or p_type), expect=expect)

    gns("gns/ok", x, 2, expect=0)
    gns("gns/rank1", np.ones(4), 2)
    gns("gns/gamma-dtype", x, 2, x_type=f32, p_type=f16)
    gns("gns/stats-shape", x, 2, stat_shape=(4,))
    gns("gns/stats-dtype", x, 2, x_type=f16, p_type=f32, stat_type=f16)
    gns("gns/N0", np.ones((0, 4, 3)), 2)
    return c


def test_aclnn_argument_rules(cann, rng, tmp_path):
    cases = _rule_cases(rng)
    statuses, outputs, report = cases.run(cann, tmp_path)
    for case in cases.cases:
        status, message = statuses[case["id"]]
        assert status == case["expect"], f"{case['id']}: status {status} ({message}), expected {case['expect']}"
        if status:
            assert message and case["op"] in message, f"{case['id']}: message {message!r}"
        else:
            _compare(case, statuses, outputs)
    cann.assert_clean(report)  # refusals are not protocol violations


# ------------------------------------------------------------------ protocol

PROTOCOL_CHILD = r"""
import ctypes, json, sys
import numpy as np
import simacl

acl = simacl.Acl()
x = np.linspace(-3, 3, 12, dtype=np.float32)
dev = [acl.upload(x) for _ in range(2)]
out = acl.malloc(x.nbytes)
results, made = {}, []

def tensors(a=None, b=None, o=None):
    made.extend(acl.tensor(p, (12,), "float32") for p in (a or dev[0], b or dev[1], o or out))
    return made[-3:]

def phase1(op="SiluBackward", ts=None):
    ts = ts or tensors()
    status, size, ex = acl.workspace_size(op, *ts)
    assert status == 0, acl.error()
    return ts, size, ex

def record(name, status):
    results[name] = [status, acl.error()]

# stream never created, and stream destroyed
ts, size, ex = phase1()
ws = acl.malloc(size)
record("stream-not-created", acl.launch("SiluBackward", ws, size, ex, stream=0x1234))
dead = acl.create_stream()
acl.check(acl.acl.aclrtDestroyStream(dead), "aclrtDestroyStream")
ts2, size2, ex2 = phase1(ts=ts)
record("stream-destroyed", acl.launch("SiluBackward", ws, size2, ex2, stream=dead))
# executor used twice
ts3, size3, ex3 = phase1(ts=ts)
record("first-use", acl.launch("SiluBackward", ws, size3, ex3))
record("executor-reused", acl.launch("SiluBackward", ws, size3, ex3))
# workspace too small, workspace in host memory, executor of another op
_, size4, ex4 = phase1(ts=ts)
record("workspace-too-small", acl.launch("SiluBackward", ws, size4 - 1, ex4))
host = np.zeros(size, np.uint8)
_, size5, ex5 = phase1(ts=ts)
record("workspace-on-host", acl.launch("SiluBackward", host.ctypes.data, size5, ex5))
_, size6, ex6 = phase1(ts=ts)
record("executor-of-another-op", acl.launch("MishBackward", ws, size6, ex6))
# tensor data: a host pointer, past the end of its allocation, freed memory
host_x = x.copy()
_, size7, ex7 = phase1(ts=tensors(a=host_x.ctypes.data))
record("host-pointer-as-device-data", acl.launch("SiluBackward", ws, size7, ex7))
small = acl.malloc(16)
_, size8, ex8 = phase1(ts=tensors(b=small))
record("tensor-past-allocation", acl.launch("SiluBackward", ws, size8, ex8))
gone = acl.malloc(x.nbytes)
acl.free(gone)
_, size9, ex9 = phase1(ts=tensors(o=gone))
record("tensor-on-freed-memory", acl.launch("SiluBackward", ws, size9, ex9))
# runtime calls: memcpy kinds that lie about where a pointer lives, double free, double destroy
buf = np.zeros(12, np.float32)
record("memcpy-kind-src", acl.acl.aclrtMemcpy(dev[0], x.nbytes, dev[1], x.nbytes, simacl.H2D))
record("memcpy-kind-host-src", acl.acl.aclrtMemcpy(buf.ctypes.data, x.nbytes, buf.ctypes.data, x.nbytes, simacl.D2H))
record("double-free", acl.acl.aclrtFree(gone))
t = acl.tensor(dev[0], (12,), "float32")
acl.destroy(t)
record("tensor-destroyed-twice", acl.nn.aclDestroyTensor(t))
# left behind on purpose: one executor never launched, one tensor never destroyed
phase1(ts=ts)
acl.destroy(*made)
acl.tensor(dev[0], (12,), "float32")
print(json.dumps(results))
"""

VIOLATIONS = {  # case -> (status, words of the recorded violation)
    "stream-not-created": (RUNTIME, "not created by aclrtCreateStream"),
    "stream-destroyed": (RUNTIME, "not created by aclrtCreateStream (or was destroyed)"),
    "executor-reused": (INVALID, "already used"),
    "workspace-too-small": (INVALID, "smaller than"),
    "workspace-on-host": (INVALID, "workspace"),
    "executor-of-another-op": (INVALID, "comes from aclnnSiluBackwardGetWorkspaceSize"),
    "host-pointer-as-device-data": (INVALID, "gradOutput data"),
    "tensor-past-allocation": (INVALID, "runs past the end"),
    "tensor-on-freed-memory": (INVALID, "already freed"),
    "memcpy-kind-src": (100000, "ACL_MEMCPY_HOST_TO_DEVICE but src"),
    "memcpy-kind-host-src": (100000, "is not device memory"),
    "double-free": (207002, "double free"),
    "tensor-destroyed-twice": (INVALID, "not a live aclTensor"),
}


def test_protocol_violations_are_refused_and_recorded(cann):
    done, report = cann.run(PROTOCOL_CHILD)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results["first-use"] == [0, None]
    for case, (status, words) in VIOLATIONS.items():
        got, message = results[case]
        assert got == status, f"{case}: status {got} ({message}), expected {status}"
        assert message and words in message, f"{case}: message {message!r} lacks {words!r}"
        assert any(message in v for v in report["violations"]), f"{case}: not in the report's violations"
    assert report["violation_count"] == len(VIOLATIONS)
    # unused: the one left on purpose, and the one refused by the other op (refused, not consumed)
    assert report["unused_executors"] == 2 and report["live_tensors"] == 1
    with pytest.raises(AssertionError, match="unused_executors = 2"):
        cann.assert_clean(report)


def test_forced_failure_is_returned_with_its_message(cann, tmp_path):
    cases = Cases()
    a = np.ones((2, 3))
    cases.add("forced", "SiluBackward", cases.tensor(a, "float32"), cases.tensor(a, "float32"), cases.out("o", (2, 3), "float32"))
    statuses, _, report = cases.run(cann, tmp_path, env={"SIMCANN_FAIL": "aclnnSiluBackward=561103"})
    status, message = statuses["forced"]
    assert status == 561103 and "aclnnSiluBackward" in message and "561103" in message
    assert report["forced_failures"] == 1
    cann.assert_clean(report)  # the executor was consumed by the failing launch


HOST_READ_CHILD = r"""
import ctypes, sys
import simacl

acl = simacl.Acl()
pinned = ctypes.c_void_p()
acl.check(acl.acl.aclrtMallocHost(ctypes.byref(pinned), 64), "aclrtMallocHost")
ctypes.memset(pinned, 1, 64)                      # host memory: fine
device = acl.upload(__import__("numpy").ones(16, "float32"))
print("before", flush=True)
ctypes.string_at(device, 8)                       # the host reading device memory
print("after", flush=True)
"""


def test_host_read_of_device_memory_crashes(cann):
    done, report = cann.run(HOST_READ_CHILD)
    assert done.stdout.split() == ["before"], done.stdout + done.stderr[-2000:]
    assert done.returncode == -signal.SIGSEGV, (done.returncode, done.stderr[-2000:])
    assert report is None  # died before exit


# ------------------------------------------------------------------ onnxruntime-cann on the simulator

def _plain_graph():
    """Every ai.onnx op kind the bundled graphs send to the NPU, on float32: Conv, MatMul,
    Transpose-free chains of Add/Sub/Mul/Div (one side broadcast), Sqrt, Neg, Reciprocal, Log,
    Cast; no binary op with both sides broadcast (onnxruntime-cann 1.24.4's bug)."""
    V = helper.make_tensor_value_info
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Mul", ["c", "scale"], ["m"], name="mul"),  # scale (1, 6, 1, 1) broadcast
        helper.make_node("Reshape", ["m", "shape"], ["r"], name="reshape"),
        helper.make_node("MatMul", ["r", "k"], ["mm"], name="matmul"),
        helper.make_node("Sub", ["mm", "bias"], ["s"], name="sub"),
        helper.make_node("Mul", ["s", "s"], ["sq"], name="square"),
        helper.make_node("Add", ["sq", "one"], ["a"], name="add"),
        helper.make_node("Sqrt", ["a"], ["rt"], name="sqrt"),
        helper.make_node("Reciprocal", ["rt"], ["rc"], name="reciprocal"),
        helper.make_node("Log", ["rt"], ["lg"], name="log"),
        helper.make_node("Neg", ["lg"], ["ng"], name="neg"),
        helper.make_node("Div", ["ng", "rc"], ["d"], name="div"),
        helper.make_node("Cast", ["d"], ["h"], to=TP.FLOAT16, name="cast"),
        helper.make_node("Mul", ["h", "h"], ["y"], name="mul16"),
    ]
    inits = [
        helper.make_tensor("scale", TP.FLOAT, [1, 6, 1, 1], np.linspace(0.5, 1.5, 6)),
        helper.make_tensor("shape", TP.INT64, [2], [12, 6 * 36 // 6]),
        helper.make_tensor("bias", TP.FLOAT, [5], np.linspace(-1, 1, 5)),
        helper.make_tensor("one", TP.FLOAT, [], [1.0]),
    ]
    graph = helper.make_graph(nodes, "plain", [V("x", TP.FLOAT, [2, 3, 6, 6]), V("w", TP.FLOAT, [6, 3, 3, 3]), V("b", TP.FLOAT, [6]),
                                               V("k", TP.FLOAT, [36, 5])], [V("y", TP.FLOAT16, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("preload", [False, True], ids=["env", "preload"])
def test_plain_graph_runs_on_the_simulated_npu(cann, rng, tmp_path, preload):
    model = _plain_graph()
    onnx.save(model, tmp_path / "plain.onnx")
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32) for i in model.graph.input}
    # k at 1/8: y (float16) then stays below 8.5e3 (3000 seeds); at scale 1 it reached float16's
    # largest value, where the NPU and the CPU round to 65504 or inf by a hair (seed 131035120)
    feeds["k"] *= np.float32(0.125)
    np.savez(tmp_path / "plain.npz", **feeds)
    results, report = cann.run_models([{"name": "plain", "path": str(tmp_path / "plain.onnx"), "feeds": str(tmp_path / "plain.npz")}],
                                      tmp_path / "out", preload=preload)
    r = results["plain"]
    assert r["error"] is None, r["error"]
    on_npu = {node for node, (_, provider) in r["placement"].items() if provider == "CANNExecutionProvider"}
    assert {"conv", "mul", "matmul", "sub", "square", "add", "sqrt", "reciprocal", "log", "neg", "div", "cast", "mul16"} <= on_npu, r["placement"]
    assert {"Conv2D", "Mul", "BatchMatMul", "Sub", "Add", "Sqrt", "Reciprocal", "Log", "Neg", "Div", "Cast", "BroadcastToD"} <= set(r["aclop"])
    assert_close(r["cann"][0], r["cpu"][0].astype(np.float64), "y", tolerance=1e-3)  # float16 output
    cann.assert_clean(report, "plain graph")


def _runtime_shapes(model, feeds, library=None):
    """{value name: shape} of every node output, as a CPU run of the model produces it (the bundled
    graphs' dims are symbolic, and shape inference loses some through computed Reshapes)."""
    import onnxruntime as ort

    model = onnx.ModelProto.FromString(model.SerializeToString())
    names = [out for node in model.graph.node for out in node.output if out]
    del model.graph.output[:]
    model.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if library:
        options.register_custom_ops_library(str(library))
    values = run_onnxruntime(model, feeds, options)
    shapes = {name: tuple(np.shape(v)) for name, v in values.items()}
    shapes.update({k: tuple(np.shape(v)) for k, v in feeds.items()})
    shapes.update({i.name: tuple(i.dims) for i in model.graph.initializer})
    return shapes


def _both_broadcast(model, shapes):
    """Names of the Add/Sub/Mul/Div nodes whose two inputs both differ in shape from the output:
    onnxruntime-cann 1.24.4 computes B op B for them on the NPU."""
    found = []
    for node in model.graph.node:
        if node.op_type in ("Add", "Sub", "Mul", "Div"):
            a, b, y = (shapes[n] for n in (*node.input, node.output[0]))
            if a != y and b != y:
                found.append(node.name)
    return found


def _prepared(model, name, inline):
    """A copy with every node named (the profile reports nodes by name), functions inlined unless
    the kernel library runs them."""
    model = onnx.inliner.inline_local_functions(model) if inline else onnx.ModelProto.FromString(model.SerializeToString())
    for i, node in enumerate(model.graph.node):
        node.name = node.name or f"{name}_node{i}"
    return model


def test_bundled_graphs_run_on_the_simulated_npu(cann, rng, tmp_path):
    """Every bundled graph, as it is, fused (function bodies inlined) and fused with the kernel
    library: placed on CANN, the simulator's ops agree with the CPU session within 1e-5 (float32;
    graphs holding float16 tensors: 5e-3, each float16 op rounds at 2^-11 and the two sides round
    at different places), where onnxruntime's broadcast bug changes results (B op B) they equal a
    CPU run of the graph with that bug written in, and the report is clean."""
    manifest = json.loads((GRAPHS / "manifest.json").read_text())
    models, prepared = [], {}
    for path in sorted(glob.glob(str(GRAPHS / "*.onnx"))):
        stem = Path(path).stem
        original = onnx.load(path)
        fused, _ = graph_passes.fuse_backward_ops(original)
        inputs = manifest[stem]["inputs"]
        feeds = {i.name: rng.standard_normal([d if isinstance(d, int) else 2 for d in inputs[i.name]]).astype(
                 onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)) for i in original.graph.input}
        np.savez(tmp_path / f"{stem}.npz", **feeds)
        for variant, model, library in (("", original, None), (".fused", fused, None), (".fused+lib", fused, runtime_ext.library_path())):
            name = stem + variant
            model = _prepared(model, name, inline=library is None)
            onnx.save(model, tmp_path / f"{name}.onnx")
            prepared[name] = (model, feeds, library, inputs)
            models.append({"name": name, "path": str(tmp_path / f"{name}.onnx"), "feeds": str(tmp_path / f"{stem}.npz"),
                           "library": str(library) if library else None})
    results, report = cann.run_models(models, tmp_path / "out")

    summary = {}
    for name, r in results.items():
        model, feeds, library, inputs = prepared[name]
        if r["error"]:
            # onnxruntime-training graphs hold training ops (com.microsoft Scale, ...) no inference build has
            assert r["stage"] == "load" and "is not a registered function/op" in r["error"], f"{name}: {r['error']}"
            assert any(o.domain == "com.microsoft" for o in model.opset_import), f"{name}: {r['error']}"
            summary[name] = "does not load: " + r["error"].split("failed:")[-1][:80]
            continue
        on_npu = {n for n, (_, p) in r["placement"].items() if p == "CANNExecutionProvider"}
        assert on_npu and r["aclop"] and not r["aclop_unsupported"], f"{name}: {r['aclop_unsupported']}"
        bug = [n for n in _both_broadcast(model, _runtime_shapes(model, feeds, library)) if n in on_npu]
        expected = r["cpu"]
        if bug:
            buggy = onnx.ModelProto.FromString(model.SerializeToString())
            for node in buggy.graph.node:
                if node.name in bug:
                    node.input[0] = node.input[1]
            options = None
            if library:
                import onnxruntime as ort

                options = ort.SessionOptions()
                options.register_custom_ops_library(str(library))
            expected = list(run_onnxruntime(buggy, feeds, options).values())
        holds_half = any(v.dtype == np.float16 for v in list(feeds.values()) + r["cpu"]) or "fp16" in name
        for out_name, got, want in zip(r["outputs"], r["cann"], expected):
            assert_close(got, want.astype(np.float64), f"{name}/{out_name}", tolerance=5e-3 if holds_half else 1e-5)
        summary[name] = {"aclop": r["aclop"], "aclnn": r["aclnn"], "broadcast_bug_nodes": len(bug),
                         "bug_changes_results": bool(bug) and any(
                             not np.allclose(g, w, rtol=1e-4, atol=1e-6, equal_nan=True) for g, w in zip(r["cann"], r["cpu"]))}
    print(json.dumps(summary, indent=1))
    assert any(s != "" and isinstance(s, dict) and s["aclnn"] for s in summary.values()), "no aclnn call from the kernel library"
    cann.assert_clean(report, "bundled graphs")
