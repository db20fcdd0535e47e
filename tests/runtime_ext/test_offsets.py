"""Every CPU kernel gives bit-identical outputs whatever the page offsets of its tensors.

The kernels choose code paths from where their input and output tensors sit within a 4 KiB page
(to dodge 4K-aliasing stalls: walking a chunk forward or backward, streaming the output or writing
it through the cache; runtime_ext/cpu/page_walk.h). Such a choice must move bytes only, never change
the arithmetic or its order: so each op runs with its streamed inputs (gradOutput/dy, self/x) and
its outputs placed at a designed set of byte offsets into a page (equal, output just after, just
before or far from the inputs, inputs apart), bound in place through IO binding, and every result
must equal, bit for bit, the result at offsets (0, 0, 0) with one thread; with 2 threads too. The
offsets cover every walk (the streamed cases under both rules for a streamed walk: by gap and
always forward). Every test's name holds "kernels", the -k filter of test_library's reruns
under each instruction set.
"""

from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from ascend_grad import ops
from ascend_grad.testing import FLOAT_DTYPES, library_copy, placed, to_ort_value, trimmed, without_spinning

F32, F16, BF16 = FLOAT_DTYPES["float32"], FLOAT_DTYPES["float16"], FLOAT_DTYPES["bfloat16"]

# (gradOutput/dy, self/x, outputs) byte offsets into a page, by kind; GroupNormSwish has no gradient
# input and puts gamma and beta at the first offset. The first triple is the baseline.
OFFSET_KINDS = [
    [(0, 0, 0), (16, 16, 16)],  # all equal
    [(16, 16, 64), (0, 0, 48), (528, 528, 576)],  # output just after the inputs
    [(64, 64, 16), (4080, 4080, 4032)],  # output just before
    [(16, 16, 2064)],  # output half a page away
    [(128, 16, 64), (16, 128, 64)],  # output between the inputs
    [(0, 528, 16), (4032, 48, 0)],  # inputs apart
    [(4, 4, 4), (12, 4, 8)],  # no vector alignment: a streamed output's head is most of a vector
]
# every kind; ASCEND_GRAD_TEST_FRACTION takes a share of each (the emulated aarch64 runs)
OFFSETS = [triple for kind in OFFSET_KINDS for triple in kind[:trimmed(len(kind))]]
THREADS = [1, 2]

# A signalling NaN with a payload: no arithmetic produces it, so finding it afterwards means the
# kernel did not write that element of the array we placed.
SENTINEL = {F32: np.uint32(0x7FA5A5A5), F16: np.uint16(0x7D5A), BF16: np.uint16(0x7FA5)}
UINT = {4: np.uint32, 2: np.uint16}

ELEMENTWISE_SIZES = [16384 * 2 + 13, 1000]  # over two work chunks, not a multiple of 8 or 16; one small
# (N, C, H, W): HxW = 1271, not a multiple of 16; GroupNormSwishGrad's first pass takes four vectors
# a step, then single vectors (3 with 16 lanes, 2 with 8), then a partial one
GROUP_NORM_SHAPE, G = (2, 16, 31, 41), 4
# GroupNormSwishGrad's runs of slabs (group_norm_swish_grad.cc: about four tasks a core, hence N):
# four slabs a task, each slab's second pass in pieces behind the next one's first
RUNS_SHAPE = (4 * len(os.sched_getaffinity(0)), 8, 31, 41)


def _bits(array: np.ndarray) -> np.ndarray:
    return array.view(UINT[array.dtype.itemsize])


def _bound(array: np.ndarray):
    """An OrtValue over the array's own memory (no copy: checked)."""
    value = to_ort_value(array)
    assert value.data_ptr() == array.ctypes.data
    return value


_SESSIONS: dict = {}
_LIBRARIES: dict = {}


def _library(stream_walk: str | None) -> str:
    """A private copy of the kernel library per streamed-walk rule, taken once per run (as in
    test_properties): the library is rebuilt in place while others work in this checkout, and a
    mapped library overwritten under a session crashes it. Each copy loads as a library of its own,
    which reads ASCEND_GRAD_STREAM_WALK once, when first registered (None: the CPU's own rule)."""
    if stream_walk not in _LIBRARIES:
        _LIBRARIES[stream_walk] = library_copy("ascend_grad_offsets_")
    return _LIBRARIES[stream_walk]


