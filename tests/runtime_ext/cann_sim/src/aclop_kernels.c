/* The ai.onnx kernels onnxruntime-cann 1.24.4 sends to aclopCompileAndExecute in single-operator
 * mode, as far as the tests' graphs need them, with the CANN op names, inputs and attributes the
 * EP uses (onnxruntime/core/providers/cann/). Values go through double and are rounded once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aclop.h"
#include "dtype.h"

#define ACL_ERROR_OP_OUTPUT_NOT_MATCH 100022

static int same_dims(const Arg *a, const int64_t *dims, int rank) {
    if (a->rank != rank) return 0;
    for (int i = 0; i < rank; i++)
        if (a->dims[i] != dims[i]) return 0;
    return 1;
}

static void dims_str(const Arg *a, char *s, size_t n) {
    size_t k = (size_t)snprintf(s, n, "[");
    for (int i = 0; i < a->rank && k < n; i++) k += (size_t)snprintf(s + k, n - k, "%s%lld", i ? "," : "", (long long)a->dims[i]);
    if (k < n) snprintf(s + k, n - k, "]");
}

static aclError arity(const OpCall *c, int nin_min, int nin_max, int nout) {
    if (c->nin < nin_min || c->nin > nin_max || c->nout != nout)
        return op_fail(c, ACL_ERROR_OP_INPUT_NOT_MATCH, "%d inputs and %d outputs (expects %d-%d and %d)", c->nin, c->nout, nin_min, nin_max, nout);
    for (int i = 0; i < nin_min; i++)
        if (!c->in[i].present) return op_fail(c, ACL_ERROR_OP_INPUT_NOT_MATCH, "input %d is missing", i);
    return 0;
}

static aclError expect_out(const OpCall *c, const Arg *y, const int64_t *dims, int rank, int dtype) {
    char got[256];
    if (y->dtype != dtype)
        return op_fail(c, ACL_ERROR_OP_OUTPUT_NOT_MATCH, "output dtype %s, expected %s", dtype_name(y->dtype), dtype_name(dtype));
    if (!same_dims(y, dims, rank)) {
        Arg want = {.rank = rank};
        char w[256];
        memcpy(want.dims, dims, (size_t)rank * sizeof *dims);
        dims_str(y, got, sizeof got);
        dims_str(&want, w, sizeof w);
        return op_fail(c, ACL_ERROR_OP_OUTPUT_NOT_MATCH, "output shape %s, expected %s", got, w);
    }
    return 0;
}

static int supported_dtype(int dt) {
    return dt == ACL_FLOAT || dt == ACL_FLOAT16 || dt == ACL_BF16 || dt == ACL_DOUBLE || dt == ACL_INT32 || dt == ACL_INT64 ||
           dt == ACL_INT8 || dt == ACL_UINT8 || dt == ACL_INT16 || dt == ACL_UINT16 || dt == ACL_UINT32 || dt == ACL_UINT64 ||
           dt == ACL_BOOL;
}

/* ---------------------------------------------------------------- elementwise */

static double relu(double x) { return x > 0 ? x : (x != x ? x : 0.0); }
static double neg(double x) { return -x; }
static double reciprocal(double x) { return 1.0 / x; }

typedef struct { const char *name; double (*f)(double); int64_t (*fi)(int64_t); } Unary;
static int64_t negi(int64_t x) { return -x; }
static int64_t absi(int64_t x) { return x < 0 ? -x : x; }
static int64_t relui(int64_t x) { return x > 0 ? x : 0; }
static const Unary k_unary[] = {
    {"Abs", fabs, absi}, {"Neg", neg, negi}, {"Relu", relu, relui}, {"Floor", floor, NULL}, {"Ceil", ceil, NULL},
    {"Reciprocal", reciprocal, NULL}, {"Sqrt", sqrt, NULL}, {"Erf", erf, NULL}, {"Round", nearbyint, NULL},
    {"Sin", sin, NULL}, {"Cos", cos, NULL}, {"Log", NULL, NULL}, {"Exp", NULL, NULL},
};

