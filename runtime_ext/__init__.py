"""The fused C++ kernels for onnxruntime: the library's path and session options that load it.

    import onnxruntime as ort
    from ascend_grad import runtime_ext
    session = ort.InferenceSession("fused.onnx", runtime_ext.session_options())
    session = runtime_ext.cann_session("fused.onnx")   # on an Ascend NPU, with onnxruntime-cann

With the library registered, onnxruntime runs these kernels for the ascend.grad nodes (and ignores
the model's function bodies); without it, it inlines the bodies. One binary serves onnxruntime 1.19
to the newest release and picks AVX-512, AVX2 (x86-64), NEON (aarch64) or portable code for the CPU
it runs on (ASCEND_GRAD_ISA=avx512bf16|avx512|avx2|neon|generic forces one; ASCEND_GRAD_VERBOSE=1
says which). The same library
registers every op for onnxruntime's CANN execution provider too: one aclnn call per node, CANN found
at run time ($ASCEND_HOME_PATH/lib64, else already loaded, else /usr/local/Ascend/ascend-toolkit/latest).
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


# The CPU flags (as /proc/cpuinfo names them) each instruction-set table of the library needs: what
# runtime_ext/cpu/x86_features.cc (x86) and dispatch.cc (aarch64) check before dispatch.cc picks one,
# widest first. (The kernel saw the OS's register state: it lists no AVX flag where XCR0 leaves the
# registers unsaved.)
_AVX2 = ["avx", "avx2", "fma", "f16c"]
ISA_FEATURES = {
    "avx512bf16": [*_AVX2, "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_bf16"],
    "avx512": [*_AVX2, "avx512f", "avx512bw", "avx512dq", "avx512vl"],
    "avx2": _AVX2,
    "neon": ["fp", "asimd"],  # (aarch64's Features line: dispatch.cc asks getauxval for the same)
    "generic": [],
}


def cpu_flags() -> set[str]:
    """The CPU's feature flags as /proc/cpuinfo lists them (empty where there is none)."""
    cpuinfo = Path("/proc/cpuinfo")
    return set(cpuinfo.read_text().split()) if cpuinfo.exists() else set()


def runnable_isas() -> list[str]:
    """The instruction sets of ISA_FEATURES this CPU has (widest first; "generic" always)."""
    flags = cpu_flags()
    return [isa for isa, needs in ISA_FEATURES.items() if all(flag in flags for flag in needs)]


def session_options(options=None):
    """`options` (or new onnxruntime.SessionOptions) with the kernel library registered."""
    import onnxruntime as ort

    options = ort.SessionOptions() if options is None else options
    options.register_custom_ops_library(library_path())
    return options


CANN = "CANNExecutionProvider"
# Single-operator mode: the only one in which the CANN EP runs custom kernels (in graph mode it hands
# the whole graph, custom nodes included, to CANN's graph compiler, which does not know them).
CANN_DEFAULTS = {"enable_cann_graph": "0"}


def cann_session(model, provider_options=None, session_options=None):
    """An onnxruntime.InferenceSession on the Ascend NPU: providers [(CANN, options), CPU], the kernel
    library registered, single-operator mode.

    model: a path, serialized bytes or an onnx.ModelProto. For a path written by `ascend-grad fuse
    --target ascend`, the provider and session options of its OUT.ascend.json are used (OUT is
    written already optimized, so that what runs is what the plan placed); `provider_options`
    (e.g. {"device_id": "1"}) override them."""
    import json

    import onnxruntime as ort

    if CANN not in ort.get_available_providers():
        raise RuntimeError(
            f"this onnxruntime ({ort.__version__}) has no {CANN}: install onnxruntime-cann (1.24.x for CANN 8.x) "
            "in place of onnxruntime"
        )
    options, settings = dict(CANN_DEFAULTS), {}
    if hasattr(model, "SerializeToString"):
        model = model.SerializeToString()
    elif not isinstance(model, bytes):  # a path
        model = str(model)
        plan = Path(model + ".ascend.json")
        if plan.is_file():
            written = json.loads(plan.read_text())
            options.update(written.get("provider_options", {}))
            settings = written.get("session_options", {})
    options.update({key: str(value) for key, value in (provider_options or {}).items()})
    if options.get("enable_cann_graph") not in ("0", "False", "false"):
        raise ValueError(
            "cann_session: enable_cann_graph must be '0': in graph mode the CANN EP gives the whole graph, "
            "ascend.grad nodes included, to CANN's graph compiler, which cannot run them"
        )
    registered = globals()["session_options"](session_options)  # (the parameter shadows the function)
    if "graph_optimization_level" in settings:
        # the plan's placement is of OUT as written: onnxruntime must not re-optimize it
        level = settings["graph_optimization_level"]
        registered.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    session = ort.InferenceSession(model, registered, providers=[(CANN, options), "CPUExecutionProvider"])
    if CANN not in session.get_providers():
        # onnxruntime falls back to the CPU when the provider cannot start (no CANN libraries)
        raise RuntimeError(
            f"the {CANN} could not start: CANN's libraries (libascendcl.so, ...) were not found; "
            "run CANN's set_env.sh (e.g. source /usr/local/Ascend/ascend-toolkit/set_env.sh) first"
        )
    return session
