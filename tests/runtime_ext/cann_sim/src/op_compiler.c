/* libacl_op_compiler.so of the simulated CANN runtime: aclopAttr, aclTensorDesc, aclDataBuffer
 * and aclopCompileAndExecute (single-operator mode) as onnxruntime-cann uses them. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acl_api.h"
#include "aclop.h"
#include "dtype.h"

/* ---------------------------------------------------------------- attributes */

enum { A_BOOL, A_INT, A_FLOAT, A_STRING, A_LIST_INT };
typedef struct {
    char *name;
    int kind;
    int64_t i;
    float f;
    char *s;
    int64_t *list;
    int nlist;
} AttrEntry;

#define ATTR_MAGIC 0x41545452U
struct aclopAttr { uint32_t magic; AttrEntry *e; int n; };

SIM_API aclopAttr *aclopCreateAttr(void) {
    aclopAttr *a = calloc(1, sizeof *a);
    a->magic = ATTR_MAGIC;
    simcann_gauge("live_op_attrs", 1);
    return a;
}

SIM_API void aclopDestroyAttr(const aclopAttr *attr) {
    aclopAttr *a = (aclopAttr *)attr;
    if (!a || a->magic != ATTR_MAGIC) {
        if (a) simcann_violation(ACL_ERROR_INVALID_PARAM, "aclopDestroyAttr", "%p is not a live aclopAttr", (void *)a);
        return;
    }
    for (int i = 0; i < a->n; i++) { free(a->e[i].name); free(a->e[i].s); free(a->e[i].list); }
    free(a->e);
    a->magic = 0;
    free(a);
    simcann_gauge("live_op_attrs", -1);
}

static AttrEntry *attr_slot(aclopAttr *a, const char *name) {
    for (int i = 0; i < a->n; i++)
        if (!strcmp(a->e[i].name, name)) {
            free(a->e[i].s); free(a->e[i].list);
            a->e[i].s = NULL; a->e[i].list = NULL;
            return &a->e[i];
        }
    a->e = realloc(a->e, (size_t)(a->n + 1) * sizeof *a->e);
    AttrEntry *e = &a->e[a->n++];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    return e;
}

#define ATTR_CHECK(fn)                                                                              \
    FORCED_OR(fn);                                                                                  \
    if (!attr || attr->magic != ATTR_MAGIC || !attrName)                                            \
        return simcann_error(ACL_ERROR_INVALID_PARAM, fn, "attr %p is not a live aclopAttr, or name is null", (void *)attr)
#define FORCED_OR(fn)                        \
    do {                                     \
        int forced_ = simcann_forced(fn);    \
        if (forced_) return forced_;         \
    } while (0)

SIM_API aclError aclopSetAttrBool(aclopAttr *attr, const char *attrName, uint8_t attrValue) {
    ATTR_CHECK("aclopSetAttrBool");
    AttrEntry *e = attr_slot(attr, attrName);
    e->kind = A_BOOL;
    e->i = attrValue != 0;
    return ACL_SUCCESS;
}

SIM_API aclError aclopSetAttrInt(aclopAttr *attr, const char *attrName, int64_t attrValue) {
    ATTR_CHECK("aclopSetAttrInt");
    AttrEntry *e = attr_slot(attr, attrName);
    e->kind = A_INT;
    e->i = attrValue;
    return ACL_SUCCESS;
}

SIM_API aclError aclopSetAttrFloat(aclopAttr *attr, const char *attrName, float attrValue) {
    ATTR_CHECK("aclopSetAttrFloat");
    AttrEntry *e = attr_slot(attr, attrName);
    e->kind = A_FLOAT;
    e->f = attrValue;
    return ACL_SUCCESS;
}

SIM_API aclError aclopSetAttrString(aclopAttr *attr, const char *attrName, const char *attrValue) {
    ATTR_CHECK("aclopSetAttrString");
    AttrEntry *e = attr_slot(attr, attrName);
    e->kind = A_STRING;
    e->s = strdup(attrValue ? attrValue : "");
    return ACL_SUCCESS;
}

SIM_API aclError aclopSetAttrListInt(aclopAttr *attr, const char *attrName, int numValues, const int64_t *values) {
    ATTR_CHECK("aclopSetAttrListInt");
    if (numValues < 0 || (numValues > 0 && !values))
        return simcann_error(ACL_ERROR_INVALID_PARAM, "aclopSetAttrListInt", "bad list (%d values at %p)", numValues, (const void *)values);
    AttrEntry *e = attr_slot(attr, attrName);
    e->kind = A_LIST_INT;
    e->nlist = numValues;
    e->list = malloc((size_t)(numValues ? numValues : 1) * sizeof(int64_t));
    if (numValues) memcpy(e->list, values, (size_t)numValues * sizeof(int64_t));
    return ACL_SUCCESS;
}

static const AttrEntry *attr_find(const aclopAttr *a, const char *name) {
    if (!a) return NULL;
    for (int i = 0; i < a->n; i++)
        if (!strcmp(a->e[i].name, name)) return &a->e[i];
    return NULL;
}