static aclError k_unary_op(const OpCall *c) {
    aclError r = arity(c, 1, 1, 1);
    if (r) return r;
    const Arg *x = &c->in[0], *y = &c->out[0];
    if ((r = expect_out(c, y, x->dims, x->rank, x->dtype))) return r;
    const Unary *u = NULL;
    for (size_t i = 0; i < sizeof k_unary / sizeof *k_unary; i++)
        if (!strcmp(k_unary[i].name, c->op)) u = &k_unary[i];
    int64_t n = numel(x->dims, x->rank);
    if (!is_float_type(x->dtype)) {
        if (!u || !u->fi) return op_fail(c, ACL_ERROR_UNSUPPORTED_DATA_TYPE, "dtype %s is not supported", dtype_name(x->dtype));
        for (int64_t i = 0; i < n; i++) sti(y->data, i, y->dtype, u->fi(ldi(x->data, i, x->dtype)));
        return 0;
    }
    /* Log / Exp: y = log_base(scale * x + shift), base^(scale * x + shift); base -1 means e */
    double base = attr_float(c->attr, "base", -1.0f), scale = attr_float(c->attr, "scale", 1.0f), shift = attr_float(c->attr, "shift", 0.0f);
    int is_log = !strcmp(c->op, "Log"), is_exp = !strcmp(c->op, "Exp");
    for (int64_t i = 0; i < n; i++) {
        double v = ld(x->data, i, x->dtype), out;
        if (is_log) out = log(scale * v + shift) / (base == -1.0 ? 1.0 : log(base));
        else if (is_exp) out = base == -1.0 ? exp(scale * v + shift) : pow(base, scale * v + shift);
        else out = u->f(v);
        st(y->data, i, y->dtype, out);
    }
    return 0;
}

static aclError k_binary(const OpCall *c) {
    aclError r = arity(c, 2, 2, 1);
    if (r) return r;
    const Arg *a = &c->in[0], *b = &c->in[1], *y = &c->out[0];
    if (a->dtype != b->dtype || !supported_dtype(a->dtype))
        return op_fail(c, ACL_ERROR_UNSUPPORTED_DATA_TYPE, "input dtypes %s and %s", dtype_name(a->dtype), dtype_name(b->dtype));
    int64_t od[MAX_RANK] = {0};
    int R;
    if (broadcast_shape(a->dims, a->rank, b->dims, b->rank, od, &R)) return op_fail(c, ACL_ERROR_OP_INPUT_NOT_MATCH, "shapes do not broadcast");
    if ((r = expect_out(c, y, od, R, a->dtype))) return r;
    int64_t n = numel(od, R), sa[MAX_RANK], sb[MAX_RANK];
    int64_t *ia = malloc((size_t)(n ? n : 1) * 8), *ib = malloc((size_t)(n ? n : 1) * 8);
    broadcast_strides(a->dims, a->rank, od, R, sa);
    broadcast_strides(b->dims, b->rank, od, R, sb);
    strided_indices(od, R, sa, 0, ia);
    strided_indices(od, R, sb, 0, ib);
    char op = c->op[0];  /* Add Sub Mul Div */
    if (is_float_type(a->dtype)) {
        for (int64_t i = 0; i < n; i++) {
            double u = ld(a->data, ia[i], a->dtype), v = ld(b->data, ib[i], b->dtype);
            st(y->data, i, y->dtype, op == 'A' ? u + v : op == 'S' ? u - v : op == 'M' ? u * v : u / v);
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            int64_t u = ldi(a->data, ia[i], a->dtype), v = ldi(b->data, ib[i], b->dtype);
            sti(y->data, i, y->dtype, op == 'A' ? u + v : op == 'S' ? u - v : op == 'M' ? u * v : v ? u / v : 0);
        }
    }
    free(ia);
    free(ib);
    return 0;
}

