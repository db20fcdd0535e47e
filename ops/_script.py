"""The onnxscript side shared by the op modules: the opset object and body versioning.

The bodies are written against ai.onnx opset 18 but use only ops whose meaning has not changed
from opset 15 (CastLike and Shape's start/end arrive there) up to onnx's newest, so a body can be
stamped with the ai.onnx version of the model it is attached to: onnx.checker and onnxruntime
require a model-local function to import the model's version of each domain.
"""

import onnx
from onnxscript.values import Opset

from ascend_grad import DOMAIN, OPSET_VERSION

ascend = Opset(DOMAIN, OPSET_VERSION)

MIN_ONNX_OPSET = 15


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
