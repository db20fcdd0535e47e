"""One binary for every onnxruntime from 1.19 on: the same library, loaded by onnxruntime-training
1.19.2 (the last training build), 1.24.4 (the version of onnxruntime-cann) and the newest (this
environment), each in its own virtual environment, gives bit-identical results.

Every op and dtype combination runs inside a float32 model (Cast in, Cast out), so old runtimes whose
Python API has no bfloat16 still exercise the bfloat16 kernels.
"""

import itertools
import os
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

from ascend_grad import ops, runtime_ext
from ascend_grad.testing import (
    FLOAT_DTYPES,
    TOLERANCE,
    assert_close,
    cast_wrapped,
    group_norm_feeds,
    random_array,
    run_onnxruntime,
)
from ascend_grad.venvs import venv_python

REPO = Path(__file__).resolve().parents[2]
VENVS = REPO / "build" / "venvs"
# (onnxruntime-training with models.ort_training's pins: one venv for every test that needs it)
RUNTIMES = {"onnxruntime-training-cpu==1.19.2": ("onnx==1.16.2", "numpy"), "onnxruntime==1.24.4": ("numpy",)}
DTYPES = list(FLOAT_DTYPES.values())

# Runs in the other environment: the library on every model, outputs saved next to the inputs.
CHILD = r"""
import sys, glob, os
import numpy as np, onnxruntime as ort
library, folder = sys.argv[1], sys.argv[2]
print("onnxruntime", ort.__version__)
for path in sorted(glob.glob(os.path.join(folder, "*.onnx"))):
    feeds = dict(np.load(path[:-5] + ".inputs.npz"))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.register_custom_ops_library(library)
    try:
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        outputs = session.run(None, feeds)
        np.savez(path[:-5] + ".outputs.npz", **{o.name: v for o, v in zip(session.get_outputs(), outputs)})
    except Exception as error:
        open(path[:-5] + ".error.txt", "w").write(str(error))
"""


def _cases(rng):
    """(name, model, feeds, {output: (reference, dtype)}) for every op and dtype combination."""
    for T in DTYPES:
        go, x = random_array(rng, (3, 517), T), random_array(rng, (3, 517), T, scale=4.0)
        model, feeds = cast_wrapped("SiluBackward", {"gradOutput": go, "self": x}, ["gradInput"])
        yield f"silu-{T.name}", model, feeds, {"out_gradInput": (ops.reference.silu_backward(go, x), T)}
    for a, b in itertools.product(DTYPES, repeat=2):
        go, x = random_array(rng, (3, 1, 257), a), random_array(rng, (4, 257), b, scale=4.0)
        model, feeds = cast_wrapped("MishBackward", {"gradOutput": go, "self": x}, ["gradInput"])
        out_type = a if a == b else np.dtype(np.float32)
        yield f"mish-{a.name}-{b.name}", model, feeds, {"out_gradInput": (ops.reference.mish_backward(go, x), out_type)}
    for (T, U), data_format in itertools.product(itertools.product(DTYPES, repeat=2), ["NCHW", "NHWC"]):
        shape = (2, 32, 6, 7) if data_format == "NCHW" else (2, 6, 7, 32)
        inputs = group_norm_feeds(rng, shape, 8, T, U, data_format)
        model, feeds = cast_wrapped("GroupNormSwishGrad", inputs, ["dx", "dgamma", "dbeta"], num_groups=8, data_format=data_format)
        ref = ops.reference.group_norm_swish_grad(*inputs.values(), 8, data_format=data_format)
        yield f"gn-grad-{T.name}-{U.name}-{data_format}", model, feeds, {"out_dx": (ref[0], T), "out_dgamma": (ref[1], U), "out_dbeta": (ref[2], U)}
        inputs = {k: inputs[k] for k in ("x", "gamma", "beta")}
        model, feeds = cast_wrapped("GroupNormSwish", inputs, ["y", "mean", "rstd"], num_groups=8, data_format=data_format)
        ref = ops.reference.group_norm_swish(*inputs.values(), 8, data_format=data_format)
        yield f"gn-{T.name}-{U.name}-{data_format}", model, feeds, {"out_y": (ref[0], T), "out_mean": (ref[1], U), "out_rstd": (ref[2], U)}


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ort-versions")
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    built = []
    for name, model, feeds, expected in _cases(rng):
        onnx.save(model, folder / f"{name}.onnx")
        np.savez(folder / f"{name}.inputs.npz", **feeds)
        built.append((name, model, feeds, expected))
    # a rejected input, to see the error status cross the older C API too
    x = np.zeros((2, 63, 4), np.float32)
    bad = {"dy": x, "mean": np.zeros((2, 32), np.float32), "rstd": np.zeros((2, 32), np.float32), "x": x,
           "gamma": np.zeros(63, np.float32), "beta": np.zeros(63, np.float32)}
    model, feeds = cast_wrapped("GroupNormSwishGrad", bad, ["dx"], num_groups=32)
    onnx.save(model, folder / "zz-rejected.onnx")
    np.savez(folder / "zz-rejected.inputs.npz", **feeds)
    return folder, built


@pytest.mark.parametrize("spec", RUNTIMES)
def test_the_same_binary_in_another_onnxruntime(cases, spec, tmp_path):
    folder, built = cases
    run_folder = tmp_path / "run"
    run_folder.mkdir()
    for path in folder.iterdir():
        (run_folder / path.name).write_bytes(path.read_bytes())
    python = venv_python(spec, *RUNTIMES[spec], root=VENVS)
    done = subprocess.run([python, "-c", CHILD, runtime_ext.library_path(), str(run_folder)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"onnxruntime {spec.split('==')[1]}" in done.stdout

    rejected = (run_folder / "zz-rejected.error.txt").read_text()
    assert "[GroupNormSwishGrad] C (63) must be divisible by num_groups (32)" in rejected
    for name, model, feeds, expected in built:
        error = run_folder / f"{name}.error.txt"
        assert not error.exists(), f"{name}: {error.read_text() if error.exists() else ''}"
        theirs = dict(np.load(run_folder / f"{name}.outputs.npz"))
        ours = run_onnxruntime(model, feeds, runtime_ext.session_options())  # the newest onnxruntime
        for output, (reference, dtype) in expected.items():
            assert theirs[output].tobytes() == ours[output].tobytes(), f"{name}/{output} differs from onnxruntime latest"
            assert_close(theirs[output], reference, f"{name}/{output}", tolerance=TOLERANCE[np.dtype(dtype)])
