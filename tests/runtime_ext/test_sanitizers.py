"""The sanitizer job: the kernel library built with AddressSanitizer and UBSan (any undefined
behaviour fatal), loaded by onnxruntime in a python child with the sanitizer runtimes preloaded,
runs every op and dtype combination of the CPU kernels on random and edge-case inputs (compared
with the float64 references), the hostile shapes that must be rejected, on every instruction-set
path this CPU has, then exits so the library unloads (the registry's deletes are checked too).
Passes only with exit 0 and not one sanitizer report.

The build goes to build/asan and is reused until a source, the flags or the compiler change (stamp).
"""

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ascend_grad import runtime_ext
from ascend_grad.testing import TRIMMED_SIZES, reported_sizes

REPO = Path(__file__).resolve().parents[2]
SOURCES = REPO / "runtime_ext"
BUILD = REPO / "build" / "asan"
LIBRARY = BUILD / "libascend_grad_kernels.so"


# Only what the job runs is built (the whole library takes minutes under the sanitizers): the CPU
# kernels, with the instruction-set tables this CPU can run.
ISAS = runtime_ext.runnable_isas()
CONFIGURE = ["-DASCEND_GRAD_SANITIZE=ON", "-DASCEND_GRAD_CPU_ONLY=ON", "-DCMAKE_BUILD_TYPE=Release",
             f"-DASCEND_GRAD_ISAS={';'.join(isa for isa in ISAS if isa != 'generic')}"]
ASAN_OPTIONS = ":".join([
    "detect_leaks=0",  # python itself leaks at exit by design
    "halt_on_error=1", "abort_on_error=0", "exitcode=99",
    "new_delete_type_mismatch=1", "alloc_dealloc_mismatch=1", "detect_stack_use_after_return=0",
    "allocator_may_return_null=1",  # an oversized request is a bad_alloc (as in production), not a report
])
UBSAN_OPTIONS = "print_stacktrace=1:halt_on_error=1"
# outputs streamed from 1 MiB (TRIMMED_SIZES; the library reads it): the streamed heads and walks on
# arrays 32 times smaller than at the library's 32 MiB (at that size they were about a fifth of the
# job's time)
STREAM_BYTES = TRIMMED_SIZES["ASCEND_GRAD_STREAM_BYTES"]
REPORTS = ["ERROR: AddressSanitizer", "runtime error:", "new-delete-type-mismatch", "ERROR: LeakSanitizer", "SUMMARY: "]

