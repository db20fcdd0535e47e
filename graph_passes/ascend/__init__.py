"""The Ascend export: a fused graph made right for onnxruntime's CANN execution provider.

    model, plan = export_for_ascend(model)     # after graph_passes.fuse_backward_ops
    plan["placement"]                          # [{"node", "op_type", "device": "npu" | "host", "reason"}]

One module per concern: kernel_table (onnxruntime-cann 1.24.4's kernels, as data), placement (where
onnxruntime will run each node, and the Memcpy nodes it adds), normalize and host_float16 (what
onnxruntime does to a graph at load, done in OUT), one module per rewrite (group_norm_swish_grad,
group_norm_swish, broadcast, copies), export (the steps in order, the plan).
"""

from ascend_grad.graph_passes.ascend.export import PROVIDER_OPTIONS, SESSION_OPTIONS, export_for_ascend
from ascend_grad.graph_passes.ascend.placement import CannotExport, CannotLoad

__all__ = ["PROVIDER_OPTIONS", "SESSION_OPTIONS", "CannotExport", "CannotLoad", "export_for_ascend"]