/* BroadcastToD(x) with attr shape: numpy broadcasting of x to shape. */
static aclError k_broadcast_to(const OpCall *c) {
    aclError r = arity(c, 1, 1, 1);
    if (r) return r;
    const Arg *x = &c->in[0], *y = &c->out[0];
    int R;
    const int64_t *shape = attr_list(c->attr, "shape", &R);
    if (!shape || R > MAX_RANK) return op_fail(c, ACL_ERROR_OP_ATTR_NOT_MATCH, "attr shape missing");
    int64_t od[MAX_RANK];
    int R2;
    if (broadcast_shape(x->dims, x->rank, shape, R, od, &R2) || R2 != R || memcmp(od, shape, (size_t)R * 8))
        return op_fail(c, ACL_ERROR_OP_INPUT_NOT_MATCH, "input does not broadcast to attr shape");
    if ((r = expect_out(c, y, shape, R, x->dtype))) return r;
    int64_t n = numel(shape, R), s[MAX_RANK], *ix = malloc((size_t)(n ? n : 1) * 8);
    broadcast_strides(x->dims, x->rank, shape, R, s);
    strided_indices(shape, R, s, 0, ix);
    size_t es = dtype_size(x->dtype);
    for (int64_t i = 0; i < n; i++) memcpy((char *)y->data + i * (int64_t)es, (const char *)x->data + ix[i] * (int64_t)es, es);
    free(ix);
    return 0;
}

static aclError k_cast(const OpCall *c) {
    aclError r = arity(c, 1, 1, 1);
    if (r) return r;
    const Arg *x = &c->in[0], *y = &c->out[0];
    int64_t dst = attr_int(c->attr, "dst_type", -2);
    if (dst != y->dtype) return op_fail(c, ACL_ERROR_OP_ATTR_NOT_MATCH, "dst_type %lld but the output is %s", (long long)dst, dtype_name(y->dtype));
    if (!supported_dtype(x->dtype) || !supported_dtype(y->dtype)) return op_fail(c, ACL_ERROR_UNSUPPORTED_DATA_TYPE, "cast %s -> %s", dtype_name(x->dtype), dtype_name(y->dtype));
    if ((r = expect_out(c, y, x->dims, x->rank, y->dtype))) return r;
    int64_t n = numel(x->dims, x->rank);
    for (int64_t i = 0; i < n; i++) {
        if (is_float_type(x->dtype) || is_float_type(y->dtype) || y->dtype == ACL_BOOL) st(y->data, i, y->dtype, ld(x->data, i, x->dtype));
        else sti(y->data, i, y->dtype, ldi(x->data, i, x->dtype));
    }
    return 0;
}

static aclError k_transpose(const OpCall *c) {
    aclError r = arity(c, 1, 1, 1);
    if (r) return r;
    const Arg *x = &c->in[0], *y = &c->out[0];
    int np;
    const int64_t *perm = attr_list(c->attr, "perm", &np);
    if (np != x->rank) return op_fail(c, ACL_ERROR_OP_ATTR_NOT_MATCH, "perm has %d entries for rank %d", np, x->rank);
    int64_t od[MAX_RANK], in_strides[MAX_RANK], s[MAX_RANK], seen = 0;
    for (int i = x->rank - 1, acc = 1; i >= 0; i--) { in_strides[i] = acc; acc *= (int)x->dims[i]; }
    for (int i = 0; i < np; i++) {
        if (perm[i] < 0 || perm[i] >= np || (seen >> perm[i]) & 1) return op_fail(c, ACL_ERROR_OP_ATTR_NOT_MATCH, "perm is not a permutation");
        seen |= 1LL << perm[i];
        od[i] = x->dims[perm[i]];
        s[i] = in_strides[perm[i]];
    }
    if ((r = expect_out(c, y, od, np, x->dtype))) return r;
    int64_t n = numel(od, np), *ix = malloc((size_t)(n ? n : 1) * 8);
    strided_indices(od, np, s, 0, ix);
    size_t es = dtype_size(x->dtype);
    for (int64_t i = 0; i < n; i++) memcpy((char *)y->data + i * (int64_t)es, (const char *)x->data + ix[i] * (int64_t)es, es);
    free(ix);
    return 0;
}

/* ---------------------------------------------------------------- matrix products */

