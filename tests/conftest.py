"""Fixtures every test folder shares: fresh random inputs with a seed that failures print."""

import os

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    """A generator seeded fresh for each test; ASCEND_GRAD_SEED=<n> replays a failure."""
    seed = int(os.environ.get("ASCEND_GRAD_SEED") or np.random.SeedSequence().entropy % 2**32)
    print(f"{request.node.nodeid}: ASCEND_GRAD_SEED={seed}")
    return np.random.default_rng(seed)
