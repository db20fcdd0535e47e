/* libopapi.so of the simulated CANN runtime: the four aclnn ops of the seeds, two-phase.
 *
 * aclnnXGetWorkspaceSize checks the documented argument rules (ACLNN_ERR_PARAM_NULLPTR 161001,
 * ACLNN_ERR_PARAM_INVALID 161002, with a message for aclGetRecentErrMsg) and returns a nonzero
 * workspace size and a fresh executor holding a copy of every tensor view. aclnnX checks the
 * protocol (the executor came from the matching GetWorkspaceSize and is used once, the workspace
 * is live device memory of at least the size asked for, the stream is a created one, every
 * tensor's extent lies in a live device allocation), scribbles over the workspace, and computes
 * from SPEC.md's formulas in double, rounding once to the output dtype (MishBackward: to the dtype
 * its two inputs deduce, then to gradInput's). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "tensor.h"

#define MAX_T 9

typedef struct {
    int present, dtype, rank;
    int64_t dims[TENSOR_MAX_RANK], strides[TENSOR_MAX_RANK], offset;
    void *data;
} View;

typedef enum { OP_SILU, OP_MISH, OP_GNS_GRAD, OP_GNS } OpKind;
static const char *k_names[] = {"aclnnSiluBackward", "aclnnMishBackward", "aclnnGroupNormSwishGrad", "aclnnGroupNormSwish"};

#define EXEC_MAGIC 0x45584543U
typedef struct aclOpExecutor {
    uint32_t magic;
    int used;
    OpKind op;
    uint64_t workspace;
    View t[MAX_T];
    int64_t groups;
    double eps, scale;
    bool flag_a, flag_b;  /* dgamma/dbeta required; activate swish */
    int compute_dtype;    /* MishBackward: the dtype gradOutput and self deduce */
} aclOpExecutor;

static aclOpExecutor **g_execs;  /* never freed: a reused executor is always recognised */
static size_t g_nexec, g_capexec;

/* ---------------------------------------------------------------- helpers */

static void view_of(View *v, const aclTensor *t) {
    memset(v, 0, sizeof *v);
    if (!t) return;
    v->present = 1;
    v->dtype = t->dtype;
    v->rank = t->rank;
    memcpy(v->dims, t->dims, sizeof v->dims);
    memcpy(v->strides, t->strides, sizeof v->strides);
    v->offset = t->offset;
    v->data = t->data;
}

static int64_t vnumel(const View *v) { return numel(v->dims, v->rank); }

static int is_nn_float(int dt) { return dt == ACL_FLOAT || dt == ACL_FLOAT16 || dt == ACL_BF16; }

static void shape_str(const View *v, char *s, size_t n) {
    size_t k = (size_t)snprintf(s, n, "%s[", dtype_name(v->dtype));
    for (int i = 0; i < v->rank && k < n; i++) k += (size_t)snprintf(s + k, n - k, "%s%lld", i ? "," : "", (long long)v->dims[i]);
    if (k < n) snprintf(s + k, n - k, "]");
}