/* BatchMatMul(x1, x2), attrs adj_x1/adj_x2, numpy matmul semantics (1-D operands, batch broadcast). */
static aclError k_batch_matmul(const OpCall *c) {
    aclError r = arity(c, 2, 2, 1);
    if (r) return r;
    const Arg *a = &c->in[0], *b = &c->in[1], *y = &c->out[0];
    if (a->dtype != b->dtype || !supported_dtype(a->dtype)) return op_fail(c, ACL_ERROR_UNSUPPORTED_DATA_TYPE, "dtypes %s, %s", dtype_name(a->dtype), dtype_name(b->dtype));
    if (a->rank < 1 || b->rank < 1) return op_fail(c, ACL_ERROR_OP_INPUT_NOT_MATCH, "rank 0 operand");
    int ta = (int)attr_int(c->attr, "adj_x1", 0), tb = (int)attr_int(c->attr, "adj_x2", 0);
    /* as matrices: A (.., M, K), B (.., K, N) */
    int64_t ad[MAX_RANK + 1], bd[MAX_RANK + 1];
    int ra = a->rank, rb = b->rank;
    memcpy(ad, a->dims, (size_t)ra * 8);
    memcpy(bd, b->dims, (size_t)rb * 8);
    if (ra == 1) { ad[1] = ad[0]; ad[0] = 1; ra = 2; ta = 0; }
    if (rb == 1) { bd[1] = 1; rb = 2; tb = 0; }
    int64_t M = ta ? ad[ra - 1] : ad[ra - 2], K = ta ? ad[ra - 2] : ad[ra - 1];
    int64_t K2 = tb ? bd[rb - 1] : bd[rb - 2], N = tb ? bd[rb - 2] : bd[rb - 1];
    if (K != K2) return op_fail(c, ACL_ERROR_OP_INPUT_NOT_MATCH, "inner dimensions %lld and %lld differ", (long long)K, (long long)K2);
    int64_t batch[MAX_RANK];
    int Rb;
    if (broadcast_shape(ad, ra - 2, bd, rb - 2, batch, &Rb)) return op_fail(c, ACL_ERROR_OP_INPUT_NOT_MATCH, "batch dimensions do not broadcast");
    int64_t od[MAX_RANK + 2];
    int R = 0;
    for (int i = 0; i < Rb; i++) od[R++] = batch[i];
    if (a->rank > 1) od[R++] = M;
    if (b->rank > 1) od[R++] = N;
    if ((r = expect_out(c, y, od, R, a->dtype))) return r;
    int64_t nb = numel(batch, Rb), sa[MAX_RANK], sb[MAX_RANK];
    int64_t *ia = malloc((size_t)(nb ? nb : 1) * 8), *ib = malloc((size_t)(nb ? nb : 1) * 8);
    broadcast_strides(ad, ra - 2, batch, Rb, sa);
    broadcast_strides(bd, rb - 2, batch, Rb, sb);
    strided_indices(batch, Rb, sa, 0, ia);
    strided_indices(batch, Rb, sb, 0, ib);
    for (int64_t p = 0; p < nb; p++) {
        int64_t abase = ia[p] * M * K, bbase = ib[p] * K * N;
        for (int64_t m = 0; m < M; m++)
            for (int64_t nn = 0; nn < N; nn++) {
                double acc = 0;
                for (int64_t k = 0; k < K; k++)
                    acc += ld(a->data, abase + (ta ? k * M + m : m * K + k), a->dtype) * ld(b->data, bbase + (tb ? nn * K + k : k * N + nn), b->dtype);
                st(y->data, (p * M + m) * N + nn, y->dtype, acc);
            }
    }
    free(ia);
    free(ib);
    return 0;
}

