"""Property tests of the fused CPU kernels against the float64 references (hypothesis).

Every kernel and every dtype combination the library registers (runtime_ext/cpu/register.cc:
SiluBackward for each T, MishBackward for the 9 (gradOutput, self) pairs, GroupNormSwish and
GroupNormSwishGrad for the 9 (T, U) pairs), each in three families of inputs:

- "offset": values far from zero relative to their spread, x ~ offset + spread * N(0, 1) with
  |offset| up to 1e4 * spread (catastrophic cancellation in x - mean);
- "magnitude": the whole tensor scaled huge or tiny (spreads from 2^-100 to 2^100 for float and
  bfloat16, the whole float16 range for float16), subnormal bulk values where the op resolves them;
- "specials": ordinary tensors with sprinkled subnormals, +-0, huge values, +-inf and NaN.

Shapes: rank 0..8 for the elementwise ops (numpy broadcasting for MishBackward), rank 2..8 with
NCHW and NHWC for the GroupNorm ops; innermost / per-group sizes around the vector widths (8, 16),
the float sum blocks (4096) and the elementwise work chunk (16384). Threads: 1 and 2 (drawn).

Judged with ascend_grad.testing.assert_close (SPEC.md's bound for the output dtype relative to
max |ref|, plus one smallest subnormal; NaN/Inf exactly where the reference has them). A
reference value beyond the output dtype's range is expected as the +-inf it rounds to.

What no float implementation can meet and these tests therefore do not generate (docs/ops.md, Accuracy):
elementwise x within 0.25 of the derivative's zero (ascend_grad.testing.away_from), a GroupNorm
group of M = 2 elements (dx = O(eps) after cancellation), and tensors whose whole result lives
below 2^-120 (an elementwise factor, gradient or result that float32 can only hold as a subnormal):
such elements are allowed only where they cannot carry the tensor's maximum (`_resolvable`).
Nor a parameter gradient (dgamma, dbeta: per channel a sum over N * HxW terms) that cancels so far
that one float32 rounding per term already exceeds its bound (`_sum_resolvable`): those outputs
are not judged in that case, dx still is.
A +-inf gradient is placed only where |x| <= 64, where the factor it multiplies is a normal float
(beyond that float32's factor is 0 and inf * 0 = NaN while float64 still gives +-inf).

Sessions are cached per (op, dtypes, rank, attributes, threads) with symbolic dims, so the cost is
the kernels and the references. The number of cases run is printed at the end of the module
("property cases: N").
"""

from __future__ import annotations

import itertools
from pathlib import Path

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from onnx import helper

from ascend_grad import ops

# inf - inf and the like inside the references and assert_close, on purpose
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
from ascend_grad.testing import FLOAT_DTYPES, TOLERANCE, _from_ort_value, assert_close, away_from, library_copy, to_ort_value, trimmed, without_spinning

F32, F16, BF16 = FLOAT_DTYPES["float32"], FLOAT_DTYPES["float16"], FLOAT_DTYPES["bfloat16"]
DTYPES = [F32, F16, BF16]
PAIRS = list(itertools.product(DTYPES, repeat=2))
FAMILIES = ["offset", "magnitude", "specials"]
SILU_GRAD_ROOT, MISH_GRAD_ROOT = -1.2785, -1.1924

# Sizes around vector widths (8 AVX2, 16 AVX-512), the partial tail, small odd sizes.
SMALL_SIZES = [1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 65]
# Around the float sum blocks (4096) and the elementwise work chunk (16384).
LARGE_SIZES = [4095, 4097, 16383, 16384, 16385]
MAX_ELEMENTS = 70_000

