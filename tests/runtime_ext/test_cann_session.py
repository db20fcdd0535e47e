"""runtime_ext.cann_session: the user's way onto the NPU, run where it is meant to run - ascend-grad
installed beside onnxruntime-cann 1.24.4, CANN (simulated) found through set_env.sh's variables."""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from ascend_grad import ops, runtime_ext
from ascend_grad.testing import TOLERANCE, assert_close, away_from, cast_wrapped, random_array

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def beside_cann(cann, installed_beside):
    """The simulated runtime, with a python whose environment holds onnxruntime-cann and this
    repository installed beside it (as a user on an Atlas machine would: pip install)."""
    return type(cann)(cann.root, installed_beside("onnxruntime-cann==1.24.4"))


SESSION = r"""
import json, sys
import numpy as np
from ascend_grad import runtime_ext
model, options = sys.argv[1], json.loads(sys.argv[2])
try:
    source = model if model.endswith(".onnx") else open(model, "rb").read()
    session = runtime_ext.cann_session(source, provider_options=options or None)
    feeds = dict(np.load(sys.argv[3]))
    out = session.run(None, feeds)
    print(json.dumps({"providers": session.get_providers(), "level": str(session._sess_options.graph_optimization_level), "options": session.get_provider_options().get("CANNExecutionProvider", {}),
                      "out": [o.tolist() for o in out]}))
except Exception as error:
    print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
"""


def _model(tmp_path, rng):
    go, x = random_array(rng, (3, 7), np.float32), random_array(rng, (3, 7), np.float32)
    model, feeds = cast_wrapped("SiluBackward", {"gradOutput": go, "self": x}, ["gradInput"])
    onnx.save(model, tmp_path / "silu.onnx")
    np.savez(tmp_path / "feeds.npz", **feeds)
    (tmp_path / "silu.bytes").write_bytes(model.SerializeToString())
    return model, feeds


def _run(python, tmp_path, name, options=None, **kwargs):
    done, report = python.run(SESSION, tmp_path / name, json.dumps(options or {}), tmp_path / "feeds.npz", **kwargs)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), report


def test_on_the_npu_with_the_plan_options(beside_cann, tmp_path, rng):
    model, feeds = _model(tmp_path, rng)
    expected = runtime_ext.session_options()  # (the CPU kernels' answer, in this environment)
    import onnxruntime as ort

    cpu = ort.InferenceSession(model.SerializeToString(), expected, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    # a path: the options of OUT.ascend.json are taken, the caller's override them
    (tmp_path / "silu.onnx.ascend.json").write_text(json.dumps({
        "provider_options": {"enable_cann_graph": "0", "arena_extend_strategy": "kSameAsRequested"},
        "session_options": {"graph_optimization_level": "ORT_DISABLE_ALL"}}))
    result, report = _run(beside_cann, tmp_path, "silu.onnx", {"device_id": 0})
    assert "error" not in result, result
    assert result["providers"][0] == "CANNExecutionProvider", result
    assert result["options"]["enable_cann_graph"] == "0" and result["options"]["arena_extend_strategy"] == "kSameAsRequested"
    assert result["options"]["device_id"] == "0"
    assert result["level"].endswith("ORT_DISABLE_ALL")
    np.testing.assert_allclose(np.array(result["out"][0]), cpu, rtol=1e-5, atol=1e-6)
    assert report["aclnn_calls"]["aclnnSiluBackward"] == 1
    beside_cann.assert_clean(report)
    # serialized bytes, no plan: single-operator mode all the same
    result, _ = _run(beside_cann, tmp_path, "silu.bytes")
    assert result["options"]["enable_cann_graph"] == "0" and "out" in result
    assert result["level"].endswith("ORT_ENABLE_ALL")


def test_mixed_dtype_mish_backward_is_one_aclnn_call(beside_cann, tmp_path, rng):
    """(float16 gradOutput, float self) -> float gradInput: one aclnnMishBackward call on the NPU,
    not the CPU kernel between two copies; float's bound against the float64 reference."""
    go = random_array(rng, (5, 1, 63), np.float16)
    x = away_from(random_array(rng, (3, 63), np.float32, scale=4.0), -1.19)
    x.flat[:3] = [90.0, -90.0, np.nan]
    model, feeds = cast_wrapped("MishBackward", {"gradOutput": go, "self": x}, ["gradInput"])
    onnx.save(model, tmp_path / "mish.onnx")
    np.savez(tmp_path / "feeds.npz", **feeds)
    result, report = _run(beside_cann, tmp_path, "mish.onnx")
    assert "error" not in result, result
    calls = {k: v for k, v in report["aclnn_calls"].items() if k.startswith("aclnnMish")}
    assert calls == {"aclnnMishBackwardGetWorkspaceSize": 1, "aclnnMishBackward": 1}, report["aclnn_calls"]
    assert_close(np.array(result["out"][0], np.float32), ops.reference.mish_backward(go, x), "mixed MishBackward",
                 tolerance=TOLERANCE[np.dtype(np.float32)])
    beside_cann.assert_clean(report)


def test_refusals(beside_cann, tmp_path, rng):
    _model(tmp_path, rng)
    result, _ = _run(beside_cann, tmp_path, "silu.onnx", {"enable_cann_graph": "1"})
    assert result["error"].startswith("ValueError: cann_session: enable_cann_graph must be '0'")
    # no CANN at all: onnxruntime would quietly fall back to the CPU; cann_session says why not
    result, _ = _run(beside_cann, tmp_path, "silu.onnx", env={"ASCEND_HOME_PATH": "", "LD_LIBRARY_PATH": ""})
    assert result["error"].startswith("RuntimeError: the CANNExecutionProvider could not start: CANN's libraries"), result


def test_without_the_cann_provider(tmp_path, rng):
    """This environment's onnxruntime has no CANN EP: a clear error, no session."""
    import onnxruntime as ort

    if "CANNExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has the CANN EP")
    model, _ = _model(tmp_path, rng)
    with pytest.raises(RuntimeError, match=r"has no CANNExecutionProvider: install onnxruntime-cann"):
        runtime_ext.cann_session(model)
