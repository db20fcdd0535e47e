"""GroupNormSwish nodes made right for aclnnGroupNormSwish.

- x of one dtype T and gamma/beta (and the mean/rstd it writes) of another U: the library's CANN
  kernels take U == T or U == float. Otherwise gamma and beta are cast to float (exact) and mean and
  rstd, computed in float, are cast back to U: one rounding to U, as the CPU kernel does.
- data_format "NHWC": x is transposed to channels-first and y back (mean and rstd are (N, G)
  either way); transposes move values exactly.
"""

from __future__ import annotations

import onnx_ir as ir

from ascend_grad import DOMAIN

from ascend_grad.graph_passes.ascend._ir import FLOAT, Log, Names
from ascend_grad.graph_passes.ascend.group_norm_swish_grad import current, to_nchw, widen_to_float
from ascend_grad.ops import group_norm_swish as op

OP_TYPE = op.OP_TYPE


def rewrite(model: ir.Model, names: Names, log: Log) -> None:
    graph = model.graph
    for node in [n for n in graph if n.domain == DOMAIN and n.op_type == OP_TYPE]:
        if node.attributes.get_string("data_format", "NCHW") == "NHWC":
            if to_nchw(graph, node, names, data_in=(0,), data_out=(0,)):
                node = current(node)
                log.add(node.name, "NHWC -> Transpose(x) to NCHW, the node NCHW, Transpose(y) back",
                        "aclnnGroupNormSwish takes channels-first tensors only; transposes move values exactly")
        t, u = node.inputs[0].dtype, node.inputs[1].dtype
        if u in (t, FLOAT) or u is None:
            continue
        widen_to_float(graph, node, names, inputs=(1, 2), outputs=(1, 2))
        log.add(node.name, "gamma and beta cast to float, mean and rstd cast back",
                f"the CANN kernels take U == T or U == float (here T {t.name.lower()}, U {u.name.lower()}); "
                "widening is exact and mean/rstd are rounded once to U")