static int same_shape(const View *a, const View *b) {
    if (a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return 0;
    return 1;
}

#define INVALID(fn, ...) simcann_error(ACLNN_ERR_PARAM_INVALID, fn, __VA_ARGS__)

static aclnnStatus check_live(const char *fn, const char *name, const aclTensor *t) {
    if (!t) return simcann_error(ACLNN_ERR_PARAM_NULLPTR, fn, "%s is null", name);
    if (!simcann_tensor_live(t))
        return simcann_violation(ACLNN_ERR_PARAM_INVALID, fn, "%s %p is not a live aclTensor", name, (const void *)t);
    return 0;
}

static aclnnStatus new_executor(const char *fn, OpKind op, uint64_t ws, aclOpExecutor *proto, uint64_t *workspaceSize, aclOpExecutor **executor) {
    (void)fn;
    aclOpExecutor *e = malloc(sizeof *e);
    *e = *proto;
    e->magic = EXEC_MAGIC;
    e->used = 0;
    e->op = op;
    e->workspace = ws;
    simcann_lock();
    if (g_nexec == g_capexec) {
        g_capexec = g_capexec ? 2 * g_capexec : 64;
        g_execs = realloc(g_execs, g_capexec * sizeof *g_execs);
    }
    g_execs[g_nexec++] = e;
    simcann_gauge("unused_executors", 1);
    simcann_unlock();
    *workspaceSize = ws;
    *executor = e;
    return ACLNN_SUCCESS;
}

/* Byte extent of a view from its data pointer: (offset + farthest element + 1) elements. */
static size_t view_extent(const View *v) {
    int64_t far = v->offset;
    for (int i = 0; i < v->rank; i++) far += (v->dims[i] - 1) * v->strides[i];
    return (size_t)(far + 1) * dtype_size(v->dtype);
}

/* The launch's protocol checks; on success every tensor and the workspace are open. */
static aclnnStatus launch_checks(OpKind op, void *workspace, uint64_t workspaceSize, aclOpExecutor *e, aclrtStream stream) {
    const char *fn = k_names[op];
    if (!e) return simcann_error(ACLNN_ERR_PARAM_NULLPTR, fn, "executor is null");
    int known = 0;
    for (size_t i = 0; i < g_nexec; i++) known |= g_execs[i] == e;
    if (!known || e->magic != EXEC_MAGIC)
        return simcann_violation(ACLNN_ERR_PARAM_INVALID, fn, "executor %p was not returned by a GetWorkspaceSize call", (void *)e);
    if (e->used) return simcann_violation(ACLNN_ERR_PARAM_INVALID, fn, "executor %p was already used (an executor runs once)", (void *)e);
    if (e->op != op)
        return simcann_violation(ACLNN_ERR_PARAM_INVALID, fn, "executor %p comes from %sGetWorkspaceSize", (void *)e, k_names[e->op]);
    e->used = 1;  /* consumed by this launch, whatever happens next */
    simcann_gauge("unused_executors", -1);
    int forced = simcann_forced(fn);
    if (forced) return forced;
    if (workspaceSize < e->workspace)
        return simcann_violation(ACLNN_ERR_PARAM_INVALID, fn, "workspaceSize %llu is smaller than the %llu bytes GetWorkspaceSize asked for", (unsigned long long)workspaceSize, (unsigned long long)e->workspace);
    if (e->workspace) {
        if (!workspace) return simcann_violation(ACLNN_ERR_PARAM_NULLPTR, fn, "workspace is null but %llu bytes were asked for", (unsigned long long)e->workspace);
        if (simcann_open(workspace, e->workspace, fn, "workspace")) return ACLNN_ERR_PARAM_INVALID;
    }
    if (!simcann_stream_live(stream, 0))
        return simcann_violation(ACLNN_ERR_RUNTIME_ERROR, fn, "stream %p was not created by aclrtCreateStream (or was destroyed)", stream);
    static const char *names[4][MAX_T] = {
        {"gradOutput", "self", "gradInput"},
        {"gradOutput", "self", "gradInput"},
        {"dy", "mean", "rstd", "x", "gamma", "beta", "dxOut", "dgammaOut", "dbetaOut"},
        {"x", "gamma", "beta", "yOut", "meanOut", "rstdOut"},
    };
    for (int i = 0; i < MAX_T; i++) {
        const View *v = &e->t[i];
        if (!v->present || vnumel(v) == 0) continue;
        char what[64];
        snprintf(what, sizeof what, "%s data", names[op][i]);
        if (simcann_open(v->data, view_extent(v), fn, what)) return ACLNN_ERR_PARAM_INVALID;
    }
    if (e->workspace) memset(workspace, 0xA5, e->workspace);  /* garbage, as a real workspace holds */
    return ACLNN_SUCCESS;
}

typedef void (*Compute)(const aclOpExecutor *e);

static aclnnStatus launch(OpKind op, void *workspace, uint64_t workspaceSize, aclOpExecutor *e, aclrtStream stream, Compute compute) {
    simcann_count("aclnn", k_names[op], NULL);
    simcann_lock();
    aclnnStatus r = launch_checks(op, workspace, workspaceSize, e, stream);
    if (!r) compute(e);
    simcann_close_all();
    simcann_unlock();
    return r;
}

/* Reads a view as out_dims (numpy broadcasting) into doubles. */
static double *gather(const View *v, const int64_t *out_dims, int R) {
    int64_t n = numel(out_dims, R), s[TENSOR_MAX_RANK];
    for (int i = R - 1; i >= 0; i--) {
        int j = i - (R - v->rank);
        s[i] = j < 0 || (v->dims[j] == 1 && out_dims[i] != 1) ? 0 : v->strides[j];
    }
    int64_t *ix = malloc((size_t)(n ? n : 1) * 8);
    double *out = malloc((size_t)(n ? n : 1) * sizeof(double));
    strided_indices(out_dims, R, s, v->offset, ix);
    for (int64_t k = 0; k < n; k++) out[k] = ld(v->data, ix[k], v->dtype);
    free(ix);
    return out;
}

static double *gather_flat(const View *v) { return gather(v, v->dims, v->rank); }

static void scatter(const View *v, const double *vals) {
    int64_t n = vnumel(v), *ix = malloc((size_t)(n ? n : 1) * 8);
    strided_indices(v->dims, v->rank, v->strides, v->offset, ix);
    for (int64_t k = 0; k < n; k++) st(v->data, ix[k], v->dtype, vals[k]);
    free(ix);
}

static double sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);  /* x < 0 or NaN: NaN propagates */
    return e / (1.0 + e);
}

