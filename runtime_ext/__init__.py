"""The fused C++ kernels for onnxruntime: the library's path and session options that load it.

    import onnxruntime as ort
    from ascend_grad import runtime_ext
    session = ort.InferenceSession("fused.onnx", runtime_ext.session_options())

With the library registered, onnxruntime runs these kernels for the ascend.grad nodes (and ignores
the model's function bodies); without it, it inlines the bodies. One binary serves onnxruntime 1.19
to the newest release and picks AVX-512, AVX2 or portable code for the CPU it runs on
(ASCEND_GRAD_ISA=avx512|avx2|generic forces one; ASCEND_GRAD_VERBOSE=1 says which).
"""

from __future__ import annotations

from pathlib import Path

LIBRARY_NAME = "libascend_grad_kernels.so"


def library_path() -> str:
    """Absolute path of the fused-kernel library (.so)."""
    path = Path(__file__).resolve().with_name(LIBRARY_NAME)
    if not path.is_file():
        raise FileNotFoundError(
            f"the ascend-grad kernel library is not at {path}: install the package with pip (it builds the library)"
        )
    return str(path)


def session_options(options=None):
    """`options` (or new onnxruntime.SessionOptions) with the kernel library registered."""
    import onnxruntime as ort

    options = ort.SessionOptions() if options is None else options
    options.register_custom_ops_library(library_path())
    return options