# Runs under the sanitizers with one instruction set: every case, then releases everything and exits.
CHILD = r"""
import gc, importlib.util, itertools, os, sys, warnings
import ml_dtypes, numpy as np, onnxruntime as ort
from onnx import TensorProto, TypeProto, helper
# the float64 references alone (pure numpy): not the op package, whose import takes seconds
ops_spec = importlib.util.find_spec("ascend_grad.ops")
reference_spec = importlib.util.spec_from_file_location("reference", os.path.join(ops_spec.submodule_search_locations[0], "reference.py"))
reference = importlib.util.module_from_spec(reference_spec)
reference_spec.loader.exec_module(reference)
from ascend_grad.testing import FLOAT_DTYPES, TOLERANCE, _from_ort_value, assert_close, away_from, placed, random_array, to_ort_value, without_spinning

warnings.simplefilter("ignore")  # (numpy: the mean of an empty group)
library, isa, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = np.random.default_rng(seed)
DT = list(FLOAT_DTYPES.values())
F32 = FLOAT_DTYPES["float32"]
ONNX = {F32: TensorProto.FLOAT, FLOAT_DTYPES["float16"]: TensorProto.FLOAT16, FLOAT_DTYPES["bfloat16"]: TensorProto.BFLOAT16}
sessions, runs, rejected = [], 0, 0

OUTPUTS = {"SiluBackward": ["gradInput"], "MishBackward": ["gradInput"], "GroupNormSwish": ["y", "mean", "rstd"],
           "GroupNormSwishGrad": ["dx", "dgamma", "dbeta"]}

def session(op, types, **attrs):
    # one model per (op, dtypes, attributes), shapes left open: many shapes per session; no function
    # body (only the kernels can run it)
    node = helper.make_node(op, list(types), OUTPUTS[op], domain="ascend.grad", **attrs)
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info(n, ONNX[t], None) for n, t in types.items()],
                              [helper.make_value_info(o, TypeProto()) for o in OUTPUTS[op]])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("ascend.grad", 1)], ir_version=10)
    options = without_spinning()
    options.intra_op_num_threads = 2
    options.register_custom_ops_library(library)
    s = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    sessions.append(s)
    return s

def run(s, feeds):
    global runs
    names = [o.name for o in s.get_outputs()]
    values = s.run_with_ort_values(names, {k: v if isinstance(v, ort.OrtValue) else to_ort_value(v) for k, v in feeds.items()})
    runs += 1
    return dict(zip(names, (_from_ort_value(v) for v in values)))

def check(got, expected, what, scales=None):
    for name, (ref, dtype) in expected.items():
        assert got[name].dtype == dtype, (what, name, got[name].dtype, dtype)
        tolerance = TOLERANCE[np.dtype(dtype)]
        if name in (scales or {}):  # NaN and infinities where the reference has them, then the size
            assert_close(got[name], ref, f"{what}/{name}", tolerance=1e300)
            both = np.isfinite(ref) & np.isfinite(got[name])
            diff = np.abs(got[name].astype(np.float64) - ref)[both].max(initial=0.0)
            bound = tolerance * max(scales[name], np.abs(ref[np.isfinite(ref)]).max(initial=0.0))
            bound += float(ml_dtypes.finfo(got[name].dtype).smallest_subnormal)  # (as assert_close)
            assert diff <= bound, f"{what}/{name}: {diff:.3g} > {bound:.3g}"
        else:
            assert_close(got[name], ref, f"{what}/{name}", tolerance=tolerance)

def term_sizes(inputs, G, fmt):
    # dgamma and dbeta sum N * HxW terms per channel that cancel, and each term dy * swish'(z) is
    # itself a sum that cancels near swish's stationary point z = -1.2785: float arithmetic is
    # exact to eps times the size of those parts, not to eps times a result near 0 (one channel's
    # dgamma at (2, 15, 1) NHWC, 2.4e-4 "relative error"; dbeta at (1, 1, 1) with beta near
    # -1.28, 8e-5). The sums of |parts|, the largest over the channels. dx = rstd * (g * gamma -
    # c1 - xhat * c2) carries the same parts: a tensor whose largest dx has its z near -1.2785 has
    # nothing larger to be judged against (docs/ops.md, Accuracy; (1, 2, 1) with G = 2 on the
    # generic table: z = -1.2810, 1.14e-5 "relative error", the AVX tables within the bound).
    f64 = {k: np.asarray(v, np.float64) for k, v in inputs.items()}
    x, dy = (np.moveaxis(f64[k], -1, 1) if fmt == "NHWC" else f64[k] for k in ("x", "dy"))
    N, C = x.shape[:2]
    xhat = ((x.reshape(N, G, -1) - f64["mean"].reshape(N, G, 1)) * f64["rstd"].reshape(N, G, 1)).reshape(x.shape)
    per_channel = (1, C) + (1,) * (x.ndim - 2)
    gamma = f64["gamma"].reshape(per_channel)
    z = xhat * gamma + f64["beta"].reshape(per_channel)
    s = 1.0 / (1.0 + np.exp(-z))
    g = np.abs(dy) * (s + np.abs(z) * s * (1.0 - s))
    axes = (0, *range(2, x.ndim))
    parts = (g * np.abs(gamma)).reshape(N, G, -1)  # the sizes of g * gamma's parts, per group
    c1, c2 = np.nanmean(parts, axis=2, keepdims=True), np.nanmean(parts * np.abs(xhat.reshape(N, G, -1)), axis=2, keepdims=True)
    dx = f64["rstd"].reshape(N, G, 1) * (parts + c1 + np.abs(xhat.reshape(N, G, -1)) * c2)
    return {"dgamma": np.nansum(g * np.abs(xhat), axis=axes).max(initial=0.0), "dbeta": np.nansum(g, axis=axes).max(initial=0.0),
            "dx": np.nanmax(dx, initial=0.0)}

def reject(s, feeds, words, what):
    global rejected
    try:
        s.run_with_ort_values([o.name for o in s.get_outputs()], feeds)
    except Exception as error:
        message = str(error)
        assert "INVALID_ARGUMENT" in message and all(w in message for w in words), (what, message)
        rejected += 1
        return
    raise AssertionError(f"{what}: accepted")

def special(a):
    # edge values at fixed places: NaN, +-90, a large and a tiny one
    a = np.array(a, copy=True)
    flat = a.reshape(-1)
    for i, v in zip((0, 3, 5, 8), (np.nan, 90.0, -90.0, 1e-3)):
        if i < flat.size and flat.size >= 12:
            flat[i] = v
    return a

def group_norm_feeds(rng, shape, G, T, U, fmt):
    # as ascend_grad.testing.group_norm_feeds: mean and rstd from the rounded x, as the forward gives them
    x = random_array(rng, shape, T)
    gamma = random_array(rng, shape[1 if fmt == "NCHW" else -1], U, scale=1.5)
    beta = random_array(rng, gamma.shape, U)
    _, mean, rstd = reference.group_norm_swish(x, gamma, beta, G, data_format=fmt)
    return {"dy": random_array(rng, shape, T), "mean": mean.astype(U), "rstd": rstd.astype(U), "x": x, "gamma": gamma, "beta": beta}

def hostile(shape):
    return ort.OrtValue.ortvalue_from_shape_and_type(list(shape), np.float32)

ODD = [7, 8, 9, 15, 16, 17, 33, 65]
ELEMENTWISE_SHAPES = [(), (0, 5), (1,), *[(n,) for n in ODD], (3, 5, 7), (1, 2, 1, 3, 1, 2, 1, 3), (3, 20000)]

# SiluBackward: one dtype T
for T in DT:
    s = session("SiluBackward", {"gradOutput": T, "self": T})
    for shape in ELEMENTWISE_SHAPES:
        go = special(random_array(rng, shape, T))
        x = special(away_from(random_array(rng, shape, T, scale=4.0), -1.2785))
        check(run(s, {"gradOutput": go, "self": x}), {"gradInput": (reference.silu_backward(go, x), T)}, f"silu {T} {shape}")

# MishBackward: every (gradOutput, self) pair, broadcasting; empty rejected
PAIRS = [((n,), (n,)) for n in ODD] + [((), (17,)), ((9,), ()), ((3, 1, 9), (4, 9)), ((2, 16, 1), (1, 16)),
         ((1, 33), (7, 1)), ((3, 20000), (3, 20000)), ((3, 1), (1, 20000))]
for a, b in itertools.product(DT, repeat=2):
    out = a if a == b else F32
    s = session("MishBackward", {"gradOutput": a, "self": b})
    for sa, sb in PAIRS:
        go, x = special(random_array(rng, sa, a)), special(away_from(random_array(rng, sb, b, scale=4.0), -1.1924))
        check(run(s, {"gradOutput": go, "self": x}), {"gradInput": (reference.mish_backward(go, x), out)}, f"mish {a} {b} {sa} {sb}")
    if a == b == F32:
        reject(s, {"gradOutput": to_ort_value(np.ones((0, 4), a)), "self": to_ort_value(np.ones(4, b))}, ["empty"], "mish empty")

# An output of STREAM_BYTES and more goes out by non-temporal stores, after a head through a padded
# vector up to the first aligned place; one at 4 bytes into a page has the longest head (finding: for
# a 2-byte type that head was up to twice a vector, and the padded vector's buffer overflowed).
STREAM_BYTES = int(os.environ["ASCEND_GRAD_STREAM_BYTES"])
for T, n in ((F32, STREAM_BYTES // 4 + 13), (FLOAT_DTYPES["bfloat16"], STREAM_BYTES // 2 + 13)):
    s = session("MishBackward", {"gradOutput": T, "self": T})
    go, x = random_array(rng, (n,), T), random_array(rng, (n,), T, scale=4.0)
    out = placed((n,), T, 4)
    binding = s.io_binding()
    for name, value in (("gradOutput", go), ("self", x)):
        binding.bind_ortvalue_input(name, to_ort_value(value))
    binding.bind_ortvalue_output("gradInput", to_ort_value(out))
    s.run_with_iobinding(binding)
    runs += 1
    check({"gradInput": out}, {"gradInput": (reference.mish_backward(go, x), T)}, f"mish {T} ({n},) streamed, out 4 bytes into a page")
    del binding, go, x, out

# GroupNormSwish and GroupNormSwishGrad: every (T, U), both layouts, G = 1 and 2; shapes in NCHW
# terms (N, C, *spatial): odd spatial sizes around the vector widths, HxW = 1, G == C, rank 8, empty
def gn_shapes(G, turn):
    yield (2, 2 * G, 3, 3)
    yield (1, G, 1)  # G == C, HxW = 1
    yield (3, 4 * G)  # rank 2
    for n in ODD[turn % 2::2]:  # half the odd sizes in turn, along C (NHWC) or HxW (NCHW)
        yield (2, G * (1 + n % 3), n)
        yield (1, n * G, 3)
    yield (1, 2 * G, 1, 2, 1, 3, 1, 2)  # rank 8
    yield (2, 2 * G, 16, 40)  # a bigger slab
    yield (0, 2 * G, 3)
    yield (2, 2 * G, 0)
    yield (2, 0, 3)  # C = 0

def layout(shape, fmt):
    return shape if fmt == "NCHW" else (shape[0], *shape[2:], shape[1])

for turn, ((T, U), fmt, G) in enumerate(itertools.product(itertools.product(DT, repeat=2), ["NCHW", "NHWC"], [1, 2])):
    fwd = session("GroupNormSwish", {"x": T, "gamma": U, "beta": U}, num_groups=G, data_format=fmt)
    bwd = session("GroupNormSwishGrad", {"dy": T, "mean": U, "rstd": U, "x": T, "gamma": U, "beta": U},
                  num_groups=G, data_format=fmt)
    for base in gn_shapes(G, turn + G):
        shape = layout(base, fmt)
        what = f"{T}/{U} {fmt} G={G} {shape}"
        N, C = base[0], base[1]
        if C == 0:  # (the reference cannot reshape a C of 0: the answer is known)
            x, gamma = np.ones(shape, T), np.ones(0, U)
            check(run(fwd, {"x": x, "gamma": gamma, "beta": gamma}),
                  {"y": (np.ones(shape), T), "mean": (np.full((N, G), np.nan), U), "rstd": (np.full((N, G), np.nan), U)}, what)
            feeds = {"dy": x, "mean": np.ones((N, G), U), "rstd": np.ones((N, G), U), "x": x, "gamma": gamma, "beta": gamma}
            check(run(bwd, feeds), {"dx": (np.ones(shape), T), "dgamma": (np.zeros(0), U), "dbeta": (np.zeros(0), U)}, what)
            continue
        inputs = group_norm_feeds(rng, shape, G, T, U, fmt)
        gamma, beta = inputs["gamma"], inputs["beta"]
        # (the forward's x as the op tests draw it, its mean far from 0: a bound relative to
        # max |mean| means nothing for a mean near 0)
        x = random_array(rng, shape, T, scale=3.0, offset=1.0)
        if base == (2, 2 * G, 3, 3):  # NaN spreads over its group only, |x| = 90 elsewhere
            inputs["x"], x = special(inputs["x"]), special(x)
        y, mean, rstd = reference.group_norm_swish(x, gamma, beta, G, data_format=fmt)
        check(run(fwd, {"x": x, "gamma": gamma, "beta": beta}), {"y": (y, T), "mean": (mean, U), "rstd": (rstd, U)}, "fwd " + what)
        ref = reference.group_norm_swish_grad(*inputs.values(), G, data_format=fmt)
        if x.size == 0:
            ref = (ref[0], np.zeros(C), np.zeros(C))  # sums over nothing
        check(run(bwd, inputs), {"dx": (ref[0], T), "dgamma": (ref[1], U), "dbeta": (ref[2], U)}, "bwd " + what,
              scales=term_sizes(inputs, G, fmt) if x.size else None)
    if T == U == F32 and fmt == "NCHW" and G == 1:
        # hostile shapes (findings: signed overflow, a std::length_error across the C API)
        e = np.zeros(0, np.float32)
        reject(fwd, {"x": hostile((3 * 2**61, 0)), "gamma": to_ort_value(e), "beta": to_ort_value(e)}, ["[GroupNormSwish]", "too large"], "huge N")
        reject(fwd, {"x": hostile((2, 0, 2**62, 4)), "gamma": to_ort_value(e), "beta": to_ort_value(e)}, ["[GroupNormSwish]", "HxW"], "huge HxW")
        bad = {"dy": hostile((3 * 2**61, 0)), "mean": to_ort_value(e), "rstd": to_ort_value(e), "x": hostile((3 * 2**61, 0)),
               "gamma": to_ort_value(e), "beta": to_ort_value(e)}
        reject(bwd, bad, ["[GroupNormSwishGrad]", "too large"], "grad huge N")

huge_g = session("GroupNormSwish", {"x": F32, "gamma": F32, "beta": F32}, num_groups=2**62)
e = to_ort_value(np.zeros(0, np.float32))
reject(huge_g, {"x": hostile((4, 0)), "gamma": e, "beta": e}, ["[GroupNormSwish]", "N * num_groups"], "huge num_groups")

print(f"ISA {isa}: {runs} kernel runs checked against the references, {rejected} hostile inputs rejected", flush=True)
del s, fwd, bwd, huge_g, sessions[:]
gc.collect()
"""


