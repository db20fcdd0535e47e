/* The simulated CANN runtime: what its five libraries share.
 *
 * libascendcl.so owns all state (device memory, streams, error messages, violations, counters,
 * the JSON report); the other libraries link against it and use the simcann_* functions below.
 * Public types and numbers are CANN's (acl_base.h, acl_rt.h, aclnn/acl_meta.h); acl_api.h declares
 * the CANN functions the libraries export. */
#ifndef SIMCANN_H
#define SIMCANN_H

#include <stddef.h>
#include <stdint.h>

#define SIM_API __attribute__((visibility("default")))

/* CANN's numbers, each written once: as the simulator's own definitions below, or, compiled against
 * CANN's own headers (SIMCANN_CHECK_AGAINST_CANN, test_cann_headers.py), as static_asserts that
 * they equal CANN's. aclDataType, aclFormat (acl_base_rt.h), aclrtMemcpyKind (acl_rt.h): */
#define SIMCANN_DATA_TYPES(X)                                                                          \
    X(ACL_DT_UNDEFINED, -1) X(ACL_FLOAT, 0) X(ACL_FLOAT16, 1) X(ACL_INT8, 2) X(ACL_INT32, 3) X(ACL_UINT8, 4) \
    X(ACL_INT16, 6) X(ACL_UINT16, 7) X(ACL_UINT32, 8) X(ACL_INT64, 9) X(ACL_UINT64, 10) X(ACL_DOUBLE, 11)    \
    X(ACL_BOOL, 12) X(ACL_BF16, 27)
#define SIMCANN_FORMATS(X) X(ACL_FORMAT_UNDEFINED, -1) X(ACL_FORMAT_NCHW, 0) X(ACL_FORMAT_NHWC, 1) X(ACL_FORMAT_ND, 2)
#define SIMCANN_MEMCPY_KINDS(X)                                                                  \
    X(ACL_MEMCPY_HOST_TO_HOST, 0) X(ACL_MEMCPY_HOST_TO_DEVICE, 1) X(ACL_MEMCPY_DEVICE_TO_HOST, 2) \
    X(ACL_MEMCPY_DEVICE_TO_DEVICE, 3)
/* aclError codes (acl_base_rt.h, error_codes/rt_error_codes.h) */
#define SIMCANN_ACL_ERRORS(X)                                                                                \
    X(ACL_SUCCESS, 0) X(ACL_ERROR_INVALID_PARAM, 100000) X(ACL_ERROR_UNINITIALIZE, 100001)                  \
    X(ACL_ERROR_REPEAT_INITIALIZE, 100002) X(ACL_ERROR_OP_INPUT_NOT_MATCH, 100021)                          \
    X(ACL_ERROR_OP_ATTR_NOT_MATCH, 100023) X(ACL_ERROR_OP_NOT_FOUND, 100024)                                \
    X(ACL_ERROR_UNSUPPORTED_DATA_TYPE, 100026) X(ACL_ERROR_INVALID_DEVICE, 200002)                          \
    X(ACL_ERROR_FEATURE_UNSUPPORTED, 200006) X(ACL_ERROR_RT_PARAM_INVALID, 107000)                          \
    X(ACL_ERROR_RT_INVALID_DEVICEID, 107001) X(ACL_ERROR_RT_CONTEXT_NULL, 107002)                           \
    X(ACL_ERROR_RT_INVALID_HANDLE, 107017) X(ACL_ERROR_RT_MEMORY_ALLOCATION, 207001)                        \
    X(ACL_ERROR_RT_MEMORY_FREE, 207002)

#ifdef SIMCANN_CHECK_AGAINST_CANN  /* C++, after acl/acl.h and acl/acl_op_compiler.h */
#define SIMCANN_SAME_AS_CANN(name, value) static_assert(name == (value), #name " differs from CANN's");
SIMCANN_DATA_TYPES(SIMCANN_SAME_AS_CANN)
SIMCANN_FORMATS(SIMCANN_SAME_AS_CANN)
SIMCANN_MEMCPY_KINDS(SIMCANN_SAME_AS_CANN)
SIMCANN_ACL_ERRORS(SIMCANN_SAME_AS_CANN)
#else
#define SIMCANN_ENUMERATOR(name, value) name = (value),
typedef int aclError;
typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef enum { SIMCANN_DATA_TYPES(SIMCANN_ENUMERATOR) } aclDataType;
typedef enum { SIMCANN_FORMATS(SIMCANN_ENUMERATOR) } aclFormat;
typedef enum aclrtMemcpyKind { SIMCANN_MEMCPY_KINDS(SIMCANN_ENUMERATOR) } aclrtMemcpyKind;
enum { SIMCANN_ACL_ERRORS(SIMCANN_ENUMERATOR) };
/* the values the simulator never reads: CANN's names, nothing more */
typedef enum aclrtMemMallocPolicy { ACL_MEM_MALLOC_HUGE_FIRST } aclrtMemMallocPolicy;
typedef enum aclEngineType { ACL_ENGINE_SYS } aclopEngineType;
typedef enum aclCompileType { ACL_COMPILE_SYS } aclopCompileType;
/* handles: opaque here (the simulator's own structs complete some of them) */
typedef struct aclTensorDesc aclTensorDesc;
typedef struct aclDataBuffer aclDataBuffer;
typedef struct aclopAttr aclopAttr;
typedef struct aclmdlDesc aclmdlDesc;
typedef struct aclmdlDataset aclmdlDataset;
typedef struct aclmdlIODims aclmdlIODims;
#endif
typedef int32_t aclnnStatus;

/* aclnnStatus codes (aclnn returns) */
#define ACLNN_SUCCESS 0
#define ACLNN_ERR_PARAM_NULLPTR 161001
#define ACLNN_ERR_PARAM_INVALID 161002
#define ACLNN_ERR_RUNTIME_ERROR 361001

/* ---- shared state, exported by libascendcl.so ---- */

/* One global lock around every simulated call that touches state or device memory. */
SIM_API void simcann_lock(void);
SIM_API void simcann_unlock(void);

/* Call at the top of each API function: counts nothing, returns the code forced by
 * SIMCANN_FAIL=<fn>=<code>[,...] (with the error message set), else 0. */
SIM_API int simcann_forced(const char *fn);

/* Sets the message aclGetRecentErrMsg returns (this thread), returns code. */
SIM_API int simcann_error(int code, const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A protocol violation: recorded in the report and set as the recent error; returns code. */
SIM_API int simcann_violation(int code, const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Where a pointer range lies. */
enum { SIM_HOST = 0, SIM_DEVICE = 1, SIM_DEVICE_OVERFLOW = 2, SIM_DEVICE_FREED = 3 };
SIM_API int simcann_classify(const void *p, size_t len);
/* Checks [p, p+len) lies in one live device allocation and makes that allocation accessible
 * until simcann_close_all(); on failure records a violation naming fn/what and returns its code. */
SIM_API int simcann_open(const void *p, size_t len, const char *fn, const char *what);
SIM_API void simcann_close_all(void);
/* 1 if s was created by aclrtCreateStream and not destroyed (NULL: the default stream,
 * accepted only where allow_default). */
SIM_API int simcann_stream_live(aclrtStream s, int allow_default);

/* Named counters and call tables of the report. */
SIM_API void simcann_count(const char *table, const char *key, const char *detail);
SIM_API void simcann_gauge(const char *name, long delta);

#endif