static double softplus(double x) {
    if (x != x) return x;  /* fmax would drop the NaN */
    return fmax(x, 0.0) + log1p(exp(-fabs(x)));
}

static uint64_t ws_elementwise(const View *out) { return 32 + 64 * (uint64_t)out->rank; }

/* ---------------------------------------------------------------- SiluBackward */

SIM_API aclnnStatus aclnnSiluBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self, aclTensor *gradInput,
                                                      uint64_t *workspaceSize, aclOpExecutor **executor) {
    const char *fn = "aclnnSiluBackwardGetWorkspaceSize";
    simcann_count("aclnn", fn, NULL);
    int r = simcann_forced(fn);
    if (r) return r;
    if ((r = check_live(fn, "gradOutput", gradOutput)) || (r = check_live(fn, "self", self)) || (r = check_live(fn, "gradInput", gradInput))) return r;
    if (!workspaceSize || !executor) return simcann_error(ACLNN_ERR_PARAM_NULLPTR, fn, "workspaceSize or executor is null");
    aclOpExecutor p = {0};
    view_of(&p.t[0], gradOutput);
    view_of(&p.t[1], self);
    view_of(&p.t[2], gradInput);
    char a[160], b[160], c[160];
    shape_str(&p.t[0], a, sizeof a);
    shape_str(&p.t[1], b, sizeof b);
    shape_str(&p.t[2], c, sizeof c);
    for (int i = 0; i < 3; i++) {
        if (!is_nn_float(p.t[i].dtype)) return INVALID(fn, "dtypes must be float, float16 or bfloat16 (gradOutput %s, self %s, gradInput %s)", a, b, c);
        if (p.t[i].rank > 8) return INVALID(fn, "rank must be at most 8 (gradOutput %s, self %s, gradInput %s)", a, b, c);
    }
    if (p.t[0].dtype != p.t[1].dtype || p.t[0].dtype != p.t[2].dtype) return INVALID(fn, "gradOutput, self and gradInput must have one dtype (%s, %s, %s)", a, b, c);
    if (!same_shape(&p.t[0], &p.t[1]) || !same_shape(&p.t[0], &p.t[2])) return INVALID(fn, "gradOutput, self and gradInput must have one shape (%s, %s, %s)", a, b, c);
    return new_executor(fn, OP_SILU, ws_elementwise(&p.t[2]), &p, workspaceSize, executor);
}

static void silu_compute(const aclOpExecutor *e) {
    const View *go = &e->t[0], *x = &e->t[1], *gi = &e->t[2];
    int64_t n = vnumel(gi);
    double *dy = gather_flat(go), *xv = gather_flat(x);
    for (int64_t i = 0; i < n; i++) {
        double s = sigmoid(xv[i]);
        dy[i] = dy[i] * s * (1.0 + xv[i] * (1.0 - s));
    }
    scatter(gi, dy);
    free(dy);
    free(xv);
}