/* GEMM(A, B, C, alpha, beta), attrs transpose_a/transpose_b: alpha * A'B' + beta * C. */
static aclError k_gemm(const OpCall *c) {
    aclError r = arity(c, 5, 5, 1);
    if (r) return r;
    const Arg *a = &c->in[0], *b = &c->in[1], *cc = &c->in[2], *y = &c->out[0];
    if (a->rank != 2 || b->rank != 2) return op_fail(c, ACL_ERROR_OP_INPUT_NOT_MATCH, "A and B must be 2-D");
    int ta = (int)attr_int(c->attr, "transpose_a", 0), tb = (int)attr_int(c->attr, "transpose_b", 0);
    int64_t M = ta ? a->dims[1] : a->dims[0], K = ta ? a->dims[0] : a->dims[1];
    int64_t K2 = tb ? b->dims[1] : b->dims[0], N = tb ? b->dims[0] : b->dims[1];
    if (K != K2) return op_fail(c, ACL_ERROR_OP_INPUT_NOT_MATCH, "inner dimensions %lld and %lld differ", (long long)K, (long long)K2);
    int64_t od[2] = {M, N}, bc[2], s[2];
    int R;
    if ((r = expect_out(c, y, od, 2, a->dtype))) return r;
    if (broadcast_shape(cc->dims, cc->rank, od, 2, bc, &R) || R != 2 || bc[0] != M || bc[1] != N)
        return op_fail(c, ACL_ERROR_OP_INPUT_NOT_MATCH, "C does not broadcast to (M, N)");
    broadcast_strides(cc->dims, cc->rank, od, 2, s);
    double alpha = ld(c->in[3].data, 0, c->in[3].dtype), beta = ld(c->in[4].data, 0, c->in[4].dtype);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++)
                acc += ld(a->data, ta ? k * M + m : m * K + k, a->dtype) * ld(b->data, tb ? n * K + k : k * N + n, b->dtype);
            st(y->data, m * N + n, y->dtype, alpha * acc + beta * ld(cc->data, m * s[0] + n * s[1], cc->dtype));
        }
    return 0;
}

/* Conv2D(x NCHW, filter (M, C/group, kH, kW), bias?), attrs strides/dilations (N, C, H, W order),
 * pads, group. CANN's Conv2D reads pads as (top, bottom, left, right). */
static aclError k_conv2d(const OpCall *c) {
    aclError r = arity(c, 2, 3, 1);
    if (r) return r;
    const Arg *x = &c->in[0], *w = &c->in[1], *bias = c->nin > 2 && c->in[2].present ? &c->in[2] : NULL, *y = &c->out[0];
    if (x->rank != 4 || w->rank != 4) return op_fail(c, ACL_ERROR_OP_INPUT_NOT_MATCH, "the simulated Conv2D takes 4-D x and filter (rank %d, %d)", x->rank, w->rank);
    if (x->dtype != w->dtype || !is_float_type(x->dtype)) return op_fail(c, ACL_ERROR_UNSUPPORTED_DATA_TYPE, "dtypes %s, %s", dtype_name(x->dtype), dtype_name(w->dtype));
    int ns, np, nd;
    const int64_t *strides = attr_list(c->attr, "strides", &ns), *pads = attr_list(c->attr, "pads", &np), *dil = attr_list(c->attr, "dilations", &nd);
    int64_t group = attr_int(c->attr, "group", 1);
    if (ns != 4 || np != 4 || nd != 4) return op_fail(c, ACL_ERROR_OP_ATTR_NOT_MATCH, "strides/pads/dilations need 4 values (%d, %d, %d)", ns, np, nd);
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int64_t M = w->dims[0], Cg = w->dims[1], kH = w->dims[2], kW = w->dims[3];
    if (group < 1 || C != Cg * group || M % group) return op_fail(c, ACL_ERROR_OP_INPUT_NOT_MATCH, "channels %lld, filter channels %lld, group %lld", (long long)C, (long long)Cg, (long long)group);
    int64_t sh = strides[2], sw = strides[3], dh = dil[2], dw = dil[3], pt = pads[0], pb = pads[1], pl = pads[2], pr = pads[3];
    int64_t OH = (H + pt + pb - dh * (kH - 1) - 1) / sh + 1, OW = (W + pl + pr - dw * (kW - 1) - 1) / sw + 1;
    int64_t od[4] = {N, M, OH, OW};
    if ((r = expect_out(c, y, od, 4, x->dtype))) return r;
    if (bias && numel(bias->dims, bias->rank) != M) return op_fail(c, ACL_ERROR_OP_INPUT_NOT_MATCH, "bias has %lld values for %lld filters", (long long)numel(bias->dims, bias->rank), (long long)M);
    int64_t Mg = M / group;
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++) {
            int64_t g = m / Mg;
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double acc = bias ? ld(bias->data, m, bias->dtype) : 0.0;
                    for (int64_t ci = 0; ci < Cg; ci++)
                        for (int64_t i = 0; i < kH; i++) {
                            int64_t ih = oh * sh - pt + i * dh;
                            if (ih < 0 || ih >= H) continue;
                            for (int64_t j = 0; j < kW; j++) {
                                int64_t iw = ow * sw - pl + j * dw;
                                if (iw < 0 || iw >= W) continue;
                                acc += ld(x->data, ((n * C + g * Cg + ci) * H + ih) * W + iw, x->dtype) * ld(w->data, ((m * Cg + ci) * kH + i) * kW + j, w->dtype);
                            }
                        }
                    st(y->data, ((n * M + m) * OH + oh) * OW + ow, y->dtype, acc);
                }
        }
    return 0;
}

