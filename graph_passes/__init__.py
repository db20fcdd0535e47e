"""The graph pass: find every decomposed SiLU, Mish and GroupNorm+swish backward in a training graph
and replace each by one ascend.grad node.

    model, report = fuse_backward_ops(model)        # onnx.ModelProto | onnx_ir.Model | path
    report.counts                                    # {"SiluBackward": n, "MishBackward": n, "GroupNormSwishGrad": n}

One module per op (silu_backward, mish_backward, group_norm_swish_grad), each a set of onnxscript
rewrite rules; a rewrite happens only when the subgraph is provably the op's math, anything else
stays and the report says why. Afterwards the nodes nothing reads any more are removed, the graph is
sorted, and the ops' function bodies are attached, so any ONNX runtime can run the result.
"""

from ascend_grad.graph_passes._fuse import FusionReport, fuse_backward_ops
from ascend_grad.graph_passes.training_artifacts import ArtifactsReport, NotArtifacts, fuse_training_artifacts

__all__ = ["ArtifactsReport", "FusionReport", "NotArtifacts", "fuse_backward_ops", "fuse_training_artifacts"]
