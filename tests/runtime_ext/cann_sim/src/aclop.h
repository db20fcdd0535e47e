/* The single-operator side of libacl_op_compiler.so: one aclopCompileAndExecute call as the
 * kernels see it (aclop_kernels.c), after op_compiler.c checked and opened every buffer. */
#ifndef SIMCANN_ACLOP_H
#define SIMCANN_ACLOP_H

#include "simcann.h"

#define MAX_RANK 16
#define MAX_ARGS 16

typedef struct {
    int present;  /* 0: an omitted optional input (ACL_DT_UNDEFINED desc, null buffer) */
    int dtype;
    int rank;
    int64_t dims[MAX_RANK];
    void *data;
    size_t size;
} Arg;

typedef struct {
    const char *op;
    int nin, nout;
    Arg in[MAX_ARGS], out[MAX_ARGS];
    const aclopAttr *attr;
} OpCall;

typedef aclError (*Kernel)(const OpCall *c);

/* The kernel of an op type, NULL when the simulator has none. */
Kernel aclop_kernel(const char *op_type);
/* Input slots that may hold a host pointer to a scalar, because onnxruntime-cann 1.24.4 passes
 * one there (the address of a kernel member or a stack variable). */
int aclop_host_scalar_input(const char *op_type, int index);

int attr_has(const aclopAttr *a, const char *name);
int64_t attr_int(const aclopAttr *a, const char *name, int64_t dflt);
float attr_float(const aclopAttr *a, const char *name, float dflt);
const char *attr_str(const aclopAttr *a, const char *name, const char *dflt);
const int64_t *attr_list(const aclopAttr *a, const char *name, int *n);

aclError op_fail(const OpCall *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