/* Flatten(x), attr axis (as the node has it, negative allowed): (prod dims[:axis], prod dims[axis:]),
 * the same bytes. */
static aclError k_flatten(const OpCall *c) {
    aclError r = arity(c, 1, 1, 1);
    if (r) return r;
    const Arg *x = &c->in[0], *y = &c->out[0];
    int64_t axis = attr_int(c->attr, "axis", 1);
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis > x->rank) return op_fail(c, ACL_ERROR_OP_ATTR_NOT_MATCH, "axis %lld for rank %d", (long long)attr_int(c->attr, "axis", 1), x->rank);
    if (!supported_dtype(x->dtype)) return op_fail(c, ACL_ERROR_UNSUPPORTED_DATA_TYPE, "dtype %s", dtype_name(x->dtype));
    int64_t od[2] = {numel(x->dims, (int)axis), numel(x->dims + axis, x->rank - (int)axis)};
    if ((r = expect_out(c, y, od, 2, x->dtype))) return r;
    memmove(y->data, x->data, x->size < y->size ? x->size : y->size);
    return 0;
}

/* AvgPoolV2(x NCHW), as CANN defines it: attrs ksize and strides (N, C, H, W order), pads (top,
 * bottom, left, right), padding_mode CALCULATED | VALID | SAME, global_pooling, ceil_mode, and
 * exclusive (true: divide by the window's elements inside x; false: by those inside the padded x). */