SIM_API aclnnStatus aclnnSiluBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream) {
    return launch(OP_SILU, workspace, workspaceSize, executor, stream, silu_compute);
}

/* ---------------------------------------------------------------- MishBackward */

/* aclnn's dtype deduction (CANN's "互推导关系" table, which aclnnMishBackward's page points to) on
 * the three float types: equal types stay, any two different ones deduce float (bfloat16 with
 * float16 included). */
static int deduce_float(int a, int b) { return a == b ? a : ACL_FLOAT; }

SIM_API aclnnStatus aclnnMishBackwardGetWorkspaceSize(const aclTensor *gradOutput, const aclTensor *self, aclTensor *gradInput,
                                                      uint64_t *workspaceSize, aclOpExecutor **executor) {
    const char *fn = "aclnnMishBackwardGetWorkspaceSize";
    simcann_count("aclnn", fn, NULL);
    int r = simcann_forced(fn);
    if (r) return r;
    if ((r = check_live(fn, "gradOutput", gradOutput)) || (r = check_live(fn, "self", self)) || (r = check_live(fn, "gradInput", gradInput))) return r;
    if (!workspaceSize || !executor) return simcann_error(ACLNN_ERR_PARAM_NULLPTR, fn, "workspaceSize or executor is null");
    aclOpExecutor p = {0};
    view_of(&p.t[0], gradOutput);
    view_of(&p.t[1], self);
    view_of(&p.t[2], gradInput);
    char a[160], b[160], c[160];
    shape_str(&p.t[0], a, sizeof a);
    shape_str(&p.t[1], b, sizeof b);
    shape_str(&p.t[2], c, sizeof c);
    /* the seed: each of the three BFLOAT16, FLOAT16 or FLOAT32 (any pair of them deduces a type,
     * gradInput's with gradOutput's too), rank 0-8, not empty */
    for (int i = 0; i < 3; i++) {
        if (!is_nn_float(p.t[i].dtype)) return INVALID(fn, "dtypes must be float, float16 or bfloat16 (gradOutput %s, self %s, gradInput %s)", a, b, c);
        if (p.t[i].rank > 8) return INVALID(fn, "rank must be at most 8 (gradOutput %s, self %s, gradInput %s)", a, b, c);
        if (vnumel(&p.t[i]) == 0) return INVALID(fn, "empty tensors are not supported (gradOutput %s, self %s, gradInput %s)", a, b, c);
    }
    int64_t bd[TENSOR_MAX_RANK];
    int R;
    if (broadcast_shape(p.t[0].dims, p.t[0].rank, p.t[1].dims, p.t[1].rank, bd, &R))
        return INVALID(fn, "gradOutput %s and self %s do not broadcast", a, b);
    View want = p.t[2];
    want.rank = R;
    memcpy(want.dims, bd, sizeof bd);
    if (!same_shape(&want, &p.t[2])) return INVALID(fn, "gradInput %s must have the broadcast shape of gradOutput %s and self %s", c, a, b);
    p.compute_dtype = deduce_float(p.t[0].dtype, p.t[1].dtype);
    return new_executor(fn, OP_MISH, ws_elementwise(&p.t[2]), &p, workspaceSize, executor);
}

/* Computed in the deduced dtype (here: double, rounded to it once), then written as gradInput's
 * dtype, as aclnn casts its result to the output tensor (a second rounding only where gradInput is
 * narrower than the deduced type). */
static void mish_compute(const aclOpExecutor *e) {
    const View *gi = &e->t[2];
    int64_t n = vnumel(gi);
    double *dy = gather(&e->t[0], gi->dims, gi->rank), *x = gather(&e->t[1], gi->dims, gi->rank);
    for (int64_t i = 0; i < n; i++) {
        double t = tanh(softplus(x[i]));
        dy[i] = round_to(dy[i] * (t + x[i] * sigmoid(x[i]) * (1.0 - t * t)), e->compute_dtype);
    }
    scatter(gi, dy);
    free(dy);
    free(x);
}

