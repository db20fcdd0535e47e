"""The real-model benchmark runs end to end on the smallest model: its export row says every
activation became our op and gives the error against float64 autograd (timings are never asserted)."""

import pytest

pytest.importorskip("torch")

from ascend_grad.bench import models  # noqa: E402


def test_export_row_of_the_classifier():
    import torch

    from ascend_grad.models.modules import REAL_MODELS

    factory, make_inputs = REAL_MODELS["classifier"]
    torch.manual_seed(0)
    module, inputs = factory(), make_inputs(2)
    row, fused, plain = models.export_row("classifier", module, inputs)
    assert row[0] == "classifier" and row[4] == "SiluBackward 8" and row[5] == "SiLU 8"
    assert float(row[6]) <= 1e-5  # max relative error against float64 autograd
    assert sum(n.domain == "ascend.grad" for n in fused.graph.node) == 8
    assert not any(n.domain == "ascend.grad" for n in plain.graph.node)
    note = models.breakdown("classifier", fused, plain, inputs, threads=1)
    assert note.startswith("- `classifier` (1 thread): plain:") and "of the fused step" in note
