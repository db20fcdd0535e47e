"""ascend-grad: SiLU, Mish and GroupNorm+SiLU backward passes as single ONNX nodes.

The op set lives in the ONNX domain ``ascend.grad`` (see ``ascend_grad.ops``); its semantics are
those of Huawei CANN's aclnn operators of the same names.
"""

from importlib import metadata as _metadata
from importlib import util as _util

# The distributed wheels require no onnxruntime (build_support/wheels), so that the flavour a user
# already has (onnxruntime-cann, -training, -gpu) is never replaced: say here what to install when
# there is none, before anything fails deeper down.
if _util.find_spec("onnxruntime") is None:
    raise ImportError(
        "ascend-grad needs onnxruntime, and none is installed: install the flavour you run (onnxruntime, "
        "onnxruntime-gpu, onnxruntime-cann, onnxruntime-training, ...), or pip install 'ascend-grad[cpu]' for "
        "the CPU onnxruntime",
        name="onnxruntime",
    )

# The op set's identity: the C++ kernel library carries the same two values (a test checks it).
DOMAIN = "ascend.grad"
OPSET_VERSION = 1

try:
    __version__ = _metadata.version("ascend-grad")
except _metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["DOMAIN", "OPSET_VERSION", "__version__"]
