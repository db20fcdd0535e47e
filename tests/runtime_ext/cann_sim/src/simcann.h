/* The simulated CANN runtime: what its five libraries share.
 *
 * libascendcl.so owns all state (device memory, streams, error messages, violations, counters,
 * the JSON report); the other libraries link against it and use the simcann_* functions below.
 * Public types and numbers are CANN's (acl_base.h, acl_rt.h, aclnn/acl_meta.h). */
#ifndef SIMCANN_H
#define SIMCANN_H

#include <stddef.h>
#include <stdint.h>

#define SIM_API __attribute__((visibility("default")))

typedef int aclError;
typedef int32_t aclnnStatus;
typedef void *aclrtStream;
typedef void *aclrtEvent;

/* aclDataType (acl_base.h) */
enum {
    ACL_DT_UNDEFINED = -1, ACL_FLOAT = 0, ACL_FLOAT16 = 1, ACL_INT8 = 2, ACL_INT32 = 3, ACL_UINT8 = 4,
    ACL_INT16 = 6, ACL_UINT16 = 7, ACL_UINT32 = 8, ACL_INT64 = 9, ACL_UINT64 = 10, ACL_DOUBLE = 11,
    ACL_BOOL = 12, ACL_BF16 = 27,
};
/* aclFormat */
enum { ACL_FORMAT_UNDEFINED = -1, ACL_FORMAT_NCHW = 0, ACL_FORMAT_NHWC = 1, ACL_FORMAT_ND = 2 };
/* aclrtMemcpyKind */
enum { ACL_MEMCPY_HOST_TO_HOST = 0, ACL_MEMCPY_HOST_TO_DEVICE = 1, ACL_MEMCPY_DEVICE_TO_HOST = 2,
       ACL_MEMCPY_DEVICE_TO_DEVICE = 3 };

/* aclError codes (acl_base.h, rt_error_codes.h) */
#define ACL_SUCCESS 0
#define ACL_ERROR_INVALID_PARAM 100000
#define ACL_ERROR_UNINITIALIZE 100001
#define ACL_ERROR_REPEAT_INITIALIZE 100002
#define ACL_ERROR_OP_INPUT_NOT_MATCH 100021
#define ACL_ERROR_OP_ATTR_NOT_MATCH 100023
#define ACL_ERROR_OP_NOT_FOUND 100024
#define ACL_ERROR_UNSUPPORTED_DATA_TYPE 100026
#define ACL_ERROR_INVALID_DEVICE 200002
#define ACL_ERROR_FEATURE_UNSUPPORTED 200006
#define ACL_ERROR_RT_PARAM_INVALID 107000
#define ACL_ERROR_RT_INVALID_DEVICEID 107001
#define ACL_ERROR_RT_CONTEXT_NULL 107002
#define ACL_ERROR_RT_INVALID_HANDLE 107017
#define ACL_ERROR_RT_MEMORY_ALLOCATION 207001
#define ACL_ERROR_RT_MEMORY_FREE 207002

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