SIM_API aclnnStatus aclnnMishBackward(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream) {
    return launch(OP_MISH, workspace, workspaceSize, executor, stream, mish_compute);
}

/* ---------------------------------------------------------------- GroupNormSwishGrad */

static int data_format_ok(const char *f) { return !f || !strcmp(f, "NCHW"); }

SIM_API aclnnStatus aclnnGroupNormSwishGradGetWorkspaceSize(const aclTensor *dy, const aclTensor *mean, const aclTensor *rstd,
                                                            const aclTensor *x, const aclTensor *gamma, const aclTensor *beta,
                                                            int64_t numGroups, char *dataFormatOptional, double swishScale,
                                                            bool dgammaIsRequire, bool dbetaIsRequire, const aclTensor *dxOut,
                                                            const aclTensor *dgammaOut, const aclTensor *dbetaOut,
                                                            uint64_t *workspaceSize, aclOpExecutor **executor) {
    const char *fn = "aclnnGroupNormSwishGradGetWorkspaceSize";
    simcann_count("aclnn", fn, NULL);
    int r = simcann_forced(fn);
    if (r) return r;
    const aclTensor *ts[MAX_T] = {dy, mean, rstd, x, gamma, beta, dxOut, dgammaOut, dbetaOut};
    static const char *names[MAX_T] = {"dy", "mean", "rstd", "x", "gamma", "beta", "dxOut", "dgammaOut", "dbetaOut"};
    /* dgammaOut / dbetaOut are required whatever the flags */
    for (int i = 0; i < MAX_T; i++)
        if ((r = check_live(fn, names[i], ts[i]))) return r;
    if (!workspaceSize || !executor) return simcann_error(ACLNN_ERR_PARAM_NULLPTR, fn, "workspaceSize or executor is null");
    aclOpExecutor p = {0};
    char s[MAX_T][160];
    for (int i = 0; i < MAX_T; i++) {
        view_of(&p.t[i], ts[i]);
        shape_str(&p.t[i], s[i], sizeof s[i]);
    }
    int dt = p.t[0].dtype;
    for (int i = 0; i < MAX_T; i++)
        if (p.t[i].dtype != dt)
            return INVALID(fn, "all nine tensors must have one dtype: dy %s but %s %s", dtype_name(dt), names[i], dtype_name(p.t[i].dtype));
    if (!is_nn_float(dt)) return INVALID(fn, "dtype must be float, float16 or bfloat16, got %s", dtype_name(dt));
    if (!data_format_ok(dataFormatOptional)) return INVALID(fn, "data format must be NCHW, got %s", dataFormatOptional);
    const View *vdy = &p.t[0], *vx = &p.t[3];
    if (vdy->rank < 2 || vdy->rank > 8) return INVALID(fn, "dy %s must have rank 2 to 8", s[0]);
    if (!same_shape(vdy, vx) || !same_shape(vdy, &p.t[6])) return INVALID(fn, "dy %s, x %s and dxOut %s must have one shape", s[0], s[3], s[6]);
    for (int i = 0; i < MAX_T; i++)
        if (vnumel(&p.t[i]) == 0) return INVALID(fn, "empty tensors are not supported (%s %s)", names[i], s[i]);
    int64_t N = vdy->dims[0], C = vdy->dims[1];
    if (numGroups <= 0 || C % numGroups) return INVALID(fn, "numGroups (%lld) must be positive and divide C (%lld)", (long long)numGroups, (long long)C);
    int64_t align = dt == ACL_FLOAT ? 8 : 16, D = C / numGroups, Dr = (D + align - 1) / align * align;
    if (Dr > 4000) return INVALID(fn, "C/G = %lld rounds up to %lld (multiple of %lld for %s), over the limit of 4000", (long long)D, (long long)Dr, (long long)align, dtype_name(dt));
    for (int i = 1; i <= 2; i++)
        if (vnumel(&p.t[i]) != N * numGroups) return INVALID(fn, "%s %s must have N*G = %lld elements", names[i], s[i], (long long)(N * numGroups));
    for (int i = 4; i < MAX_T; i++)
        if (i != 6 && vnumel(&p.t[i]) != C) return INVALID(fn, "%s %s must have C = %lld elements", names[i], s[i], (long long)C);
    p.groups = numGroups;
    p.scale = swishScale;
    p.flag_a = dgammaIsRequire;
    p.flag_b = dbetaIsRequire;
    return new_executor(fn, OP_GNS_GRAD, 32 + 16 * (uint64_t)(N * numGroups), &p, workspaceSize, executor);
}

