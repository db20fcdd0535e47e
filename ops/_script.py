"""The onnxscript side shared by the op modules: the opset object, flat bodies, opset stamping.

The bodies are written against ai.onnx opset 18 but use only ops whose meaning has not changed
from opset 15 (CastLike and Shape's start/end arrive there) up to onnx's newest, so a body can be
stamped with the ai.onnx version of the model it is attached to: onnx.checker and onnxruntime
require a model-local function to import the model's version of each domain.
"""

import onnx
import onnx.inliner
from onnxscript.values import OnnxFunction, Opset

from ascend_grad import DOMAIN, OPSET_VERSION

ascend = Opset(DOMAIN, OPSET_VERSION)

MIN_ONNX_OPSET = 15


def flat_function_proto(function: OnnxFunction, *helpers: OnnxFunction) -> onnx.FunctionProto:
    """`function` as one FunctionProto with its calls to `helpers` inlined: onnx's ReferenceEvaluator
    (and other runtimes) cannot run a function that calls another."""
    proto = function.to_function_proto()
    if not helpers:
        return proto
    wrapper = onnx.helper.make_model(
        onnx.helper.make_graph([], "wrapper", [], []),
        opset_imports=list(proto.opset_import),
        functions=[proto, *(h.to_function_proto() for h in helpers)],
    )
    flat = onnx.inliner.inline_selected_functions(wrapper, [(DOMAIN, h.name) for h in helpers])
    (proto,) = [f for f in flat.functions if f.name == function.name]
    if not any(n.domain == DOMAIN for n in proto.node):  # the body no longer calls into our domain
        kept = [o for o in proto.opset_import if o.domain != DOMAIN]
        del proto.opset_import[:]
        proto.opset_import.extend(kept)
    return proto


def stamp_opset(function: onnx.FunctionProto, onnx_opset: int) -> onnx.FunctionProto:
    """A copy of `function` whose body imports ai.onnx at version `onnx_opset`."""
    if onnx_opset < MIN_ONNX_OPSET:
        raise ValueError(
            f"[{function.name}] the function body needs ai.onnx opset >= {MIN_ONNX_OPSET}, "
            f"the model imports {onnx_opset}"
        )
    stamped = onnx.FunctionProto()
    stamped.CopyFrom(function)
    for entry in stamped.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = onnx_opset
    return stamped