# a full run's; ASCEND_GRAD_TEST_FRACTION takes a share of them (the emulated aarch64 runs)
FULL_EXAMPLES = {"SiluBackward": 14, "MishBackward": 10, "GroupNormSwish": 10, "GroupNormSwishGrad": 10}
EXAMPLES = {op: trimmed(n) for op, n in FULL_EXAMPLES.items()}
CASES = {"run": 0, "sums unjudged": 0}  # examples executed (hypothesis included); printed at module end
SETTINGS = dict(deadline=None, derandomize=False, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TINY = 2.0**-120  # below this a float32 intermediate is (nearly) subnormal: see the module doc


def _planned(examples=None) -> int:
    """max_examples x dtype combinations x families: the cases this run (or one with `examples`) plans."""
    examples = EXAMPLES if examples is None else examples
    return sum(examples[op] * n * len(FAMILIES) for op, n in
               (("SiluBackward", 3), ("MishBackward", 9), ("GroupNormSwish", 9), ("GroupNormSwishGrad", 9)))


def test_the_docs_quote_the_planned_cases():
    """docs/reliability.md's table gives the number of cases a full run plans."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "reliability.md").read_text()
    assert f"| {_planned(FULL_EXAMPLES)} planned (max_examples x dtype combinations x {len(FAMILIES)} families)" in docs


@pytest.fixture(scope="module", autouse=True)
def _report_cases():
    yield
    total = CASES["run"]
    planned = _planned()
    print(f"\nproperty cases: {total} run ({planned} = max_examples x dtype combinations x families planned); "
          f"{CASES['sums unjudged']} parameter gradients left unjudged (_sum_resolvable)")


# ---------------------------------------------------------------------------------------------
# sessions

_SESSIONS: dict = {}
_LIBRARY: list = []


def _library() -> str:
    """A private copy of the kernel library, taken once per run: the library is rebuilt in place
    while others work in this checkout, and a mapped library overwritten under a session crashes it."""
    if not _LIBRARY:
        _LIBRARY.append(library_copy("ascend_grad_props_"))
    return _LIBRARY[0]


def _elem(dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _session(op_type, inputs, threads, **attrs):
    """One cached session per (op, input dtypes and ranks, attributes, threads); inputs maps a
    name to (dtype, symbolic dim names)."""
    key = (op_type, tuple((n, np.dtype(d).name, tuple(s)) for n, (d, s) in inputs.items()), tuple(sorted(attrs.items())), threads)
    if key not in _SESSIONS:
        model = ops.make_node_model(op_type, {n: (_elem(d), list(s)) for n, (d, s) in inputs.items()}, **attrs)
        options = without_spinning()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.register_custom_ops_library(_library())
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        _SESSIONS[key] = (session, [o.name for o in session.get_outputs()])
    return _SESSIONS[key]


def _run(session_and_names, feeds):
    session, names = session_and_names
    values = session.run_with_ort_values(names, {k: to_ort_value(v) for k, v in feeds.items()})
    return {name: _from_ort_value(v) for name, v in zip(names, values)}


# ---------------------------------------------------------------------------------------------
# judging


def _expected(ref, dtype):
    """The reference with values beyond dtype's range replaced by the +-inf they round to."""
    ref = np.asarray(ref, dtype=np.float64)
    with np.errstate(over="ignore"):
        rounded = ref.astype(dtype).astype(np.float64)
    return np.where(np.isfinite(ref) & ~np.isfinite(rounded), rounded, ref)


def _check(out, ref, what, dtype):
    assert out.dtype == dtype, f"{what}: dtype {out.dtype} != {dtype}"
    assert_close(out, _expected(ref, dtype), what)


def _resolvable(ref, parts, out_dtype):
    """False when elements that float32 arithmetic cannot resolve (|ref| or one of its factors
    `parts` below 2^-120, yet not 0) could carry the tensor's maximum."""
    ref = np.abs(np.asarray(ref, np.float64))
    bad = np.zeros(ref.shape, bool)
    for p in [ref, *parts]:
        p = np.broadcast_to(np.abs(np.asarray(p, np.float64)), ref.shape)
        bad |= (p > 0) & (p < TINY)
    good = ~bad & np.isfinite(ref)
    worst_bad = ref[bad & np.isfinite(ref)].max(initial=0.0)
    best_good = ref[good].max(initial=0.0)
    return worst_bad <= 0.25 * TOLERANCE[np.dtype(out_dtype)] * best_good


def _sum_resolvable(terms, ref, out_dtype):
    """False when a parameter gradient (per channel, a sum of float64 `terms`, channels on axes 1
    and 2 of (N, G, C/G, HxW)) cancels so far that one float32 rounding per term, as random-walk
    noise 2^-23 sqrt(sum terms^2), is above a quarter of the bound on the sums' own maximum: the
    maximum of those that out_dtype holds, as assert_close judges them (a float16 dbeta whose other
    channels overflow is held to its finite ones: one of 1.6e-9 came out 1.5, from terms of 2^23)."""
    with np.errstate(invalid="ignore", over="ignore"):
        noise = 2.0**-23 * np.sqrt(np.square(terms).sum(axis=(0, 3)))
    ref = np.abs(_expected(ref, out_dtype)).reshape(noise.shape)
    finite = np.isfinite(ref) & np.isfinite(noise)
    return noise[finite].max(initial=0.0) <= 0.25 * TOLERANCE[np.dtype(out_dtype)] * ref[finite].max(initial=0.0)


# ---------------------------------------------------------------------------------------------
# value generators (numpy, from a drawn seed: the falsifying example names the seed)


def _finfo(dtype):
    return ml_dtypes.finfo(np.dtype(dtype))


def _exponent_range(dtype):
    """Spreads 2^e a tensor of dtype can hold with a 1e4 offset and 6 sigma to spare."""
    if np.dtype(dtype) == F16:
        return -24, 2  # float16: subnormal spreads to ~4 (4e4 with the offset)
    return -100, 100


def _bulk(rng, shape, dtype, family, params):
    """offset + spread * N(0, 1) rounded to dtype, per family."""
    lo, hi = _exponent_range(dtype)
    if family == "offset":
        spread = 2.0 ** params["e_small"]
        ratio = params["ratio"]
    elif family == "magnitude":
        spread = 2.0 ** (lo + (hi - lo) * params["u"])
        ratio = params["ratio_small"]
    else:
        spread, ratio = params["spread"], 0.0
    limit = float(_finfo(dtype).max) / 2
    offset = float(np.clip(ratio * spread, -(limit - 8 * spread), limit - 8 * spread))
    return np.asarray(offset + spread * rng.standard_normal(shape)).astype(dtype)


def _sprinkle(rng, a, kinds, count):
    """Put `count` special values of the given kinds at random positions of a (a copy)."""
    a = np.array(a, copy=True)
    if a.size == 0 or count == 0:
        return a
    fi = _finfo(a.dtype)
    table = {
        "subnormal": lambda: float(fi.smallest_subnormal) * rng.integers(1, 64),
        "zero": lambda: 0.0,
        "huge": lambda: float(fi.max) / 4 * rng.uniform(0.5, 1.0),
        "tiny": lambda: float(fi.smallest_normal) * rng.uniform(1, 4),
        "inf": lambda: np.inf,
        "nan": lambda: np.nan,
    }
    flat = a.reshape(-1)
    for i in rng.integers(0, flat.size, count):
        value = table[kinds[int(rng.integers(len(kinds)))]]()
        flat[i] = np.asarray(value * (1 if rng.random() < 0.5 else -1)).astype(a.dtype)
    return a


family_params = st.fixed_dictionaries({
    "e_small": st.integers(-20, 20),
    "ratio": st.sampled_from([0.0, 1.0, -1.0, 10.0, -10.0, 100.0, -100.0, 1e3, -1e3, 1e4, -1e4]),
    "ratio_small": st.sampled_from([0.0, 1.0, -3.0]),
    "u": st.floats(0.0, 1.0),
    "v": st.floats(0.0, 1.0),
    "spread": st.sampled_from([1.0, 3.0, 10.0, 40.0]),
    "specials": st.integers(1, 6),
})


# ---------------------------------------------------------------------------------------------
# shapes


@st.composite
def elementwise_shape(draw, min_rank=0):
    rank = draw(st.integers(min_rank, 8))
    if rank == 0:
        return ()
    inner = draw(st.sampled_from(SMALL_SIZES + LARGE_SIZES) if rank <= 3 else st.sampled_from(SMALL_SIZES))
    outer = draw(st.lists(st.sampled_from([1, 1, 2, 3, 5]), min_size=rank - 1, max_size=rank - 1))
    if draw(st.booleans()) and rank >= 2:  # a thread-split-sized middle dim
        outer[-1] = draw(st.sampled_from([7, 9, 17, 33]))
    shape = (*outer, inner)
    while int(np.prod(shape)) > MAX_ELEMENTS:
        shape = (*[1 if d > 1 else d for d in shape[:-1]], shape[-1])
        if int(np.prod(shape)) > MAX_ELEMENTS:
            shape = shape[:-1] + (SMALL_SIZES[-1],)
    return shape


@st.composite
def broadcast_pair(draw):
    """(gradOutput shape, self shape) broadcasting to a drawn shape: dims dropped from the front or set to 1."""
    out = draw(elementwise_shape())

    def one():
        keep = draw(st.integers(0, len(out)))
        dims = list(out[len(out) - keep:])
        return tuple(1 if d > 1 and draw(st.integers(0, 3)) == 0 else d for d in dims)

    return one(), one()


def fit(N, G, Cg, spatial):
    """(N, G, spatial) made small enough for N * G*Cg * HxW <= MAX_ELEMENTS: fewer groups, and when
    that is not enough one sample and spatial dims of at most 33; where even that is too big, the
    largest dim goes down the small sizes. (Without that last step a rank-8 case such as 17 x 33 x 3^5
    never fitted, and the draw looped for ever: a hung CI run.)"""
    def size():
        return N * G * Cg * int(np.prod(spatial))

    while size() > MAX_ELEMENTS:
        if G == 1 and N == 1 and all(d <= 33 for d in spatial):
            k = int(np.argmax(spatial))
            spatial = (*spatial[:k], max(s for s in [1, *SMALL_SIZES] if s < spatial[k]), *spatial[k + 1:])
            continue
        G = max(1, G // 2)
        if size() > MAX_ELEMENTS:
            N, spatial = 1, tuple(min(d, 33) for d in spatial)
    return N, G, spatial


@st.composite
def group_norm_case(draw, grad):
    """(shape in NCHW terms, G, data_format) with rank 2..8, M = C/G * HxW never 2 (nor 3 for grad)."""
    rank = draw(st.integers(2, 8))
    N = draw(st.sampled_from([1, 2, 3]))
    G = draw(st.sampled_from([1, 2, 3, 4, 8, 32]))
    Cg = draw(st.sampled_from([1, 2, 3, 4, 5, 8, 16, 17]))
    if rank == 2:
        spatial = ()
    else:
        size = draw(st.sampled_from(SMALL_SIZES + [4095, 4097] if rank <= 4 else SMALL_SIZES))
        spatial = [size] + [draw(st.sampled_from([1, 1, 2, 3])) for _ in range(rank - 3)]
        spatial = tuple(draw(st.permutations(spatial)))
    N, G, spatial = fit(N, G, Cg, spatial)
    C = G * Cg
    M = Cg * int(np.prod(spatial))
    assume(M != 2 and not (grad and M == 3))
    return (N, C, *spatial), G, draw(st.sampled_from(["NCHW", "NHWC"]))


def _layout(shape, data_format):
    return shape if data_format == "NCHW" else (shape[0], *shape[2:], shape[1])


def _names(prefix, rank):
    return [f"{prefix}{i}" for i in range(rank)]


# ---------------------------------------------------------------------------------------------
# elementwise: SiluBackward, MishBackward


def _elementwise_inputs(rng, go_shape, x_shape, go_dtype, x_dtype, family, params, root):
    if family == "offset":  # x = offset + spread * N(0, 1), |offset| up to 100, spread 2^-5..2^5
        go = np.asarray(rng.standard_normal(go_shape)).astype(go_dtype)
        x = params["ratio"] / 100.0 + 2.0 ** (params["e_small"] / 4) * rng.standard_normal(x_shape)
        x = np.asarray(x).astype(x_dtype)
    elif family == "magnitude":  # huge or tiny x and gradient (the gradient not far below normal)
        lo, hi = (-14, 12) if np.dtype(go_dtype) == F16 else (-40, 60)
        go = np.asarray(rng.standard_normal(go_shape) * 2.0 ** (lo + (hi - lo) * params["v"])).astype(go_dtype)
        x = _bulk(rng, x_shape, x_dtype, family, params)
    else:
        go = np.asarray(rng.standard_normal(go_shape)).astype(go_dtype)
        x = _bulk(rng, x_shape, x_dtype, family, params)
    x = away_from(x, root)
    if family == "specials":
        n = params["specials"]
        x = _sprinkle(rng, x, ["subnormal", "zero", "huge", "tiny", "inf", "nan"], n)
        go = _sprinkle(rng, go, ["subnormal", "zero", "huge", "tiny", "nan"], n)
        # +-inf gradients only where every x they multiply keeps the factor a normal float
        out_shape = np.broadcast_shapes(go.shape, x.shape)
        if go.size and int(np.prod(out_shape)):
            owner = np.broadcast_to(np.arange(go.size).reshape(go.shape), out_shape).reshape(-1)
            ax = np.nan_to_num(np.abs(np.broadcast_to(x.astype(np.float64), out_shape)).reshape(-1), nan=0.0)
            widest = np.zeros(go.size)
            np.maximum.at(widest, owner, ax)
            flat = go.reshape(-1).copy()
            for i in rng.integers(0, go.size, n // 2 + 1):
                if widest[i] <= 64:
                    flat[i] = np.inf if rng.random() < 0.5 else -np.inf
            go = flat.reshape(go.shape)
    return go, x


def _elementwise_case(op_type, reference, root, go_shape, x_shape, go_dtype, x_dtype, threads, family, params, seed):
    rng = np.random.default_rng(seed)
    go, x = _elementwise_inputs(rng, go_shape, x_shape, go_dtype, x_dtype, family, params, root)
    out_dtype = go_dtype if go_dtype == x_dtype else F32
    with np.errstate(all="ignore"):
        ref = reference(go, x)
        factor = reference(np.ones_like(go, dtype=np.float64), x)
    assume(_resolvable(ref, [factor, go], out_dtype))
    CASES["run"] += 1
    if op_type == "SiluBackward":
        names = {"gradOutput": (go_dtype, _names("d", len(go_shape))), "self": (x_dtype, _names("d", len(x_shape)))}
    else:
        names = {"gradOutput": (go_dtype, _names("g", len(go_shape))), "self": (x_dtype, _names("x", len(x_shape)))}
    out = _run(_session(op_type, names, threads), {"gradOutput": go, "self": x})["gradInput"]
    _check(out, ref, "gradInput", out_dtype)


@pytest.mark.parametrize("N, G, Cg, spatial", [(3, 32, 17, (65, 3, 3, 3, 3, 3)), (3, 32, 17, (4097, 3)), (2, 8, 16, (65, 3, 3, 3, 3, 2)),
                                             (1, 1, 17, (33,) * 6), (3, 4, 5, (7, 2)), (1, 1, 1, ())])
def test_every_group_norm_case_fits(N, G, Cg, spatial):
    """The sizes the strategy draws always come down within MAX_ELEMENTS (the largest ranks and
    sizes included), and a case that fits is left as drawn."""
    n, g, dims = fit(N, G, Cg, spatial)
    assert n * g * Cg * int(np.prod(dims)) <= MAX_ELEMENTS and len(dims) == len(spatial)
    assert 1 <= n <= N and 1 <= g <= G and all(1 <= d <= s for d, s in zip(dims, spatial))
    if N * G * Cg * int(np.prod(spatial)) <= MAX_ELEMENTS:
        assert (n, g, dims) == (N, G, spatial)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("T", DTYPES, ids=lambda d: d.name)
def test_silu_backward(T, family):
    @settings(max_examples=EXAMPLES["SiluBackward"], **SETTINGS)
    @given(shape=elementwise_shape(), threads=st.sampled_from([1, 2]), params=family_params, seed=st.integers(0, 2**32 - 1))
    def prop(shape, threads, params, seed):
        _elementwise_case("SiluBackward", ops.reference.silu_backward, SILU_GRAD_ROOT, shape, shape, T, T, threads,
                          family, params, seed)

    prop()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("go_dtype, x_dtype", PAIRS, ids=lambda d: d.name)
def test_mish_backward(go_dtype, x_dtype, family):
    @settings(max_examples=EXAMPLES["MishBackward"], **SETTINGS)
    @given(shapes=broadcast_pair(), threads=st.sampled_from([1, 2]), params=family_params, seed=st.integers(0, 2**32 - 1))
    def prop(shapes, threads, params, seed):
        go_shape, x_shape = shapes
        assume(int(np.prod(np.broadcast_shapes(go_shape, x_shape))) > 0)
        _elementwise_case("MishBackward", ops.reference.mish_backward, MISH_GRAD_ROOT, go_shape, x_shape, go_dtype, x_dtype,
                          threads, family, params, seed)

    prop()


# ---------------------------------------------------------------------------------------------
# GroupNormSwish, GroupNormSwishGrad


def _group_norm_x(rng, shape, T, family, params):
    x = _bulk(rng, shape, T, family, params)
    if family == "specials":
        x = _bulk(rng, shape, T, "offset", {**params, "e_small": 0, "ratio": 1.0})
        x = _sprinkle(rng, x, ["subnormal", "zero", "tiny", "inf", "nan"], params["specials"] % 3)
    return x


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("T, U", PAIRS, ids=lambda d: d.name)
def test_group_norm_swish(T, U, family):
    @settings(max_examples=EXAMPLES["GroupNormSwish"], **SETTINGS)
    @given(case=group_norm_case(grad=False), threads=st.sampled_from([1, 2]), params=family_params,
           eps=st.sampled_from([1e-5, 1e-5, 1e-3, 0.0]), swish_scale=st.sampled_from([1.0, 1.702, -0.5, 0.0]),
           activate_swish=st.sampled_from([1, 1, 0]), seed=st.integers(0, 2**32 - 1))
    def prop(case, threads, params, eps, swish_scale, activate_swish, seed):
        CASES["run"] += 1
        shape, G, data_format = case
        rng = np.random.default_rng(seed)
        x = _group_norm_x(rng, _layout(shape, data_format), T, family, params)
        gamma = np.asarray(rng.standard_normal(shape[1]) * 1.5).astype(U)
        beta = np.asarray(rng.standard_normal(shape[1])).astype(U)
        attrs = dict(num_groups=G, eps=eps, swish_scale=swish_scale, activate_swish=activate_swish, data_format=data_format)
        dims = _names("d", len(shape))
        c = dims[1] if data_format == "NCHW" else dims[-1]
        session = _session("GroupNormSwish", {"x": (T, dims), "gamma": (U, [c]), "beta": (U, [c])}, threads, **attrs)
        got = _run(session, {"x": x, "gamma": gamma, "beta": beta})
        ref = ops.reference.group_norm_swish(x, gamma, beta, G, eps=eps, swish_scale=swish_scale,
                                             activate_swish=bool(activate_swish), data_format=data_format)
        for name, expected, dtype in zip(("y", "mean", "rstd"), ref, (T, U, U)):
            _check(got[name], expected, name, dtype)

    prop()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("T, U", PAIRS, ids=lambda d: d.name)
def test_group_norm_swish_grad(T, U, family):
    @settings(max_examples=EXAMPLES["GroupNormSwishGrad"], **SETTINGS)
    @given(case=group_norm_case(grad=True), threads=st.sampled_from([1, 2]), params=family_params,
           swish_scale=st.sampled_from([1.0, 1.702, -0.5]), flags=st.sampled_from([(1, 1), (1, 1), (0, 1), (1, 0)]),
           dy_exponent=st.integers(-30, 30), seed=st.integers(0, 2**32 - 1))
    # drawn in a CI run (bfloat16 x, float statistics, magnitude): dbeta 3.0745 where its 24582 terms
    # sum to 17754 in magnitude; 4096-value float blocks of the sums came out 1.3e-4 off (AVX2)
    @example(case=((2, 2, 4097, 3), 2, "NCHW"), threads=1,
             params={"e_small": 0, "ratio": 0.0, "ratio_small": -3.0, "u": 0.5, "v": 0.0, "spread": 1.0, "specials": 1},
             swish_scale=1.702, flags=(1, 1), dy_exponent=0, seed=16777215)
    def prop(case, threads, params, swish_scale, flags, dy_exponent, seed):
        CASES["run"] += 1
        shape, G, data_format = case
        rng = np.random.default_rng(seed)
        layout = _layout(shape, data_format)
        x = _group_norm_x(rng, layout, T, family, params)
        gamma = np.asarray(rng.standard_normal(shape[1]) * 1.5).astype(U)
        beta = np.asarray(rng.standard_normal(shape[1])).astype(U)
        with np.errstate(all="ignore"):  # the forward hands mean and rstd over in U
            _, mean, rstd = ops.reference.group_norm_swish(x, gamma, beta, G, data_format=data_format)
            mean, rstd = mean.astype(U), rstd.astype(U)
        dy_scale = 2.0 ** (dy_exponent if family == "magnitude" and T != F16 else 0)
        dy = np.asarray(rng.standard_normal(layout) * dy_scale).astype(T)
        if family == "specials":
            dy = _sprinkle(rng, dy, ["subnormal", "zero", "tiny", "nan"], params["specials"] % 3)
        dgamma_flag, dbeta_flag = flags
        attrs = dict(num_groups=G, swish_scale=swish_scale, dgamma_is_require=dgamma_flag, dbeta_is_require=dbeta_flag,
                     data_format=data_format)
        dims = _names("d", len(shape))
        c = dims[1] if data_format == "NCHW" else dims[-1]
        inputs = {"dy": (T, dims), "mean": (U, ["n", "g"]), "rstd": (U, ["n", "g"]), "x": (T, dims), "gamma": (U, [c]),
                  "beta": (U, [c])}
        feeds = {"dy": dy, "mean": mean, "rstd": rstd, "x": x, "gamma": gamma, "beta": beta}
        with np.errstate(all="ignore"):
            ref = ops.reference.group_norm_swish_grad(*feeds.values(), G, swish_scale=swish_scale, data_format=data_format,
                                                      dgamma_is_require=bool(dgamma_flag), dbeta_is_require=bool(dbeta_flag))
        got = _run(_session("GroupNormSwishGrad", inputs, threads, **attrs), feeds)
        g, xhat = ops.reference._grad_terms(*feeds.values(), G, swish_scale, data_format)[:2]
        terms = {"dx": None, "dgamma": g * xhat if dgamma_flag else None, "dbeta": g if dbeta_flag else None}
        for name, expected, dtype in zip(("dx", "dgamma", "dbeta"), ref, (T, U, U)):
            if not _resolvable(expected, (), dtype):  # a whole result below 2^-120 (module doc): dx of
                continue  # 3.5e-41 came out 0.5% off through float32 subnormals, whatever the kernel
            if terms[name] is not None and not _sum_resolvable(terms[name], expected, dtype):
                CASES["sums unjudged"] += 1
                continue  # (module doc) seen: dbeta 0.0352 of 585 terms (mean |g| 0.47), noise 2e-6 > 3.5e-7
            _check(got[name], expected, name, dtype)

    prop()


# ---------------------------------------------------------------------------------------------
# the cases the lead named, pinned (they must pass once the kernel is fixed)


@pytest.mark.parametrize("shape, G, mean", [((3, 1, 6), 1, 100.0), ((2, 64, 32, 32), 32, 1000.0)], ids=str)
@pytest.mark.parametrize("threads", [1, 2])
def test_group_norm_swish_large_mean_small_spread(shape, G, mean, threads):
    CASES["run"] += 1
    rng = np.random.default_rng(0)
    x = np.asarray(mean + rng.standard_normal(shape)).astype(F32)
    gamma, beta = rng.standard_normal(shape[1]).astype(F32), rng.standard_normal(shape[1]).astype(F32)
    dims = _names("d", len(shape))
    session = _session("GroupNormSwish", {"x": (F32, dims), "gamma": (F32, [dims[1]]), "beta": (F32, [dims[1]])}, threads,
                       num_groups=G, eps=1e-5, swish_scale=1.0, activate_swish=1, data_format="NCHW")
    got = _run(session, {"x": x, "gamma": gamma, "beta": beta})
    for name, expected in zip(("y", "mean", "rstd"), ops.reference.group_norm_swish(x, gamma, beta, G)):
        _check(got[name], expected, name, F32)
