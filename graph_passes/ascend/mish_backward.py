"""MishBackward nodes with two dtypes: both inputs cast to float.

The library's CANN kernels (one aclnnMishBackward call) are registered for same-dtype pairs only.
A mixed pair computes in the promoted dtype, which is float for every mixed pair (SPEC.md), so
casting the other input to float is exact (widening) and the output is the same float tensor.
"""

from __future__ import annotations

import onnx_ir as ir

from ascend_grad import DOMAIN

from ascend_grad.graph_passes.ascend._ir import Log, Names
from ascend_grad.graph_passes.ascend.group_norm_swish_grad import widen_to_float
from ascend_grad.ops import mish_backward as op

OP_TYPE = op.OP_TYPE


def rewrite(model: ir.Model, names: Names, log: Log) -> None:
    for node in [n for n in model.graph if n.domain == DOMAIN and n.op_type == OP_TYPE]:
        dtypes = {v.dtype for v in node.inputs[:2] if v is not None}
        if len(dtypes) < 2:
            continue
        listed = ", ".join(f"{v.name} {v.dtype.name.lower()}" for v in node.inputs[:2])
        widen_to_float(model.graph, node, names, inputs=(0, 1), outputs=())
        log.add(node.name, "both inputs cast to float",
                f"the CANN kernels take one dtype ({listed}); the promoted dtype of a mixed pair is float, "
                "so widening gives the same numbers")
