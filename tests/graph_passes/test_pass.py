"""The fusion as an onnx_ir pass: chains in a PassManager, reports honestly whether it changed the
model, and keeps each run's notes to itself."""

from pathlib import Path

import onnx_ir as ir
import pytest

from ascend_grad.graph_passes import _context
from ascend_grad.graph_passes._fuse import FusionPass

GRAPHS = Path(__file__).resolve().parents[2] / "models" / "graphs"


def test_the_pass_chains_and_says_whether_it_changed_the_model():
    model = ir.load(GRAPHS / "resblock.aot.opt.onnx")
    manager = ir.passes.PassManager([FusionPass(), FusionPass()])  # the second finds nothing left
    first = FusionPass()(model)
    assert first.modified and first.report.counts["GroupNormSwishGrad"] >= 1
    again = FusionPass()(model)
    assert not again.modified and sum(again.report.counts.values()) == 0 and not again.report.fused
    assert again.report.nodes_after == again.report.nodes_before
    fresh = ir.load(GRAPHS / "resblock.aot.opt.onnx")
    assert manager(fresh).modified


def test_each_run_has_its_own_notes():
    model = ir.load(GRAPHS / "silu_mlp.aot.opt.onnx")
    fusion = FusionPass()
    first = fusion(model).report
    second = fusion(ir.load(GRAPHS / "silu_mlp.aot.opt.onnx")).report
    assert first.fused and second.fused and first.fused is not second.fused
    assert first.fused == second.fused  # the same graph: the same notes, not twice as many
    with pytest.raises(RuntimeError, match="FusionPass"):
        _context.current()  # nothing left running after a run
