"""The training-step benchmark's correctness check: the fused graph run with the kernels gives every
output of the original graph (timings are never asserted)."""

import onnx

from ascend_grad.bench import training_step
from ascend_grad.models import graph_path


def test_fused_kernels_match_the_original_graph():
    outputs = onnx.load(graph_path(training_step.GRAPH)).graph.output
    assert training_step.check_outputs(threads=1) == len(outputs)