def _session(op_type, inputs, threads, stream_walk=None, **attrs):
    """One session per (op, input dtypes and shapes, attributes, threads, streamed-walk rule);
    inputs maps each input name to (dtype, shape with symbolic dims allowed)."""
    key = (op_type, tuple((k, np.dtype(d).name, tuple(s)) for k, (d, s) in inputs.items()),
           tuple(sorted(attrs.items())), threads, stream_walk)
    if key not in _SESSIONS:
        elem = {k: (helper.np_dtype_to_tensor_dtype(np.dtype(d)), list(s)) for k, (d, s) in inputs.items()}
        model = ops.make_node_model(op_type, elem, **attrs)
        options = without_spinning()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        saved = os.environ.pop("ASCEND_GRAD_STREAM_WALK", None)
        try:
            if stream_walk is not None:
                os.environ["ASCEND_GRAD_STREAM_WALK"] = stream_walk
            options.register_custom_ops_library(_library(stream_walk))
        finally:
            os.environ.pop("ASCEND_GRAD_STREAM_WALK", None)
            if saved is not None:
                os.environ["ASCEND_GRAD_STREAM_WALK"] = saved
        _SESSIONS[key] = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return _SESSIONS[key]


def _run_placed(session, feeds, placed_inputs, outputs):
    """Run with IO binding: the inputs named in placed_inputs (name -> offset) copied into placed
    arrays, the others bound as they are; each output (name -> (dtype, shape, offset)) bound to a
    placed array filled with SENTINEL. Returns {output name: the placed array, read afterwards}."""
    binding = session.io_binding()
    keep = []  # the input arrays, alive until the run is over
    for name, value in feeds.items():
        if name in placed_inputs:
            array = placed(value.shape, value.dtype, placed_inputs[name])
            array[...] = value
        else:
            array = np.ascontiguousarray(value)
        keep.append(array)
        binding.bind_ortvalue_input(name, _bound(array))
    results = {}
    for name, (dtype, shape, offset) in outputs.items():
        array = placed(shape, dtype, offset)
        _bits(array)[...] = SENTINEL[np.dtype(dtype)]
        binding.bind_ortvalue_output(name, _bound(array))
        results[name] = array
    session.run_with_iobinding(binding)
    for name, got in zip(outputs, binding.get_outputs()):
        assert got.data_ptr() == results[name].ctypes.data, f"{name}: onnxruntime moved the output"
    for name, array in results.items():
        unwritten = np.flatnonzero(_bits(array) == SENTINEL[array.dtype])
        assert unwritten.size == 0, f"{name}: {unwritten.size} elements not written, first at flat index {unwritten[0]}"
    return results


def _assert_offset_invariant(run, outputs):
    """run(threads, triple) -> {output name: array}: every (threads, triple) of THREADS x OFFSETS must
    give the bits that 1 thread gives at OFFSETS[0]."""
    baseline = None
    for threads in THREADS:
        for triple in OFFSETS:
            got = {name: _bits(a).copy() for name, a in run(threads, triple).items()}
            if baseline is None:
                baseline = got
                continue
            for name, bits in got.items():
                differ = np.flatnonzero(bits != baseline[name])
                assert differ.size == 0, (
                    f"{name} at offsets {triple} with {threads} thread(s): "
                    f"{differ.size} elements differ from offsets {OFFSETS[0]} with 1 thread; first at flat index "
                    f"{differ[0]}: {bits.reshape(-1)[differ[0]]:#x} != {baseline[name].reshape(-1)[differ[0]]:#x}"
                )
    assert set(baseline) == set(outputs)


def _with_specials(rng, x: np.ndarray, where=None) -> np.ndarray:
    """x (float64) with twice NaN, +inf, -inf, +-90, 87.5, -88.7 (exp(-|x|) near float's smallest
    normal) and -103 (near its smallest subnormal) at random places in x[where] (all of x by default)."""
    x = np.array(x, copy=True)
    where = ... if where is None else where
    region = np.array(x[where])
    values = [np.nan, np.inf, -np.inf, 90.0, -90.0, 87.5, -88.7, -103.0]
    region.reshape(-1)[rng.choice(region.size, 2 * len(values), replace=False)] = values * 2
    x[where] = region
    return x


# ---------------------------------------------------------------------------------------------
# SiluBackward, MishBackward