int attr_has(const aclopAttr *a, const char *name) { return attr_find(a, name) != NULL; }

int64_t attr_int(const aclopAttr *a, const char *name, int64_t dflt) {
    const AttrEntry *e = attr_find(a, name);
    return e && (e->kind == A_INT || e->kind == A_BOOL) ? e->i : dflt;
}

float attr_float(const aclopAttr *a, const char *name, float dflt) {
    const AttrEntry *e = attr_find(a, name);
    return e && e->kind == A_FLOAT ? e->f : dflt;
}

const char *attr_str(const aclopAttr *a, const char *name, const char *dflt) {
    const AttrEntry *e = attr_find(a, name);
    return e && e->kind == A_STRING ? e->s : dflt;
}

const int64_t *attr_list(const aclopAttr *a, const char *name, int *n) {
    const AttrEntry *e = attr_find(a, name);
    if (!e || e->kind != A_LIST_INT) { *n = 0; return NULL; }
    *n = e->nlist;
    return e->list;
}

/* ---------------------------------------------------------------- tensor descs, data buffers */

#define DESC_MAGIC 0x44455343U
struct aclTensorDesc {
    uint32_t magic;
    int dtype, format, rank;
    int64_t dims[MAX_RANK];
    void *const_data;
    size_t const_len;
};

SIM_API aclTensorDesc *aclCreateTensorDesc(aclDataType dataType, int numDims, const int64_t *dims, aclFormat format) {
    if (numDims < 0 || numDims > MAX_RANK || (numDims > 0 && !dims)) {
        simcann_error(ACL_ERROR_INVALID_PARAM, "aclCreateTensorDesc", "bad dims (%d at %p)", numDims, (const void *)dims);
        return NULL;
    }
    aclTensorDesc *d = calloc(1, sizeof *d);
    d->magic = DESC_MAGIC;
    d->dtype = dataType;
    d->format = format;
    d->rank = numDims;
    if (numDims) memcpy(d->dims, dims, (size_t)numDims * sizeof(int64_t));
    simcann_gauge("live_tensor_descs", 1);
    return d;
}

SIM_API void aclDestroyTensorDesc(const aclTensorDesc *desc) {
    aclTensorDesc *d = (aclTensorDesc *)desc;
    if (!d) return;
    if (d->magic != DESC_MAGIC) {
        simcann_violation(ACL_ERROR_INVALID_PARAM, "aclDestroyTensorDesc", "%p is not a live aclTensorDesc", (void *)d);
        return;
    }
    d->magic = 0;
    free(d->const_data);
    free(d);
    simcann_gauge("live_tensor_descs", -1);
}

SIM_API size_t aclGetTensorDescNumDims(const aclTensorDesc *desc) { return desc ? (size_t)desc->rank : 0; }

SIM_API aclError aclGetTensorDescDimV2(const aclTensorDesc *desc, size_t index, int64_t *dimSize) {
    if (!desc || !dimSize || index >= (size_t)desc->rank)
        return simcann_error(ACL_ERROR_INVALID_PARAM, "aclGetTensorDescDimV2", "bad desc or index %zu", index);
    *dimSize = desc->dims[index];
    return ACL_SUCCESS;
}

SIM_API size_t aclGetTensorDescSize(const aclTensorDesc *desc) {
    return desc ? (size_t)numel(desc->dims, desc->rank) * dtype_size(desc->dtype) : 0;
}

SIM_API aclError aclSetTensorConst(aclTensorDesc *desc, void *dataBuffer, size_t length) {
    FORCED_OR("aclSetTensorConst");
    if (!desc || desc->magic != DESC_MAGIC || (length && !dataBuffer))
        return simcann_error(ACL_ERROR_INVALID_PARAM, "aclSetTensorConst", "bad desc or data");
    /* a const input's value is host data copied into the desc */
    if (simcann_classify(dataBuffer, length) != SIM_HOST)
        return simcann_violation(ACL_ERROR_INVALID_PARAM, "aclSetTensorConst", "const data %p must be host memory", dataBuffer);
    free(desc->const_data);
    desc->const_data = malloc(length ? length : 1);
    memcpy(desc->const_data, dataBuffer, length);
    desc->const_len = length;
    return ACL_SUCCESS;
}

#define BUF_MAGIC 0x42554646U
struct aclDataBuffer { uint32_t magic; void *data; size_t size; };

SIM_API aclDataBuffer *aclCreateDataBuffer(void *data, size_t size) {
    aclDataBuffer *b = calloc(1, sizeof *b);
    b->magic = BUF_MAGIC;
    b->data = data;
    b->size = size;
    simcann_gauge("live_data_buffers", 1);
    return b;
}

SIM_API aclError aclDestroyDataBuffer(const aclDataBuffer *dataBuffer) {
    aclDataBuffer *b = (aclDataBuffer *)dataBuffer;
    if (!b || b->magic != BUF_MAGIC)
        return simcann_violation(ACL_ERROR_INVALID_PARAM, "aclDestroyDataBuffer", "%p is not a live aclDataBuffer", (void *)b);
    b->magic = 0;
    free(b);
    simcann_gauge("live_data_buffers", -1);
    return ACL_SUCCESS;
}

