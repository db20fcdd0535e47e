"""The graph pass: find every decomposed SiLU, Mish and GroupNorm+swish backward in a training graph,
and every GroupNorm followed or not by a swish in any graph, and replace each by one ascend.grad node.

    model, report = fuse_backward_ops(model)        # onnx.ModelProto | onnx_ir.Model | path
    report.counts                                    # {"SiluBackward": n, "MishBackward": n, "GroupNormSwishGrad": n, "GroupNormSwish": n}
    onnx_ir.passes.PassManager([FusionPass(), ...])  # the same as an onnx_ir pass (no function bodies attached)
    fuse_training_artifacts(in_dir, out_dir)         # a folder of onnxruntime-training artifacts

One module per op (silu_backward, mish_backward, group_norm_swish_grad, group_norm_swish), each a
set of onnxscript rewrite rules; a rewrite happens only when the subgraph is provably the op's math,
anything else stays and the report says why. Afterwards the nodes nothing reads any more are
removed, the graph is sorted, and the ops' function bodies are attached, so any ONNX runtime can run
the result.
"""

from ascend_grad.graph_passes._fuse import FusionPass, FusionReport, FusionResult, fuse_backward_ops
from ascend_grad.graph_passes.training_artifacts import ArtifactsReport, NotArtifacts, fuse_training_artifacts

__all__ = ["ArtifactsReport", "FusionPass", "FusionReport", "FusionResult", "NotArtifacts", "fuse_backward_ops",
           "fuse_training_artifacts"]