# (op, gradOutput dtype, self dtype, gradOutput shape, self shape): "n" is each size in turn
ELEMENTWISE = [
    *[("SiluBackward", T, T, ("n",), ("n",)) for T in (F32, F16, BF16)],
    *[("MishBackward", T, T, ("n",), ("n",)) for T in (F32, F16, BF16)],
    ("MishBackward", F16, F32, ("n",), ("n",)),
    ("MishBackward", F32, F32, (3, "n"), (3, 1)),  # self one value along each row
    ("MishBackward", F16, F16, (1,), (3, "n")),  # gradOutput one value for everything
]
# (the mixed pair's float16 gradOutput is no stream of the float32 output's element size: the
# kernels place the walk by self alone there)


def _elementwise_id(case):
    op, go, x, go_shape, x_shape = case
    shapes = "" if go_shape == x_shape else f"-{'x'.join(map(str, go_shape))}-by-{'x'.join(map(str, x_shape))}"
    return f"{op}-{go.name}-{x.name}{shapes}"


@pytest.mark.parametrize("n", ELEMENTWISE_SIZES)
@pytest.mark.parametrize("case", ELEMENTWISE, ids=_elementwise_id)
def test_elementwise_kernels_ignore_page_offsets(rng, case, n):
    _check_elementwise(rng, case, n)