SIM_API void *aclGetDataBufferAddr(const aclDataBuffer *dataBuffer) { return dataBuffer ? dataBuffer->data : NULL; }

/* ---------------------------------------------------------------- aclopCompileAndExecute */

aclError op_fail(const OpCall *c, int code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return simcann_error(code, "aclopCompileAndExecute", "%s: %s", c->op, msg);
}

static int make_arg(OpCall *c, Arg *arg, const aclTensorDesc *d, const aclDataBuffer *b, int is_input, int index) {
    const char *fn = "aclopCompileAndExecute";
    char what[160];
    snprintf(what, sizeof what, "%s %s %d", c->op, is_input ? "input" : "output", index);
    if (!d || d->magic != DESC_MAGIC) return simcann_violation(ACL_ERROR_INVALID_PARAM, fn, "%s: desc %p is not a live aclTensorDesc", what, (const void *)d);
    if (!b || b->magic != BUF_MAGIC) return simcann_violation(ACL_ERROR_INVALID_PARAM, fn, "%s: buffer %p is not a live aclDataBuffer", what, (const void *)b);
    memset(arg, 0, sizeof *arg);
    arg->dtype = d->dtype;
    arg->rank = d->rank;
    memcpy(arg->dims, d->dims, sizeof d->dims);
    if (is_input && d->dtype == ACL_DT_UNDEFINED && !b->data && b->size == 0) return 0;  /* omitted optional input */
    arg->present = 1;
    size_t need = (size_t)numel(d->dims, d->rank) * dtype_size(d->dtype);
    if (is_input && d->const_data) {
        if (d->const_len < need) return simcann_violation(ACL_ERROR_INVALID_PARAM, fn, "%s: const data has %zu bytes, the desc needs %zu", what, d->const_len, need);
        arg->data = d->const_data;
        arg->size = d->const_len;
        return 0;
    }
    if (b->size < need) return simcann_violation(ACL_ERROR_INVALID_PARAM, fn, "%s: buffer has %zu bytes, the desc needs %zu", what, b->size, need);
    arg->data = b->data;
    arg->size = b->size;
    if (need == 0) return 0;
    if (is_input && aclop_host_scalar_input(c->op, index) && simcann_classify(b->data, need) == SIM_HOST) return 0;
    return simcann_open(b->data, need, fn, what);
}

SIM_API aclError aclopCompileAndExecute(const char *opType, int numInputs, const aclTensorDesc *const inputDesc[],
                                        const aclDataBuffer *const inputs[], int numOutputs,
                                        const aclTensorDesc *const outputDesc[], aclDataBuffer *const outputs[],
                                        const aclopAttr *attr, aclopEngineType engineType, aclopCompileType compileFlag, const char *opPath,
                                        aclrtStream stream) {
    (void)engineType; (void)compileFlag; (void)opPath;
    const char *fn = "aclopCompileAndExecute";
    FORCED_OR(fn);
    if (!opType) return simcann_error(ACL_ERROR_INVALID_PARAM, fn, "opType is null");
    if (numInputs < 0 || numInputs > MAX_ARGS || numOutputs < 0 || numOutputs > MAX_ARGS)
        return simcann_error(ACL_ERROR_INVALID_PARAM, fn, "%s: %d inputs, %d outputs", opType, numInputs, numOutputs);
    if (!simcann_stream_live(stream, 1))
        return simcann_violation(ACL_ERROR_RT_INVALID_HANDLE, fn, "%s: stream %p was not created by aclrtCreateStream (or was destroyed)", opType, stream);
    if (attr && attr->magic != ATTR_MAGIC)
        return simcann_violation(ACL_ERROR_INVALID_PARAM, fn, "%s: attr %p is not a live aclopAttr", opType, (const void *)attr);

    OpCall c = {.op = opType, .nin = numInputs, .nout = numOutputs, .attr = attr};
    Kernel k = aclop_kernel(opType);
    char detail[128];
    snprintf(detail, sizeof detail, "%s", numInputs && inputDesc[0] ? dtype_name(inputDesc[0]->dtype) : "-");
    if (!strcmp(opType, "Cast") && numOutputs && outputDesc[0])
        snprintf(detail + strlen(detail), sizeof detail - strlen(detail), "->%s", dtype_name(outputDesc[0]->dtype));
    if (!k) {
        simcann_count("aclop_unsupported", opType, NULL);
        return simcann_error(ACL_ERROR_OP_NOT_FOUND, fn, "op type %s (%s) is not simulated: no kernel", opType, detail);
    }
    simcann_count("aclop", opType, detail);

    simcann_lock();
    aclError r = ACL_SUCCESS;
    for (int i = 0; i < numInputs && !r; i++) r = make_arg(&c, &c.in[i], inputDesc[i], inputs[i], 1, i);
    for (int i = 0; i < numOutputs && !r; i++) r = make_arg(&c, &c.out[i], outputDesc[i], outputs[i], 0, i);
    if (!r) r = k(&c);
    simcann_close_all();
    simcann_unlock();
    return r;
}
