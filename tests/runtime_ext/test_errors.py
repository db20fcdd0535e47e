"""Every input SPEC.md rejects makes the kernel return an error status: Python gets an exception that
names the op and the values. Each case runs in its own process, so a crash would show as one."""

import json
import subprocess
import sys

import pytest

# Runs one case: builds the model (symbolic dims, so nothing is rejected before the kernel runs),
# registers the library, runs it, and reports what was raised.
CHILD = r"""
import json, sys
import numpy as np, onnx, onnxruntime as ort
from onnx import helper
from ascend_grad import runtime_ext
case = json.loads(sys.argv[1])
names = [n for n, _, _ in case["inputs"]]
node = helper.make_node(case["op"], names, case["outputs"], domain="ascend.grad", name="n0", **case["attrs"])
types = {"float": 1, "float16": 10}
graph = helper.make_graph(
    [node], "g",
    [helper.make_tensor_value_info(n, types[t], [f"{n}_{k}" for k in range(len(s))]) for n, t, s in case["inputs"]],
    [helper.make_tensor_value_info(o, types[case["inputs"][0][1]], None) for o in case["outputs"]],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("ascend.grad", 1)], ir_version=10)
feeds = {n: np.ones(s, dtype={"float": np.float32, "float16": np.float16}[t]) for n, t, s in case["inputs"]}
try:
    session = ort.InferenceSession(model.SerializeToString(), runtime_ext.session_options(), providers=["CPUExecutionProvider"])
    session.run(None, feeds)
except Exception as error:
    print("RAISED", type(error).__name__, str(error))
else:
    print("NO ERROR")
"""

F, H = "float", "float16"


def gn_grad(x=(2, 64, 4, 4), stats=(2, 32), C=64, gamma=None, dy=None, **attrs):
    inputs = [("dy", F, dy or x), ("mean", F, stats), ("rstd", F, stats), ("x", F, x), ("gamma", F, gamma or (C,)), ("beta", F, (C,))]
    return ("GroupNormSwishGrad", inputs, ["dx", "dgamma", "dbeta"], attrs)


def gn(x=(2, 64, 4), C=64, gamma=None, **attrs):
    return ("GroupNormSwish", [("x", F, x), ("gamma", F, gamma or (C,)), ("beta", F, (C,))], ["y", "mean", "rstd"], attrs)


CASES = {
    "silu-shapes": (("SiluBackward", [("dy", F, (3, 4)), ("x", F, (3, 5))], ["dx"], {}), ["(3, 4)", "(3, 5)", "same shape"]),
    "silu-rank-9": (("SiluBackward", [("dy", F, (1,) * 9), ("x", F, (1,) * 9)], ["dx"], {}), ["rank must be 0 to 8"]),
    "silu-dtypes": (("SiluBackward", [("dy", H, (3,)), ("x", F, (3,))], ["dx"], {}), []),  # no kernel: onnxruntime says so
    "mish-broadcast": (("MishBackward", [("dy", F, (3, 4)), ("x", F, (5,))], ["dx"], {}), ["(3, 4)", "(5)", "do not broadcast"]),
    "mish-empty-gradOutput": (("MishBackward", [("dy", F, (0, 4)), ("x", F, (4,))], ["dx"], {}), ["gradOutput is empty (0, 4)"]),
    "mish-empty-self": (("MishBackward", [("dy", F, (4,)), ("x", F, (2, 0))], ["dx"], {}), ["self is empty (2, 0)"]),
    "mish-rank-9": (("MishBackward", [("dy", F, (1,) * 9), ("x", F, (1,))], ["dx"], {}), ["rank must be 0 to 8"]),
    "gn-grad-C-not-divisible": (gn_grad(x=(2, 63, 4), C=63, num_groups=32), ["C (63) must be divisible by num_groups (32)"]),
    "gn-grad-rank-1": (gn_grad(x=(64,), stats=(32,), num_groups=32), ["x must have rank 2 to 8", "(64)"]),
    "gn-grad-rank-9": (gn_grad(x=(2, 64) + (1,) * 7, num_groups=32), ["x must have rank 2 to 8"]),
    "gn-grad-gamma-size": (gn_grad(gamma=(32,), num_groups=32), ["gamma must be 1-D with C = 64 elements", "(32)"]),
    "gn-grad-gamma-2d": (gn_grad(gamma=(8, 8), num_groups=32), ["gamma must be 1-D", "(8, 8)"]),
    "gn-grad-mean-count": (gn_grad(stats=(2, 16), num_groups=32), ["mean (2, 16) has 32 elements", "2 * 32 = 64"]),
    "gn-grad-dy-shape": (gn_grad(dy=(2, 64, 4, 5), num_groups=32), ["dy (2, 64, 4, 5) and x (2, 64, 4, 4)"]),
    "gn-grad-no-num-groups": (gn_grad(), ["attribute num_groups is required"]),
    "gn-grad-num-groups-0": (gn_grad(num_groups=0), ["num_groups must be > 0, got 0"]),
    "gn-grad-num-groups-negative": (gn_grad(num_groups=-4), ["num_groups must be > 0, got -4"]),
    "gn-grad-num-groups-float": (gn_grad(num_groups=32.0), ["num_groups"]),
    "gn-grad-data-format": (gn_grad(num_groups=32, data_format="NCWH"), ["data_format must be 'NCHW' or 'NHWC', got 'NCWH'"]),
    "gn-grad-flag": (gn_grad(num_groups=32, dgamma_is_require=2), ["dgamma_is_require must be 0 or 1, got 2"]),
    "gn-grad-nhwc-C": (gn_grad(x=(2, 4, 4, 63), C=63, num_groups=32, data_format="NHWC"), ["C (63) must be divisible by num_groups (32)"]),
    "gn-C-not-divisible": (gn(x=(2, 10, 3), C=10, num_groups=4), ["C (10) must be divisible by num_groups (4)"]),
    "gn-eps": (gn(num_groups=8, eps=-1.0), ["eps must be >= 0, got -1"]),
    "gn-activate": (gn(num_groups=8, activate_swish=5), ["activate_swish must be 0 or 1, got 5"]),
    "gn-beta-size": (("GroupNormSwish", [("x", F, (2, 64, 4)), ("gamma", F, (64,)), ("beta", F, (65,))], ["y"], {"num_groups": 8}),
                     ["beta must be 1-D with C = 64 elements", "(65)"]),
    "gn-rank-1": (gn(x=(64,), num_groups=8), ["x must have rank 2 to 8", "(64)"]),
}


@pytest.mark.parametrize("name", CASES)
def test_rejected_input_raises_an_error_naming_the_op(name):
    (op_type, inputs, outputs, attrs), words = CASES[name]
    case = {"op": op_type, "inputs": inputs, "outputs": outputs, "attrs": attrs}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(case)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"the process died ({done.returncode}): {done.stderr[-2000:]}"
    assert done.stdout.startswith("RAISED"), done.stdout + done.stderr[-2000:]
    message = done.stdout
    assert op_type in message
    if words:
        assert f"[{op_type}]" in message
    for word in words:
        assert word in message, message