static void gns_grad_compute(const aclOpExecutor *e) {
    const View *vx = &e->t[3];
    int64_t N = vx->dims[0], C = vx->dims[1], G = e->groups, D = C / G, HxW = vnumel(vx) / (N * C), M = D * HxW;
    double *dy = gather_flat(&e->t[0]), *mean = gather_flat(&e->t[1]), *rstd = gather_flat(&e->t[2]), *x = gather_flat(vx);
    double *gamma = gather_flat(&e->t[4]), *beta = gather_flat(&e->t[5]);
    double *dx = malloc((size_t)(N * C * HxW) * sizeof(double)), *dgamma = calloc((size_t)C, sizeof(double)), *dbeta = calloc((size_t)C, sizeof(double));
    double sc = e->scale;
    for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < G; g++) {
            double mu = mean[n * G + g], rs = rstd[n * G + g], sum1 = 0, sum2 = 0;
            for (int pass = 0; pass < 2; pass++) {
                double c1 = sum1 / (double)M, c2 = sum2 / (double)M;
                for (int64_t c = g * D; c < (g + 1) * D; c++)
                    for (int64_t h = 0; h < HxW; h++) {
                        int64_t i = (n * C + c) * HxW + h;
                        double xhat = (x[i] - mu) * rs, z = xhat * gamma[c] + beta[c], s = sigmoid(sc * z);
                        double gv = dy[i] * s * (1.0 + sc * z * (1.0 - s));
                        if (pass == 0) {
                            sum1 += gv * gamma[c];
                            sum2 += gv * gamma[c] * xhat;
                            dgamma[c] += gv * xhat;
                            dbeta[c] += gv;
                        } else {
                            dx[i] = rs * (gv * gamma[c] - c1 - xhat * c2);
                        }
                    }
            }
        }
    scatter(&e->t[6], dx);
    if (e->flag_a) scatter(&e->t[7], dgamma);  /* flag off: that output is left untouched */
    if (e->flag_b) scatter(&e->t[8], dbeta);
    free(dy); free(mean); free(rstd); free(x); free(gamma); free(beta); free(dx); free(dgamma); free(dbeta);
}

SIM_API aclnnStatus aclnnGroupNormSwishGrad(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream) {
    return launch(OP_GNS_GRAD, workspace, workspaceSize, executor, stream, gns_grad_compute);
}

/* ---------------------------------------------------------------- GroupNormSwish */