static aclError k_avg_pool_v2(const OpCall *c) {
    aclError r = arity(c, 1, 1, 1);
    if (r) return r;
    const Arg *x = &c->in[0], *y = &c->out[0];
    if (x->rank != 4) return op_fail(c, ACL_ERROR_OP_INPUT_NOT_MATCH, "the simulated AvgPoolV2 takes 4-D NCHW x (rank %d)", x->rank);
    if (!is_float_type(x->dtype)) return op_fail(c, ACL_ERROR_UNSUPPORTED_DATA_TYPE, "dtype %s", dtype_name(x->dtype));
    if (strcmp(attr_str(c->attr, "data_format", "NCHW"), "NCHW")) return op_fail(c, ACL_ERROR_OP_ATTR_NOT_MATCH, "data_format must be NCHW");
    int nk, ns, np;
    const int64_t *ksize = attr_list(c->attr, "ksize", &nk), *strides = attr_list(c->attr, "strides", &ns), *pads = attr_list(c->attr, "pads", &np);
    const char *mode = attr_str(c->attr, "padding_mode", "CALCULATED");
    int global = (int)attr_int(c->attr, "global_pooling", 0), ceil_mode = (int)attr_int(c->attr, "ceil_mode", 0);
    int exclusive = (int)attr_int(c->attr, "exclusive", 1);
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int64_t kh, kw, sh, sw, pt = 0, pb = 0, pl = 0, pr = 0, OH, OW;
    if (global) {
        kh = H, kw = W, sh = sw = 1;
        OH = OW = 1;
    } else {
        if (nk != 4 || ns != 4) return op_fail(c, ACL_ERROR_OP_ATTR_NOT_MATCH, "ksize and strides need 4 values (%d, %d)", nk, ns);
        if (ksize[0] != 1 || ksize[1] != 1 || strides[0] != 1 || strides[1] != 1)
            return op_fail(c, ACL_ERROR_OP_ATTR_NOT_MATCH, "ksize and strides must be 1 on N and C");
        kh = ksize[2], kw = ksize[3], sh = strides[2], sw = strides[3];
        if (kh < 1 || kw < 1 || sh < 1 || sw < 1) return op_fail(c, ACL_ERROR_OP_ATTR_NOT_MATCH, "ksize and strides must be positive");
        if (!strcmp(mode, "CALCULATED")) {
            if (np != 4) return op_fail(c, ACL_ERROR_OP_ATTR_NOT_MATCH, "pads needs 4 values (%d)", np);
            pt = pads[0], pb = pads[1], pl = pads[2], pr = pads[3];
            int64_t eh = H + pt + pb - kh, ew = W + pl + pr - kw;
            OH = (ceil_mode ? (eh + sh - 1) / sh : eh / sh) + 1;
            OW = (ceil_mode ? (ew + sw - 1) / sw : ew / sw) + 1;
        } else if (!strcmp(mode, "VALID")) {
            OH = (H - kh + sh) / sh, OW = (W - kw + sw) / sw;
        } else if (!strcmp(mode, "SAME")) {
            OH = (H + sh - 1) / sh, OW = (W + sw - 1) / sw;
            int64_t th = (OH - 1) * sh + kh - H, tw = (OW - 1) * sw + kw - W;
            th = th > 0 ? th : 0, tw = tw > 0 ? tw : 0;
            pt = th / 2, pb = th - pt, pl = tw / 2, pr = tw - pl;
        } else {
            return op_fail(c, ACL_ERROR_OP_ATTR_NOT_MATCH, "padding_mode %s", mode);
        }
    }
    int64_t od[4] = {N, C, OH, OW};
    if ((r = expect_out(c, y, od, 4, x->dtype))) return r;
    for (int64_t nc = 0; nc < N * C; nc++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t h0 = oh * sh - pt, w0 = ow * sw - pl, inside = 0, padded = 0;
                double acc = 0;
                for (int64_t i = h0; i < h0 + kh; i++)
                    for (int64_t j = w0; j < w0 + kw; j++) {
                        if (i < -pt || i >= H + pb || j < -pl || j >= W + pr) continue;
                        padded++;
                        if (i < 0 || i >= H || j < 0 || j >= W) continue;
                        inside++;
                        acc += ld(x->data, (nc * H + i) * W + j, x->dtype);
                    }
                int64_t count = exclusive ? inside : padded;
                st(y->data, (nc * OH + oh) * OW + ow, y->dtype, count ? acc / (double)count : 0.0);
            }
    return 0;
}

/* ---------------------------------------------------------------- the table */

static const struct { const char *op; Kernel k; } k_table[] = {
    {"Add", k_binary}, {"Sub", k_binary}, {"Mul", k_binary}, {"Div", k_binary},
    {"Abs", k_unary_op}, {"Neg", k_unary_op}, {"Relu", k_unary_op}, {"Floor", k_unary_op}, {"Ceil", k_unary_op},
    {"Reciprocal", k_unary_op}, {"Sqrt", k_unary_op}, {"Erf", k_unary_op}, {"Round", k_unary_op}, {"Sin", k_unary_op},
    {"Cos", k_unary_op}, {"Log", k_unary_op}, {"Exp", k_unary_op},
    {"BroadcastToD", k_broadcast_to}, {"Cast", k_cast}, {"TransposeD", k_transpose},
    {"BatchMatMul", k_batch_matmul}, {"GEMM", k_gemm}, {"Conv2D", k_conv2d}, {"Flatten", k_flatten},
    {"AvgPoolV2", k_avg_pool_v2},
};

Kernel aclop_kernel(const char *op_type) {
    for (size_t i = 0; i < sizeof k_table / sizeof *k_table; i++)
        if (!strcmp(k_table[i].op, op_type)) return k_table[i].k;
    return NULL;
}

int aclop_host_scalar_input(const char *op_type, int index) {
    /* gemm.cc: &alpha_, &beta_ (float members of the kernel); dropout.cc: &ratio_data, &train_mode */
    if (!strcmp(op_type, "GEMM")) return index == 3 || index == 4;
    if (!strcmp(op_type, "Dropout")) return index == 1 || index == 2;
    return 0;
}
