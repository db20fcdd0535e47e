"""No padded AveragePool on the NPU: onnxruntime-cann 1.24.4 hands it to CANN's AvgPoolV2 wrongly.

Its AveragePool kernel (cann/nn/average_pool.cc) sets AvgPoolV2's `exclusive` to the node's
count_include_pad, where CANN's exclusive means the opposite (leave the padding out of the count:
torch_npu and Paddle pass `!count_include_pad`), and passes ONNX's pads (begins, then ends) where
AvgPoolV2 reads (top, bottom, left, right). Every window that touches padding is divided by the
wrong count, and asymmetric pads are swapped. Without padding it is right.

Rewrite, for every padded 2-D AveragePool the CANN EP takes: the window sums as a depthwise Conv
with a kernel of ones (group = C, the pool's strides and pads), divided by a constant holding each
output position's count as the node defines it (count_include_pad). Both run on the NPU. The same sums and the same divisions as the CPU's
AveragePool; only the order of the additions may differ (the usual float rounding).
Not done without static C, H, W (the counts are a constant; N may be symbolic) or with ceil_mode (the output size
onnxruntime computes for it changed between versions): the export refuses such a node.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ascend_grad.graph_passes.ascend._ir import Log, Names, constant, ints, make_node, resolved_pads
from ascend_grad.graph_passes.ascend.placement import NPU, CannotExport, place_node

WHY = ("onnxruntime-cann 1.24.4 passes count_include_pad as AvgPoolV2's `exclusive` (inverted) and ONNX's pad "
       "order where CANN reads (top, bottom, left, right): every window touching padding is divided wrongly")


def _counts(size: int, kernel: int, stride: int, begin: int, end: int, out: int, include_pad: bool) -> np.ndarray:
    """For each output position along one axis: the window's taps inside x, or inside the padded x."""
    low, high = (-begin, size + end) if include_pad else (0, size)
    taps = np.arange(out)[:, None] * stride - begin + np.arange(kernel)[None, :]
    return ((taps >= low) & (taps < high)).sum(axis=1)


def rewrite(model: ir.Model, names: Names, log: Log) -> None:
    graph = model.graph
    opset = model.opset_imports.get("", 1)
    for node in list(graph):
        if node.domain not in ("", "ai.onnx") or node.op_type != "AveragePool":
            continue
        if place_node(node, opset).device != NPU:
            continue
        x, y = node.inputs[0], node.outputs[0]
        shape = tuple(x.shape) if x.shape is not None else None  # N may be symbolic; C, H, W must not
        kernel = ints(node, "kernel_shape", [])
        if shape is not None and len(kernel) != len(shape) - 2:
            continue  # a malformed node: onnxruntime refuses it at load either way
        spatial = len(kernel)
        strides = ints(node, "strides", [1] * spatial)  # (no dilations: CANN's kernels stop at AveragePool-11)
        auto = node.attributes.get_string("auto_pad", "NOTSET")
        pads_attr = ints(node, "pads", [0] * (2 * spatial))
        if auto in ("NOTSET", "VALID") and not any(pads_attr):
            continue  # no padding: CANN computes it right
        why_not = ("a 4-D input with static C, H and W"
                   if shape is None or spatial != 2 or not all(isinstance(d, int) for d in shape[1:]) else
                   "ceil_mode 0 (the output size onnxruntime computes for ceil_mode differs between versions)"
                   if node.attributes.get_int("ceil_mode", 0) else None)
        if why_not:
            raise CannotExport(f"AveragePool node {node.name!r}: padded, so onnxruntime-cann 1.24.4 would compute it wrongly "
                               f"on the NPU ({WHY}), and its respelling needs {why_not}")
        C, size = shape[1], list(shape[2:])
        pads = resolved_pads(node, size, kernel)
        out = [(n + b + e - k) // s + 1 for n, b, e, k, s in zip(size, pads[:2], pads[2:], kernel, strides)]
        if min(out) <= 0 or shape[0] == 0 or C == 0:  # (a symbolic N is never 0 here: == compares it as a symbol)
            continue  # an empty output: onnxruntime-cann returns before calling CANN
        out_shape = (shape[0], C, *out)
        include = bool(node.attributes.get_int("count_include_pad", 0))
        dtype = x.dtype.numpy()
        counts = np.outer(*(_counts(n, k, s, b, e, o, include)
                            for n, k, s, b, e, o in zip(size, kernel, strides, pads[:2], pads[2:], out)))
        ones = constant(graph, names, np.ones((C, 1, *kernel), dtype), base=f"{node.name}/ones")
        count = constant(graph, names, counts.reshape(1, 1, *out).astype(dtype), base=f"{node.name}/counts")
        conv = make_node(names, "Conv", [x, ones], {"group": C, "kernel_shape": kernel, "strides": strides,
                                                    "pads": pads}, base=f"{node.name}/sums")
        conv.outputs[0].dtype, conv.outputs[0].shape = y.dtype, ir.Shape(out_shape)
        div = ir.node("Div", [conv.outputs[0], count], name=names(f"{node.name}/mean"))
        div.outputs[0].dtype, div.outputs[0].shape = y.dtype, ir.Shape(out_shape)
        graph.insert_before(node, [conv, div])
        y.replace_all_uses_with(div.outputs[0], replace_graph_outputs=True)
        old = y.name
        node.replace_input_with(0, None)
        graph.remove(node)
        div.outputs[0].name = old
        log.add(node.name, f"AveragePool -> Conv(x, ones, group={C}) / counts (pads {pads}, "
                f"count_include_pad={int(include)})", WHY)
