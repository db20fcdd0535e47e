"""Fixtures every test folder shares: fresh random inputs with a seed that failures print, and the
simulated CANN runtime with the onnxruntime-cann venv that runs against it."""

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    """A generator seeded fresh for each test; ASCEND_GRAD_SEED=<n> replays a failure."""
    seed = int(os.environ.get("ASCEND_GRAD_SEED") or np.random.SeedSequence().entropy % 2**32)
    print(f"{request.node.nodeid}: ASCEND_GRAD_SEED={seed}")
    return np.random.default_rng(seed)


def _cann_harness():
    path = Path(__file__).parent / "runtime_ext" / "cann_sim" / "harness.py"
    spec = importlib.util.spec_from_file_location("cann_sim_harness", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def cann():
    """The simulated CANN runtime (built when its sources changed) and the onnxruntime-cann 1.24.4
    venv: `.root`, `.python`, `.run(script, *args, env=None, preload=False, timeout=...)` ->
    (completed process, simulator report), `.run_models(...)`, `.assert_clean(report)`.
    Skipped only where that wheel does not exist (not x86_64/aarch64 Linux, not Python 3.11)."""
    harness = _cann_harness()
    reason = harness.unsupported_reason()
    if reason:
        pytest.skip(reason)
    return harness.make()