SIM_API aclnnStatus aclnnGroupNormSwishGetWorkspaceSize(const aclTensor *x, const aclTensor *gamma, const aclTensor *beta,
                                                        int64_t numGroups, char *dataFormatOptional, double eps,
                                                        bool activateSwish, double swishScale, const aclTensor *yOut,
                                                        const aclTensor *meanOut, const aclTensor *rstdOut,
                                                        uint64_t *workspaceSize, aclOpExecutor **executor) {
    const char *fn = "aclnnGroupNormSwishGetWorkspaceSize";
    simcann_count("aclnn", fn, NULL);
    int r = simcann_forced(fn);
    if (r) return r;
    const aclTensor *ts[6] = {x, gamma, beta, yOut, meanOut, rstdOut};
    static const char *names[6] = {"x", "gamma", "beta", "yOut", "meanOut", "rstdOut"};
    for (int i = 0; i < 6; i++)
        if ((r = check_live(fn, names[i], ts[i]))) return r;
    if (!workspaceSize || !executor) return simcann_error(ACLNN_ERR_PARAM_NULLPTR, fn, "workspaceSize or executor is null");
    aclOpExecutor p = {0};
    char s[6][160];
    for (int i = 0; i < 6; i++) {
        view_of(&p.t[i], ts[i]);
        shape_str(&p.t[i], s[i], sizeof s[i]);
    }
    const View *vx = &p.t[0], *vg = &p.t[1];
    if (!is_nn_float(vx->dtype)) return INVALID(fn, "x %s must be float, float16 or bfloat16", s[0]);
    if (vx->rank < 2 || vx->rank > 8) return INVALID(fn, "x %s must have rank 2 to 8", s[0]);
    if (vg->dtype != p.t[2].dtype || (vg->dtype != vx->dtype && vg->dtype != ACL_FLOAT))
        return INVALID(fn, "gamma %s and beta %s must have one dtype, x's or float (x %s)", s[1], s[2], s[0]);
    if (!data_format_ok(dataFormatOptional)) return INVALID(fn, "data format must be NCHW, got %s", dataFormatOptional);
    int64_t N = vx->dims[0], C = vx->dims[1];
    if (N <= 0 || C <= 0) return INVALID(fn, "x %s must have N > 0 and C > 0", s[0]);
    if (numGroups <= 0 || C % numGroups) return INVALID(fn, "numGroups (%lld) must be positive and divide C (%lld)", (long long)numGroups, (long long)C);
    if (vnumel(vg) != C || vnumel(&p.t[2]) != C) return INVALID(fn, "gamma %s and beta %s must have C = %lld elements", s[1], s[2], (long long)C);
    if (!same_shape(&p.t[3], vx) || p.t[3].dtype != vx->dtype) return INVALID(fn, "yOut %s must be like x %s", s[3], s[0]);
    for (int i = 4; i < 6; i++)
        if (p.t[i].rank != 2 || p.t[i].dims[0] != N || p.t[i].dims[1] != numGroups || p.t[i].dtype != vg->dtype)
            return INVALID(fn, "%s %s must be (N, G) = (%lld, %lld) in gamma's dtype %s", names[i], s[i], (long long)N, (long long)numGroups, dtype_name(vg->dtype));
    p.groups = numGroups;
    p.eps = eps;
    p.scale = swishScale;
    p.flag_a = activateSwish;
    return new_executor(fn, OP_GNS, 32 + 16 * (uint64_t)(N * numGroups), &p, workspaceSize, executor);
}

static void gns_compute(const aclOpExecutor *e) {
    const View *vx = &e->t[0];
    int64_t N = vx->dims[0], C = vx->dims[1], G = e->groups, D = C / G, HxW = vnumel(vx) / (N * C), M = D * HxW;
    double *x = gather_flat(vx), *gamma = gather_flat(&e->t[1]), *beta = gather_flat(&e->t[2]);
    double *y = malloc((size_t)(vnumel(vx) ? vnumel(vx) : 1) * sizeof(double));
    double *mean = malloc((size_t)(N * G) * sizeof(double)), *rstd = malloc((size_t)(N * G) * sizeof(double));
    for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < G; g++) {
            double sum = 0, sq = 0;
            int64_t lo = (n * C + g * D) * HxW, hi = lo + M;  /* a group is contiguous in (N, C, HxW) */
            for (int64_t i = lo; i < hi; i++) sum += x[i];
            double mu = M ? sum / (double)M : 0.0;
            for (int64_t i = lo; i < hi; i++) sq += (x[i] - mu) * (x[i] - mu);
            double rs = 1.0 / sqrt((M ? sq / (double)M : 0.0) + e->eps);
            mean[n * G + g] = mu;
            rstd[n * G + g] = rs;
            for (int64_t i = lo; i < hi; i++) {
                int64_t c = (i / HxW) % C;
                double z = (x[i] - mu) * rs * gamma[c] + beta[c];
                y[i] = e->flag_a ? z * sigmoid(e->scale * z) : z;
            }
        }
    scatter(&e->t[3], y);
    scatter(&e->t[4], mean);
    scatter(&e->t[5], rstd);
    free(x); free(gamma); free(beta); free(y); free(mean); free(rstd);
}

SIM_API aclnnStatus aclnnGroupNormSwish(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream) {
    return launch(OP_GNS, workspace, workspaceSize, executor, stream, gns_compute);
}