def _runtime(name):
    """The compiler's sanitizer runtime (e.g. libasan.so.8), or None."""
    found = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return str(Path(found).resolve()) if found and os.path.isabs(found) and Path(found).exists() else None


def _unsupported_reason():
    if shutil.which("gcc") is None or shutil.which("g++") is None or shutil.which("cmake") is None:
        return "needs gcc, g++ and cmake"
    missing = [name for name in ("libasan.so", "libubsan.so") if _runtime(name) is None]
    if missing:
        return f"this compiler has no sanitizer runtime ({', '.join(missing)} not found by gcc -print-file-name)"
    return None


def _digest():
    h = hashlib.sha256()
    compiler = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    h.update(f"{compiler}\n{CONFIGURE}\n".encode())
    for path in sorted(p for p in SOURCES.rglob("*") if p.suffix in (".cc", ".h", ".map", ".txt") and "__pycache__" not in p.parts):
        h.update(str(path.relative_to(SOURCES)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def build(headers):
    """The sanitizer build of the library, rebuilt only when its sources changed. -> (path, seconds)
    headers: an onnxruntime include/ folder, or None (CMake fetches one)."""
    BUILD.mkdir(parents=True, exist_ok=True)
    with open(BUILD / ".lock", "w") as lock:  # one build at a time (pytest-xdist, other checkouts' runs)
        fcntl.flock(lock, fcntl.LOCK_EX)
        digest, stamp = _digest(), BUILD / "stamp"
        if stamp.exists() and stamp.read_text() == digest and LIBRARY.exists():
            return LIBRARY, 0.0
        start = time.monotonic()
        stamp.unlink(missing_ok=True)
        configure = ["cmake", "-S", str(SOURCES), "-B", str(BUILD), *CONFIGURE]
        if shutil.which("ninja") and not (BUILD / "CMakeCache.txt").exists():
            configure += ["-G", "Ninja"]
        if headers:
            configure.append(f"-DONNXRUNTIME_INCLUDE_DIR={headers}")
        for command in (configure, ["cmake", "--build", str(BUILD), "-j", str(min(os.cpu_count() or 1, 4))]):
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
        stamp.write_text(digest)
        return LIBRARY, time.monotonic() - start


def _sanitized_env(**extra):
    env = dict(os.environ, ASAN_OPTIONS=ASAN_OPTIONS, UBSAN_OPTIONS=UBSAN_OPTIONS, **extra)
    env["LD_PRELOAD"] = f"{_runtime('libasan.so')}:{_runtime('libubsan.so')}"  # (an uninstrumented python loads it)
    env.pop("ASCEND_GRAD_TEST_THROW", None)
    return env


def _reports(stderr):
    return [line for line in stderr.splitlines() if any(r in line for r in REPORTS)]


@pytest.fixture(scope="module")
def sanitized_library(onnxruntime_headers):
    reason = _unsupported_reason()
    if reason:
        pytest.skip(reason)
    library, seconds = build(onnxruntime_headers)
    print(f"sanitizer build: {'reused' if not seconds else f'{seconds:.0f} s'} ({library})")
    assert b"__asan_init" in library.read_bytes() and b"__ubsan_handle" in library.read_bytes(), "not a sanitizer build"
    return library


def test_every_kernel_under_address_and_undefined_behaviour_sanitizers(sanitized_library):
    isas, skipped = ISAS, sorted(set(runtime_ext.ISA_FEATURES) - set(ISAS))
    seed = int(os.environ.get("ASCEND_GRAD_SEED") or int.from_bytes(os.urandom(4), "little"))  # (replays a failure)
    total, start = 0, time.monotonic()
    for isa in isas:
        env = _sanitized_env(ASCEND_GRAD_ISA=isa, ASCEND_GRAD_VERBOSE="1", ASCEND_GRAD_STREAM_BYTES=STREAM_BYTES)
        done = subprocess.run([sys.executable, "-c", CHILD, str(sanitized_library), isa, str(seed)],
                              capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
        reports = _reports(done.stderr)
        assert done.returncode == 0 and not reports, (
            f"ISA {isa}, seed {seed}: exit {done.returncode}, sanitizer reports {reports}\n{done.stdout[-2000:]}\n{done.stderr[-6000:]}")
        assert f"ascend-grad: {isa} kernels" in done.stderr, done.stderr[-2000:]
        assert {stream for stream, _ in reported_sizes(done.stderr)} == {STREAM_BYTES}, done.stderr[-2000:]
        line = next(line for line in done.stdout.splitlines() if line.startswith(f"ISA {isa}:"))
        total += int(line.split(": ")[1].split()[0])
        print(line)
    print(f"sanitizers: {total} kernel runs checked on {', '.join(isas)} in {time.monotonic() - start:.0f} s "
          f"(not on this CPU: {', '.join(skipped) or 'none'}); seed {seed}")


# What the job would see if the registry deleted its ops through OrtCustomOp (no virtual destructor):
# the same runtimes, options and kind of load (a dlopen'd instrumented library in python) report it.
CANARY = r"""
struct Base { long a; };
struct Derived : Base { char more[64]; };
extern "C" void mismatched_delete() { Base* b = new Derived(); delete b; }
"""


def test_the_job_reports_a_mismatched_delete(sanitized_library, tmp_path):
    (tmp_path / "canary.cc").write_text(CANARY)
    lib = tmp_path / "libcanary.so"
    flags = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined", "-O0"]  # (as the library's)
    subprocess.run(["g++", *flags, "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "canary.cc")], check=True)
    code = f"import ctypes; ctypes.CDLL({str(lib)!r}).mismatched_delete(); print('not caught')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_sanitized_env(), timeout=120)
    assert done.returncode != 0 and "new-delete-type-mismatch" in done.stderr, done.stdout + done.stderr[-3000:]
