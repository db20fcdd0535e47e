/* aclTensor of the simulated libnnopbase.so, as libopapi.so reads it. */
#ifndef SIMCANN_TENSOR_H
#define SIMCANN_TENSOR_H

#include "simcann.h"

#define TENSOR_MAX_RANK 16

typedef struct aclTensor {
    uint32_t magic;
    int live;
    int dtype, format, rank, storage_rank;
    int64_t dims[TENSOR_MAX_RANK], strides[TENSOR_MAX_RANK], storage_dims[TENSOR_MAX_RANK];
    int64_t offset;  /* in elements, from data */
    void *data;
} aclTensor;

/* 1 if t came from aclCreateTensor and was not destroyed. */
SIM_API int simcann_tensor_live(const aclTensor *t);

#endif