# Outputs of 32 MiB and more take non-temporal stores, whose walks are their own code: one float32
# and one bfloat16 case just past that size, under both rules for their walk (on Intel they walk
# forward whatever the gaps, elsewhere by gap: ASCEND_GRAD_STREAM_WALK forces either). The emulated
# aarch64 runs (tests/aarch64) move the size with ASCEND_GRAD_STREAM_BYTES, which the library reads.
STREAM_BYTES = int(os.environ.get("ASCEND_GRAD_STREAM_BYTES") or 32 << 20)
STREAMED = [(("SiluBackward", F32, F32, ("n",), ("n",)), STREAM_BYTES // 4 + 13),
            (("MishBackward", BF16, BF16, ("n",), ("n",)), STREAM_BYTES // 2 + 13)]


@pytest.mark.parametrize("stream_walk", ["gap", "forward"])
@pytest.mark.parametrize("case, n", STREAMED, ids=lambda v: _elementwise_id(v) if isinstance(v, tuple) else str(v))
def test_streamed_elementwise_kernels_ignore_page_offsets(rng, case, n, stream_walk):
    _check_elementwise(rng, case, n, stream_walk)


def _check_elementwise(rng, case, n, stream_walk=None):
    op_type, go_dtype, x_dtype, go_dims, x_dims = case
    go_shape = tuple(n if d == "n" else d for d in go_dims)
    x_shape = tuple(n if d == "n" else d for d in x_dims)
    out_shape = np.broadcast_shapes(go_shape, x_shape)
    out_dtype = go_dtype if go_dtype == x_dtype else F32
    grad_output = np.asarray(rng.standard_normal(go_shape)).astype(go_dtype)
    x = rng.standard_normal(x_shape) * 4
    if x_shape[-1] == n:  # (a broadcast self of 3 values keeps them finite: a NaN would fill its row)
        x = _with_specials(rng, x)
    x = x.astype(x_dtype)
    inputs = {"gradOutput": (go_dtype, go_dims), "self": (x_dtype, x_dims)}

    def run(threads, triple):
        go_offset, x_offset, out_offset = triple
        return _run_placed(_session(op_type, inputs, threads, stream_walk), {"gradOutput": grad_output, "self": x},
                           {"gradOutput": go_offset, "self": x_offset},
                           {"gradInput": (out_dtype, out_shape, out_offset)})

    _assert_offset_invariant(run, ["gradInput"])


# ---------------------------------------------------------------------------------------------
# GroupNormSwish, GroupNormSwishGrad


def _group_norm_inputs(rng, T, data_format, shape=GROUP_NORM_SHAPE):
    """(layout shape, x of dtype T): scale 4, a few +-90; NaN, +-inf only in sample 1, groups 0
    and 1 (a non-finite value turns its whole group into NaN: the other groups keep their digits)."""
    Cg = shape[1] // G
    x = _with_specials(rng, rng.standard_normal(shape) * 4, np.s_[1, :2 * Cg])
    x.reshape(-1)[rng.choice(x.size, 6, replace=False)] = [90.0, -90.0, 89.0, -89.5, 60.0, -75.0]
    if data_format == "NHWC":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    return x.shape, x.astype(T)


def _group_norm_id(value):
    return value.name if isinstance(value, np.dtype) else str(value)


@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
@pytest.mark.parametrize("T", [F32, F16, BF16], ids=_group_norm_id)
def test_group_norm_swish_kernels_ignore_page_offsets(rng, T, data_format):
    U = F32
    N, C = GROUP_NORM_SHAPE[:2]
    shape, x = _group_norm_inputs(rng, T, data_format)
    feeds = {"x": x, "gamma": (rng.standard_normal(C) * 1.5).astype(U), "beta": rng.standard_normal(C).astype(U)}
    inputs = {k: (v.dtype, v.shape) for k, v in feeds.items()}
    attrs = dict(num_groups=G, eps=1e-5, swish_scale=1.0, activate_swish=1, data_format=data_format)

    def run(threads, triple):
        param_offset, x_offset, out_offset = triple
        outputs = {"y": (T, shape, out_offset), "mean": (U, (N, G), out_offset), "rstd": (U, (N, G), out_offset)}
        return _run_placed(_session("GroupNormSwish", inputs, threads, **attrs), feeds,
                           {"x": x_offset, "gamma": param_offset, "beta": param_offset}, outputs)

    _assert_offset_invariant(run, ["y", "mean", "rstd"])


# A y of 32 MiB (STREAM_BYTES) and more takes non-temporal stores (NCHW), each row from its first
# aligned vector on: rows of an odd length, so every row starts at another place in its line. (Its
# walk goes by the gap on every CPU: ASCEND_GRAD_STREAM_WALK does not apply.) 32 MiB: H = 1021.
STREAMED_GROUP_NORM = [(T, (1, C, (STREAM_BYTES // (C * 1031 * T.itemsize) + 4) | 1, 1031)) for T, C in ((F32, 8), (BF16, 16))]


@pytest.mark.parametrize("T, shape", STREAMED_GROUP_NORM, ids=_group_norm_id)
def test_streamed_group_norm_swish_kernels_ignore_page_offsets(rng, T, shape):
    from ascend_grad.testing import assert_close

    U, (N, C) = F32, shape[:2]
    x = (rng.standard_normal(shape, dtype=np.float32) * 4).astype(T)
    feeds = {"x": x, "gamma": (rng.standard_normal(C) * 1.5).astype(U), "beta": rng.standard_normal(C).astype(U)}
    inputs = {k: (v.dtype, v.shape) for k, v in feeds.items()}

    def run(threads, triple):
        param_offset, x_offset, out_offset = triple
        outputs = {"y": (T, shape, out_offset), "mean": (U, (N, G), out_offset), "rstd": (U, (N, G), out_offset)}
        return _run_placed(_session("GroupNormSwish", inputs, threads, num_groups=G), feeds,
                           {"x": x_offset, "gamma": param_offset, "beta": param_offset}, outputs)

    # the streamed stores hold the op's values, not only the same bits at every placement
    got = run(1, OFFSETS[3])
    assert_close(got["y"], ops.reference.group_norm_swish(x, feeds["gamma"], feeds["beta"], G)[0], "y")
    _assert_offset_invariant(run, ["y", "mean", "rstd"])


@pytest.mark.parametrize("nchw_shape", [GROUP_NORM_SHAPE, RUNS_SHAPE], ids=["slabs", "runs"])
@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
@pytest.mark.parametrize("T", [F32, F16, BF16], ids=_group_norm_id)
def test_group_norm_swish_grad_kernels_ignore_page_offsets(rng, T, data_format, nchw_shape):
    U = F32
    C = nchw_shape[1]
    shape, x = _group_norm_inputs(rng, T, data_format, nchw_shape)
    gamma, beta = (rng.standard_normal(C) * 1.5).astype(U), rng.standard_normal(C).astype(U)
    with np.errstate(all="ignore"):  # mean and rstd as the forward hands them over (NaN where x has them)
        _, mean, rstd = ops.reference.group_norm_swish(x, gamma, beta, G, data_format=data_format)
    feeds = {"dy": rng.standard_normal(shape).astype(T), "mean": mean.astype(U), "rstd": rstd.astype(U), "x": x,
             "gamma": gamma, "beta": beta}
    inputs = {k: (v.dtype, v.shape) for k, v in feeds.items()}
    attrs = dict(num_groups=G, swish_scale=1.0, dgamma_is_require=1, dbeta_is_require=1, data_format=data_format)

    def run(threads, triple):
        dy_offset, x_offset, out_offset = triple
        outputs = {"dx": (T, shape, out_offset), "dgamma": (U, (C,), out_offset), "dbeta": (U, (C,), out_offset)}
        return _run_placed(_session("GroupNormSwishGrad", inputs, threads, **attrs), feeds,
                           {"dy": dy_offset, "x": x_offset}, outputs)

    _assert_offset_invariant(run, ["dx", "dgamma", "dbeta"])
