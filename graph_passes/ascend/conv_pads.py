"""No Conv on the NPU whose padding CANN would read in the wrong order.

onnxruntime-cann 1.24.4's Conv kernel (cann/nn/conv.cc) hands ONNX's pads (H begin, W begin, H end,
W end) to CANN's Conv2D, which reads them as (top, bottom, left, right). They agree only when the
second and third entries are equal (every [p, p, p, p]); otherwise Conv2D pads the wrong sides
and, when the totals per axis differ, computes another output shape.

Rewrite, for every such 2-D Conv the CANN EP takes: the padding made explicit, Pad(x, zeros) ahead
of a Conv with pads 0. Zero padding is what Conv adds anyway: the same products and sums. Pad has
no CANN kernel, so the padded input crosses to the host and back (counted in the plan's copies);
right numbers first. auto_pad SAME_* is resolved as onnxruntime resolves it (static shapes
needed, else the export refuses the node).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ascend_grad.graph_passes.ascend._ir import Log, Names, constant, ints, make_node, resolved_pads, static_shape
from ascend_grad.graph_passes.ascend.placement import NPU, CannotExport, place_node

WHY = ("onnxruntime-cann 1.24.4 passes ONNX's pads (begins, then ends) to CANN's Conv2D, which reads "
       "(top, bottom, left, right): pads {pads} would pad the wrong sides on the NPU")


def rewrite(model: ir.Model, names: Names, log: Log) -> None:
    graph = model.graph
    opset = model.opset_imports.get("", 1)
    for node in list(graph):
        if node.domain not in ("", "ai.onnx") or node.op_type != "Conv" or place_node(node, opset).device != NPU:
            continue
        x, w = node.inputs[0], node.inputs[1]
        shape = static_shape(x)
        kernel = ints(node, "kernel_shape", []) or (list(w.shape[2:]) if static_shape(w) is not None else [])
        if len(kernel) != 2:
            continue  # Conv3D / 1-D: not what this rewrite knows about
        spatial = list(x.shape[2:]) if x.shape is not None and len(x.shape) == 4 else None
        size = spatial if spatial is not None and all(isinstance(d, int) for d in spatial) else None  # N may be symbolic
        pads = resolved_pads(node, size, kernel)
        if pads is None:
            raise CannotExport(f"Conv node {node.name!r}: auto_pad {node.attributes.get_string('auto_pad')} needs the "
                               "input's spatial size to know whether CANN would pad it right, and it is not static")
        if pads[1] == pads[2]:
            continue  # (t, l, l, r) reads the same either way
        widths = [0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]]
        if opset >= 11:  # pads became an input
            pad = make_node(names, "Pad", [x, constant(graph, names, np.array(widths, np.int64), base=f"{node.name}/pads")],
                            {"mode": "constant"}, base=f"{node.name}/pad")
        else:
            pad = make_node(names, "Pad", [x], {"mode": "constant", "pads": widths}, base=f"{node.name}/pad")
        pad.outputs[0].dtype = x.dtype
        if shape is not None:
            pad.outputs[0].shape = ir.Shape([shape[0], shape[1], shape[2] + pads[0] + pads[2], shape[3] + pads[1] + pads[3]])
        graph.insert_before(node, pad)
        node.replace_input_with(0, pad.outputs[0])
        node.attributes.pop("auto_pad", None)
        node.attributes["pads"] = ir.AttrInt64s("pads", [0, 0, 0, 0])
        node.attributes["kernel_shape"] = ir.AttrInt64s("kernel_shape", kernel)
        log.add(node.name, f"padding {pads} made explicit: Pad(x) then Conv with pads 0 (the Pad on the host)",
                WHY.format(pads=pads))
