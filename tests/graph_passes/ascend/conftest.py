"""Fixtures of the Ascend export's tests: exporting a model and running it on the simulated CANN
runtime as its plan says, next to the original graph on the CPU."""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from ascend_grad import runtime_ext
from ascend_grad.testing import TOLERANCE

CHILD = Path(__file__).with_name("run_plan.py")


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return float("inf")
    scale = np.max(np.abs(want)) if want.size else 0.0
    return float(np.max(np.abs(got - want)) / scale) if scale else float(np.max(np.abs(got - want), initial=0.0))


def bound(dtype) -> float:
    return TOLERANCE.get(np.dtype(dtype), 1e-5)


@pytest.fixture(scope="session")
def assert_outputs_close():
    """assert_outputs_close(got, want, what, computes_in=None): every output within SPEC's bound
    for its dtype (float32 1e-5, float16 1e-3, bfloat16 8e-3: max |got - want| / max |want|), or
    twice the bound of `computes_in` (a half dtype the graph computes in) for every output."""

    def check(got: dict, want: dict, what: str = "", computes_in=None):
        errors = {k: relative_error(got[k], want[k]) for k in want}
        worst = max(errors, key=errors.get)
        print(f"{what}: {len(errors)} outputs, largest relative error {errors[worst]:.2e} ({worst})")
        # a graph that computes in a half type rounds to it at other places on the NPU (each op
        # rounds) than on the CPU (onnxruntime computes chains of host ops in float): each run is
        # within the half type's bound of the exact values, so the two are within twice that
        limits = {k: 2 * bound(computes_in) if computes_in is not None else bound(want[k].dtype) for k in want}
        bad = {k: e for k, e in errors.items() if not e <= limits[k]}
        assert not bad, f"{what}: outputs over SPEC's bound: {bad}"

    return check


@pytest.fixture(scope="session")
def run_plans(cann, tmp_path_factory):
    """run_plans([(name, model, plan, original, feeds)]) -> {name: result}: each exported model run
    on the CANN EP with its plan's options (result["placement"], ["optimized"]: the graph
    onnxruntime ran, ["cann"] / ["cpu"]: outputs by name), the original on the CPU EP."""

    def run(cases, library_for_original=False):
        out = tmp_path_factory.mktemp("ascend-run")
        specs = []
        for name, model, plan, original, feeds in cases:
            onnx.save(model, out / f"{name}.onnx")
            np.savez(out / f"{name}.feeds.npz", **feeds)
            spec = {"name": name, "path": str(out / f"{name}.onnx"), "feeds": str(out / f"{name}.feeds.npz"),
                    "library": runtime_ext.library_path(), "provider_options": plan["provider_options"],
                    "session_options": plan["session_options"], "original": None,
                    "original_needs_library": library_for_original}
            if original is not None:
                onnx.save(original, out / f"{name}.original.onnx")
                spec["original"] = str(out / f"{name}.original.onnx")
            specs.append(spec)
        (out / "spec.json").write_text(json.dumps(specs))
        proc, report = cann.run(CHILD.read_text(), out / "spec.json", out, preload=True)
        assert proc.returncode == 0, proc.stderr[-4000:]
        results = {}
        for r in json.loads((out / "results.json").read_text()):
            for side in ("cann", "cpu"):
                path = out / f"{r['name']}.{side}.npz"
                if path.exists():
                    with np.load(path) as z:
                        r[side] = {k: z[k] for k in z.files}
            optimized = out / f"{r['name']}.optimized.onnx"
            r["optimized"] = onnx.load(optimized) if optimized.exists() else None
            r["report"] = report
            results[r["name"]] = r
        return results

    return run
