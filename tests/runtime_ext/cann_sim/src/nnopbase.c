/* libnnopbase.so of the simulated CANN runtime: aclCreateTensor / aclDestroyTensor.
 * A tensor is a view (dims, strides and offset in elements) over device memory; nothing is
 * checked against device memory here, the aclnn launch does that. Tensor records are never
 * freed, so a destroyed or foreign pointer is always recognised. */
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "tensor.h"

#define TENSOR_MAGIC 0x54454e53U

static aclTensor **g_tensors;
static size_t g_n, g_cap;

SIM_API int simcann_tensor_live(const aclTensor *t) {
    if (!t) return 0;
    simcann_lock();
    int live = 0;
    for (size_t i = g_n; i-- > 0;)
        if (g_tensors[i] == t) { live = t->live; break; }
    simcann_unlock();
    return live;
}

SIM_API aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, int dataType, const int64_t *stride,
                                   int64_t offset, int format, const int64_t *storageDims, uint64_t storageDimsNum,
                                   void *tensorData) {
    const char *fn = "aclCreateTensor";
    if (simcann_forced(fn)) return NULL;
    if (viewDimsNum > TENSOR_MAX_RANK || storageDimsNum > TENSOR_MAX_RANK || (viewDimsNum && !viewDims) || (storageDimsNum && !storageDims)) {
        simcann_error(ACLNN_ERR_PARAM_INVALID, fn, "bad dims (%llu view dims, %llu storage dims)", (unsigned long long)viewDimsNum, (unsigned long long)storageDimsNum);
        return NULL;
    }
    if (dtype_size(dataType) == 0 || offset < 0) {
        simcann_error(ACLNN_ERR_PARAM_INVALID, fn, "bad dtype %d or offset %lld", dataType, (long long)offset);
        return NULL;
    }
    aclTensor *t = calloc(1, sizeof *t);
    t->magic = TENSOR_MAGIC;
    t->live = 1;
    t->dtype = dataType;
    t->format = format;
    t->rank = (int)viewDimsNum;
    t->offset = offset;
    t->data = tensorData;
    int64_t s = 1;
    for (int i = t->rank - 1; i >= 0; i--) {
        if (viewDims[i] < 0) {
            free(t);
            simcann_error(ACLNN_ERR_PARAM_INVALID, fn, "negative dimension %lld", (long long)viewDims[i]);
            return NULL;
        }
        t->dims[i] = viewDims[i];
        t->strides[i] = stride ? stride[i] : s;  /* no strides: contiguous */
        s *= viewDims[i];
    }
    if (storageDims) {
        t->storage_rank = (int)storageDimsNum;
        memcpy(t->storage_dims, storageDims, storageDimsNum * sizeof(int64_t));
    } else {
        t->storage_rank = t->rank;
        memcpy(t->storage_dims, t->dims, sizeof t->dims);
    }
    simcann_lock();
    if (g_n == g_cap) {
        g_cap = g_cap ? 2 * g_cap : 64;
        g_tensors = realloc(g_tensors, g_cap * sizeof *g_tensors);
    }
    g_tensors[g_n++] = t;
    simcann_gauge("live_tensors", 1);
    simcann_unlock();
    return t;
}

SIM_API aclnnStatus aclDestroyTensor(const aclTensor *tensor) {
    const char *fn = "aclDestroyTensor";
    int forced = simcann_forced(fn);
    if (forced) return forced;
    if (!tensor) return ACLNN_SUCCESS;
    simcann_lock();
    int r = ACLNN_SUCCESS;
    if (!simcann_tensor_live(tensor))
        r = simcann_violation(ACLNN_ERR_PARAM_INVALID, fn, "%p is not a live aclTensor (destroyed twice, or not from aclCreateTensor)", (const void *)tensor);
    else {
        ((aclTensor *)tensor)->live = 0;
        simcann_gauge("live_tensors", -1);
    }
    simcann_unlock();
    return r;
}
