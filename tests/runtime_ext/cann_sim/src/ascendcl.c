/* libascendcl.so of the simulated CANN runtime: acl* / aclrt* / aclmdl* and the shared state.
 *
 * Device memory is host memory from mmap, kept PROT_NONE except while the runtime itself works on
 * it (simcann_open .. simcann_close_all, under the global lock): a host read or write of device
 * memory anywhere else is a SIGSEGV. Freed device ranges stay reserved (PROT_NONE, pages dropped)
 * and are never handed out again, so use after free and double free are recognised exactly.
 * New device memory is filled with 0xFF bytes (NaN in every float type), never zeros: a caller
 * that relies on memory it did not write sees NaN. */
#define _GNU_SOURCE
#include "acl_api.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---------------------------------------------------------------- lock, errors, violations */

static pthread_mutex_t g_lock;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_lock(void) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);  /* API calls nest (report -> counters) */
    pthread_mutex_init(&g_lock, &a);
}

SIM_API void simcann_lock(void) { pthread_once(&g_once, init_lock); pthread_mutex_lock(&g_lock); }
SIM_API void simcann_unlock(void) { pthread_mutex_unlock(&g_lock); }

/* aclGetRecentErrMsg is per thread, as CANN's: the pending message and the one last handed out. */
static __thread char t_msg[2048];
static __thread int t_pending;
static __thread char t_returned[2048];

static void set_msg(const char *fn, const char *fmt, va_list ap) {
    int n = snprintf(t_msg, sizeof t_msg, "[simcann] %s: ", fn);
    if (n < 0 || (size_t)n >= sizeof t_msg) n = 0;
    vsnprintf(t_msg + n, sizeof t_msg - (size_t)n, fmt, ap);
    t_pending = 1;
}

SIM_API int simcann_error(int code, const char *fn, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_msg(fn, fmt, ap);
    va_end(ap);
    return code;
}

#define MAX_VIOLATIONS 500
static char *g_violations[MAX_VIOLATIONS];
static long g_violation_count;
static void report_after_exit(void);

SIM_API int simcann_violation(int code, const char *fn, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_msg(fn, fmt, ap);
    va_end(ap);
    simcann_lock();
    if (g_violation_count < MAX_VIOLATIONS) g_violations[g_violation_count] = strdup(t_msg);
    g_violation_count++;
    report_after_exit();
    simcann_unlock();
    return code;
}

SIM_API const char *aclGetRecentErrMsg(void) {
    if (!t_pending) return NULL;  /* the EP checks this after every kernel: NULL means no error */
    memcpy(t_returned, t_msg, sizeof t_returned);
    t_pending = 0;
    return t_returned;
}

/* ---------------------------------------------------------------- SIMCANN_FAIL */

#define MAX_FORCED 16
static struct { char fn[96]; int code; } g_forced[MAX_FORCED];
static int g_nforced;
static long g_forced_count;

static void parse_forced(void) {
    const char *env = getenv("SIMCANN_FAIL");
    if (!env) return;
    char *copy = strdup(env), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok && g_nforced < MAX_FORCED; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        *eq = 0;
        snprintf(g_forced[g_nforced].fn, sizeof g_forced[0].fn, "%s", tok);
        g_forced[g_nforced].code = atoi(eq + 1);
        g_nforced++;
    }
    free(copy);
}

SIM_API int simcann_forced(const char *fn) {
    for (int i = 0; i < g_nforced; i++)
        if (strcmp(g_forced[i].fn, fn) == 0) {
            simcann_lock();
            g_forced_count++;
            simcann_unlock();
            return simcann_error(g_forced[i].code, fn, "forced failure %d (SIMCANN_FAIL)", g_forced[i].code);
        }
    return 0;
}

#define FORCED(fn)                          \
    do {                                    \
        int forced_ = simcann_forced(fn);   \
        if (forced_) return forced_;        \
    } while (0)

/* ---------------------------------------------------------------- counters */

typedef struct { char *table, *key, *details; long count; } Counter;
static Counter *g_counters;
static size_t g_ncounters, g_capcounters;

SIM_API void simcann_count(const char *table, const char *key, const char *detail) {
    simcann_lock();
    Counter *c = NULL;
    for (size_t i = 0; i < g_ncounters; i++)
        if (!strcmp(g_counters[i].table, table) && !strcmp(g_counters[i].key, key)) c = &g_counters[i];
    if (!c) {
        if (g_ncounters == g_capcounters) {
            g_capcounters = g_capcounters ? 2 * g_capcounters : 64;
            g_counters = realloc(g_counters, g_capcounters * sizeof *g_counters);
        }
        c = &g_counters[g_ncounters++];
        c->table = strdup(table);
        c->key = strdup(key);
        c->details = strdup("");
        c->count = 0;
    }
    c->count++;
    if (detail && *detail) {
        /* details: distinct values, '\n'-separated */
        size_t dl = strlen(detail), have = strlen(c->details);
        int seen = 0;
        for (const char *p = c->details; *p;) {
            const char *e = strchr(p, '\n');
            if ((size_t)(e - p) == dl && !strncmp(p, detail, dl)) { seen = 1; break; }
            p = e + 1;
        }
        if (!seen) {
            c->details = realloc(c->details, have + dl + 2);
            memcpy(c->details + have, detail, dl);
            c->details[have + dl] = '\n';
            c->details[have + dl + 1] = 0;
        }
    }
    simcann_unlock();
}

typedef struct { const char *name; long value; } Gauge;
static Gauge g_gauges[16];
static int g_ngauges;

SIM_API void simcann_gauge(const char *name, long delta) {
    simcann_lock();
    int i = 0;
    while (i < g_ngauges && strcmp(g_gauges[i].name, name)) i++;
    if (i == g_ngauges && i < 16) { g_gauges[i].name = strdup(name); g_gauges[i].value = 0; g_ngauges++; }
    if (i < 16) g_gauges[i].value += delta;
    report_after_exit();
    simcann_unlock();
}

/* ---------------------------------------------------------------- device memory */

typedef struct {
    uintptr_t base;
    size_t size;    /* as asked for: the extent checks use it */
    size_t maplen;  /* page-rounded */
    int live;
    int open;
} Alloc;
static Alloc *g_allocs;
static size_t g_nallocs, g_capallocs;
static size_t g_live_bytes, g_peak_bytes;
static long g_device_mallocs, g_device_frees;

static size_t g_page;

static Alloc *find_alloc(uintptr_t p) {
    for (size_t i = 0; i < g_nallocs; i++)
        if (p >= g_allocs[i].base && p < g_allocs[i].base + g_allocs[i].maplen) return &g_allocs[i];
    return NULL;
}

SIM_API int simcann_classify(const void *ptr, size_t len) {
    simcann_lock();
    uintptr_t p = (uintptr_t)ptr;
    Alloc *a = ptr ? find_alloc(p) : NULL;
    int r = SIM_HOST;
    if (a && !a->live) r = SIM_DEVICE_FREED;
    else if (a) r = (p + len <= a->base + a->size && p < a->base + a->size) ? SIM_DEVICE : SIM_DEVICE_OVERFLOW;
    simcann_unlock();
    return r;
}

static size_t *g_open;  /* indices into g_allocs, which aclrtMalloc may move */
static size_t g_nopen, g_capopen;

SIM_API int simcann_open(const void *ptr, size_t len, const char *fn, const char *what) {
    simcann_lock();
    int r = 0;
    switch (simcann_classify(ptr, len ? len : 1)) {
    case SIM_HOST:
        r = simcann_violation(ACL_ERROR_INVALID_PARAM, fn, "%s %p (%zu bytes) is not device memory (no live aclrtMalloc allocation holds it)", what, ptr, len);
        break;
    case SIM_DEVICE_FREED:
        r = simcann_violation(ACL_ERROR_INVALID_PARAM, fn, "%s %p lies in device memory already freed by aclrtFree", what, ptr);
        break;
    case SIM_DEVICE_OVERFLOW: {
        Alloc *a = find_alloc((uintptr_t)ptr);
        r = simcann_violation(ACL_ERROR_INVALID_PARAM, fn, "%s %p + %zu bytes runs past the end of its allocation (%p, %zu bytes)", what, ptr, len, (void *)a->base, a->size);
        break;
    }
    default: {
        Alloc *a = find_alloc((uintptr_t)ptr);
        if (a->open++ == 0) {
            mprotect((void *)a->base, a->maplen, PROT_READ | PROT_WRITE);
            if (g_nopen == g_capopen) {
                g_capopen = g_capopen ? 2 * g_capopen : 16;
                g_open = realloc(g_open, g_capopen * sizeof *g_open);
            }
            g_open[g_nopen++] = (size_t)(a - g_allocs);
        }
    }
    }
    simcann_unlock();
    return r;
}

SIM_API void simcann_close_all(void) {
    simcann_lock();
    for (size_t i = 0; i < g_nopen; i++) {
        Alloc *a = &g_allocs[g_open[i]];
        a->open = 0;
        mprotect((void *)a->base, a->maplen, PROT_NONE);
    }
    g_nopen = 0;
    simcann_unlock();
}

/* ---------------------------------------------------------------- init, device, streams, events */

static int g_initialized, g_finalized, g_device_set = -1;
#define NDEVICES 1

SIM_API aclError aclInit(const char *configPath) {
    (void)configPath;
    FORCED("aclInit");
    simcann_lock();
    int r = g_initialized && !g_finalized ? simcann_error(ACL_ERROR_REPEAT_INITIALIZE, "aclInit", "repeated initialisation")
                                          : ACL_SUCCESS;
    g_initialized = 1;
    g_finalized = 0;
    simcann_unlock();
    return r;
}

SIM_API aclError aclFinalize(void) {
    FORCED("aclFinalize");
    simcann_lock();
    int r = g_initialized ? ACL_SUCCESS : simcann_error(ACL_ERROR_UNINITIALIZE, "aclFinalize", "aclInit was not called");
    g_finalized = 1;
    report_after_exit();
    simcann_unlock();
    return r;
}

SIM_API aclError aclrtSetDevice(int32_t deviceId) {
    FORCED("aclrtSetDevice");
    if (deviceId < 0 || deviceId >= NDEVICES)
        return simcann_error(ACL_ERROR_RT_INVALID_DEVICEID, "aclrtSetDevice", "device %d does not exist (%d device)", deviceId, NDEVICES);
    simcann_lock();
    g_device_set = deviceId;
    simcann_unlock();
    return ACL_SUCCESS;
}

SIM_API aclError aclrtResetDevice(int32_t deviceId) {
    (void)deviceId;
    return ACL_SUCCESS;
}

SIM_API aclError aclrtGetDevice(int32_t *deviceId) {
    if (!deviceId) return ACL_ERROR_INVALID_PARAM;
    if (g_device_set < 0) return ACL_ERROR_RT_CONTEXT_NULL;  /* a query: no message */
    *deviceId = g_device_set;
    return ACL_SUCCESS;
}

SIM_API aclError aclrtGetDeviceCount(uint32_t *count) {
    if (!count) return ACL_ERROR_INVALID_PARAM;
    *count = NDEVICES;
    return ACL_SUCCESS;
}

SIM_API const char *aclrtGetSocName(void) { return "Ascend910B1"; }

static int need_device(const char *fn) {
    if (g_device_set >= 0) return 0;
    return simcann_violation(ACL_ERROR_RT_CONTEXT_NULL, fn, "no device set (call aclrtSetDevice first)");
}

#define STREAM_MAGIC 0x5354524dU
#define EVENT_MAGIC 0x45564e54U
typedef struct { uint32_t magic; int live; } Handle;
static Handle **g_handles;
static size_t g_nhandles, g_caphandles;
static long g_live_streams, g_live_events;

static Handle *new_handle(uint32_t magic) {
    Handle *h = calloc(1, sizeof *h);
    h->magic = magic;
    h->live = 1;
    if (g_nhandles == g_caphandles) {
        g_caphandles = g_caphandles ? 2 * g_caphandles : 16;
        g_handles = realloc(g_handles, g_caphandles * sizeof *g_handles);
    }
    g_handles[g_nhandles++] = h;  /* never freed: a stale handle stays recognisable */
    return h;
}

/* 1 live, 0 destroyed, -1 never created */
static int handle_state(const void *p, uint32_t magic) {
    for (size_t i = 0; i < g_nhandles; i++)
        if ((void *)g_handles[i] == p && g_handles[i]->magic == magic) return g_handles[i]->live;
    return -1;
}

SIM_API int simcann_stream_live(aclrtStream s, int allow_default) {
    if (!s) return allow_default;
    simcann_lock();
    int r = handle_state(s, STREAM_MAGIC) == 1;
    simcann_unlock();
    return r;
}

static int check_stream(aclrtStream s, const char *fn) {
    if (simcann_stream_live(s, 1)) return 0;
    simcann_lock();
    int st = handle_state(s, STREAM_MAGIC);
    simcann_unlock();
    return simcann_violation(ACL_ERROR_RT_INVALID_HANDLE, fn, "stream %p %s", s, st == 0 ? "was destroyed" : "was not created by aclrtCreateStream");
}

SIM_API aclError aclrtCreateStream(aclrtStream *stream) {
    FORCED("aclrtCreateStream");
    if (!stream) return simcann_error(ACL_ERROR_INVALID_PARAM, "aclrtCreateStream", "stream is null");
    simcann_lock();
    int r = need_device("aclrtCreateStream");
    if (!r) {
        *stream = new_handle(STREAM_MAGIC);
        g_live_streams++;
    }
    simcann_unlock();
    return r;
}

SIM_API aclError aclrtDestroyStream(aclrtStream stream) {
    FORCED("aclrtDestroyStream");
    simcann_lock();
    int r = ACL_SUCCESS;
    if (handle_state(stream, STREAM_MAGIC) != 1)
        r = simcann_violation(ACL_ERROR_RT_INVALID_HANDLE, "aclrtDestroyStream", "stream %p is not a live stream (destroyed twice, or never created)", stream);
    else {
        ((Handle *)stream)->live = 0;
        g_live_streams--;
        report_after_exit();
    }
    simcann_unlock();
    return r;
}

/* Everything runs synchronously at the call: a synchronisation only checks its handle. */
SIM_API aclError aclrtSynchronizeStream(aclrtStream stream) {
    FORCED("aclrtSynchronizeStream");
    return check_stream(stream, "aclrtSynchronizeStream");
}

SIM_API aclError aclrtSynchronizeDevice(void) {
    FORCED("aclrtSynchronizeDevice");
    return ACL_SUCCESS;
}

static int check_event(aclrtEvent e, const char *fn) {
    simcann_lock();
    int st = handle_state(e, EVENT_MAGIC);
    simcann_unlock();
    if (st == 1) return 0;
    return simcann_violation(ACL_ERROR_RT_INVALID_HANDLE, fn, "event %p %s", e, st == 0 ? "was destroyed" : "was not created by aclrtCreateEvent");
}

SIM_API aclError aclrtCreateEvent(aclrtEvent *event) {
    FORCED("aclrtCreateEvent");
    if (!event) return simcann_error(ACL_ERROR_INVALID_PARAM, "aclrtCreateEvent", "event is null");
    simcann_lock();
    *event = new_handle(EVENT_MAGIC);
    g_live_events++;
    simcann_unlock();
    return ACL_SUCCESS;
}

SIM_API aclError aclrtDestroyEvent(aclrtEvent event) {
    FORCED("aclrtDestroyEvent");
    int r = check_event(event, "aclrtDestroyEvent");
    if (r) return r;
    simcann_lock();
    ((Handle *)event)->live = 0;
    g_live_events--;
    report_after_exit();
    simcann_unlock();
    return ACL_SUCCESS;
}

SIM_API aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream) {
    FORCED("aclrtRecordEvent");
    int r = check_event(event, "aclrtRecordEvent");
    return r ? r : check_stream(stream, "aclrtRecordEvent");
}

SIM_API aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event) {
    FORCED("aclrtStreamWaitEvent");
    int r = check_event(event, "aclrtStreamWaitEvent");
    return r ? r : check_stream(stream, "aclrtStreamWaitEvent");
}

SIM_API aclError aclrtSynchronizeEvent(aclrtEvent event) {
    FORCED("aclrtSynchronizeEvent");
    return check_event(event, "aclrtSynchronizeEvent");
}

/* ---------------------------------------------------------------- malloc / free */

SIM_API aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy) {
    (void)policy;
    FORCED("aclrtMalloc");
    if (!devPtr) return simcann_error(ACL_ERROR_INVALID_PARAM, "aclrtMalloc", "devPtr is null");
    if (size == 0) return simcann_error(ACL_ERROR_INVALID_PARAM, "aclrtMalloc", "size is 0");
    simcann_lock();
    int r = need_device("aclrtMalloc");
    if (!r) {
        if (!g_page) g_page = (size_t)sysconf(_SC_PAGESIZE);
        size_t maplen = (size + g_page - 1) / g_page * g_page;
        void *p = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            r = simcann_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMalloc", "out of memory (%zu bytes)", size);
        } else {
            memset(p, 0xFF, maplen);
            mprotect(p, maplen, PROT_NONE);
            if (g_nallocs == g_capallocs) {
                g_capallocs = g_capallocs ? 2 * g_capallocs : 64;
                g_allocs = realloc(g_allocs, g_capallocs * sizeof *g_allocs);
            }
            g_allocs[g_nallocs++] = (Alloc){(uintptr_t)p, size, maplen, 1, 0};
            g_live_bytes += size;
            if (g_live_bytes > g_peak_bytes) g_peak_bytes = g_live_bytes;
            g_device_mallocs++;
            *devPtr = p;
        }
    }
    simcann_unlock();
    return r;
}

SIM_API aclError aclrtFree(void *devPtr) {
    FORCED("aclrtFree");
    if (!devPtr) return simcann_error(ACL_ERROR_INVALID_PARAM, "aclrtFree", "devPtr is null");
    simcann_lock();
    int r = ACL_SUCCESS;
    Alloc *a = find_alloc((uintptr_t)devPtr);
    if (!a)
        r = simcann_violation(ACL_ERROR_RT_MEMORY_FREE, "aclrtFree", "%p is not device memory from aclrtMalloc", devPtr);
    else if (!a->live)
        r = simcann_violation(ACL_ERROR_RT_MEMORY_FREE, "aclrtFree", "double free of %p (%zu bytes)", devPtr, a->size);
    else if (a->base != (uintptr_t)devPtr)
        r = simcann_violation(ACL_ERROR_RT_MEMORY_FREE, "aclrtFree", "%p points inside an allocation (%p), not at its start", devPtr, (void *)a->base);
    else {
        a->live = 0;
        madvise((void *)a->base, a->maplen, MADV_DONTNEED);  /* pages dropped, range kept PROT_NONE */
        g_live_bytes -= a->size;
        g_device_frees++;
        report_after_exit();
    }
    simcann_unlock();
    return r;
}

typedef struct { void *p; size_t size; int live; } HostAlloc;
static HostAlloc *g_hosts;
static size_t g_nhosts, g_caphosts, g_live_host_bytes;

SIM_API aclError aclrtMallocHost(void **hostPtr, size_t size) {
    FORCED("aclrtMallocHost");
    if (!hostPtr || size == 0) return simcann_error(ACL_ERROR_INVALID_PARAM, "aclrtMallocHost", "hostPtr null or size 0");
    void *p = NULL;
    if (posix_memalign(&p, 64, size)) return simcann_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtMallocHost", "out of memory");
    simcann_lock();
    if (g_nhosts == g_caphosts) {
        g_caphosts = g_caphosts ? 2 * g_caphosts : 16;
        g_hosts = realloc(g_hosts, g_caphosts * sizeof *g_hosts);
    }
    g_hosts[g_nhosts++] = (HostAlloc){p, size, 1};
    g_live_host_bytes += size;
    *hostPtr = p;
    simcann_unlock();
    return ACL_SUCCESS;
}

SIM_API aclError aclrtFreeHost(void *hostPtr) {
    FORCED("aclrtFreeHost");
    simcann_lock();
    int r = ACL_ERROR_RT_MEMORY_FREE;
    for (size_t i = g_nhosts; i-- > 0;)
        if (g_hosts[i].p == hostPtr && g_hosts[i].live) {
            g_hosts[i].live = 0;
            g_live_host_bytes -= g_hosts[i].size;
            free(hostPtr);
            r = ACL_SUCCESS;
            break;
        }
    if (r) r = simcann_violation(r, "aclrtFreeHost", "%p is not live memory from aclrtMallocHost (double free?)", hostPtr);
    else report_after_exit();
    simcann_unlock();
    return r;
}

/* ---------------------------------------------------------------- memcpy / memset */

static const char *kind_name(int kind) {
    static const char *names[] = {"ACL_MEMCPY_HOST_TO_HOST", "ACL_MEMCPY_HOST_TO_DEVICE", "ACL_MEMCPY_DEVICE_TO_HOST", "ACL_MEMCPY_DEVICE_TO_DEVICE"};
    return kind >= 0 && kind < 4 ? names[kind] : "an unknown kind";
}

static long g_memcpy_counts[4];

static int do_memcpy(const char *fn, void *dst, size_t destMax, const void *src, size_t count, int kind) {
    if (kind < 0 || kind > 3) return simcann_violation(ACL_ERROR_INVALID_PARAM, fn, "kind %d is not an aclrtMemcpyKind", kind);
    if (count > destMax) return simcann_violation(ACL_ERROR_INVALID_PARAM, fn, "count %zu > destMax %zu", count, destMax);
    if (count == 0) return ACL_SUCCESS;
    if (!dst || !src) return simcann_violation(ACL_ERROR_INVALID_PARAM, fn, "null pointer (dst %p, src %p)", dst, src);
    int src_dev = kind == ACL_MEMCPY_DEVICE_TO_HOST || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
    int dst_dev = kind == ACL_MEMCPY_HOST_TO_DEVICE || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
    simcann_lock();
    int r = need_device(fn);
    /* The kind must say where each pointer really lives. */
    if (!r && !src_dev && simcann_classify(src, 1) != SIM_HOST)
        r = simcann_violation(ACL_ERROR_INVALID_PARAM, fn, "%s but src %p is device memory", kind_name(kind), src);
    if (!r && !dst_dev && simcann_classify(dst, 1) != SIM_HOST)
        r = simcann_violation(ACL_ERROR_INVALID_PARAM, fn, "%s but dst %p is device memory", kind_name(kind), dst);
    if (!r && src_dev) r = simcann_open(src, count, fn, "src");
    if (!r && dst_dev) r = simcann_open(dst, count, fn, "dst");
    if (!r) {
        memmove(dst, src, count);
        g_memcpy_counts[kind]++;
    }
    simcann_close_all();
    simcann_unlock();
    return r;
}

SIM_API aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind) {
    FORCED("aclrtMemcpy");
    return do_memcpy("aclrtMemcpy", dst, destMax, src, count, kind);
}

SIM_API aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind, aclrtStream stream) {
    FORCED("aclrtMemcpyAsync");
    int r = check_stream(stream, "aclrtMemcpyAsync");
    return r ? r : do_memcpy("aclrtMemcpyAsync", dst, destMax, src, count, kind);
}

static int do_memset(const char *fn, void *devPtr, size_t maxCount, int32_t value, size_t count) {
    if (count > maxCount) return simcann_violation(ACL_ERROR_INVALID_PARAM, fn, "count %zu > maxCount %zu", count, maxCount);
    if (count == 0) return ACL_SUCCESS;
    simcann_lock();
    int r = need_device(fn);
    if (!r) r = simcann_open(devPtr, count, fn, "devPtr");
    if (!r) memset(devPtr, value, count);
    simcann_close_all();
    simcann_unlock();
    return r;
}

SIM_API aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count) {
    FORCED("aclrtMemset");
    return do_memset("aclrtMemset", devPtr, maxCount, value, count);
}

SIM_API aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream) {
    FORCED("aclrtMemsetAsync");
    int r = check_stream(stream, "aclrtMemsetAsync");
    return r ? r : do_memset("aclrtMemsetAsync", devPtr, maxCount, value, count);
}

SIM_API size_t aclDataTypeSize(aclDataType dataType) {
    switch (dataType) {
    case ACL_FLOAT: case ACL_INT32: case ACL_UINT32: return 4;
    case ACL_FLOAT16: case ACL_BF16: case ACL_INT16: case ACL_UINT16: return 2;
    case ACL_INT8: case ACL_UINT8: case ACL_BOOL: return 1;
    case ACL_INT64: case ACL_UINT64: case ACL_DOUBLE: return 8;
    default: return 0;
    }
}

/* ---------------------------------------------------------------- aclmdl* (graph mode): refused */

#define GRAPH_MODE_MSG "graph mode is not simulated: run the CANN EP with enable_cann_graph=0"
#define MDL_FAIL(fn) simcann_error(ACL_ERROR_FEATURE_UNSUPPORTED, fn, GRAPH_MODE_MSG)

SIM_API aclmdlDesc *aclmdlCreateDesc(void) { MDL_FAIL("aclmdlCreateDesc"); return NULL; }
SIM_API aclError aclmdlDestroyDesc(aclmdlDesc *d) { (void)d; return MDL_FAIL("aclmdlDestroyDesc"); }
SIM_API aclError aclmdlGetDesc(aclmdlDesc *d, uint32_t id) { (void)d; (void)id; return MDL_FAIL("aclmdlGetDesc"); }
SIM_API size_t aclmdlGetNumInputs(aclmdlDesc *d) { (void)d; MDL_FAIL("aclmdlGetNumInputs"); return 0; }
SIM_API size_t aclmdlGetNumOutputs(aclmdlDesc *d) { (void)d; MDL_FAIL("aclmdlGetNumOutputs"); return 0; }
SIM_API size_t aclmdlGetInputSizeByIndex(aclmdlDesc *d, size_t i) { (void)d; (void)i; MDL_FAIL("aclmdlGetInputSizeByIndex"); return 0; }
SIM_API size_t aclmdlGetOutputSizeByIndex(aclmdlDesc *d, size_t i) { (void)d; (void)i; MDL_FAIL("aclmdlGetOutputSizeByIndex"); return 0; }
SIM_API aclError aclmdlGetOutputDims(const aclmdlDesc *d, size_t i, aclmdlIODims *dims) { (void)d; (void)i; (void)dims; return MDL_FAIL("aclmdlGetOutputDims"); }
SIM_API aclmdlDataset *aclmdlCreateDataset(void) { MDL_FAIL("aclmdlCreateDataset"); return NULL; }
SIM_API aclError aclmdlDestroyDataset(const aclmdlDataset *d) { (void)d; return MDL_FAIL("aclmdlDestroyDataset"); }
SIM_API aclError aclmdlAddDatasetBuffer(aclmdlDataset *d, aclDataBuffer *b) { (void)d; (void)b; return MDL_FAIL("aclmdlAddDatasetBuffer"); }
SIM_API aclDataBuffer *aclmdlGetDatasetBuffer(const aclmdlDataset *d, size_t i) { (void)d; (void)i; MDL_FAIL("aclmdlGetDatasetBuffer"); return NULL; }
SIM_API aclTensorDesc *aclmdlGetDatasetTensorDesc(const aclmdlDataset *d, size_t i) { (void)d; (void)i; MDL_FAIL("aclmdlGetDatasetTensorDesc"); return NULL; }
SIM_API aclError aclmdlLoadFromFile(const char *f, uint32_t *id) { (void)f; (void)id; return MDL_FAIL("aclmdlLoadFromFile"); }
SIM_API aclError aclmdlLoadFromMem(const void *m, size_t n, uint32_t *id) { (void)m; (void)n; (void)id; return MDL_FAIL("aclmdlLoadFromMem"); }
SIM_API aclError aclmdlUnload(uint32_t id) { (void)id; return MDL_FAIL("aclmdlUnload"); }
SIM_API aclError aclmdlExecute(uint32_t id, const aclmdlDataset *in, aclmdlDataset *out) { (void)id; (void)in; (void)out; return MDL_FAIL("aclmdlExecute"); }
SIM_API aclError aclmdlExecuteAsync(uint32_t id, const aclmdlDataset *in, aclmdlDataset *out, aclrtStream s) { (void)id; (void)in; (void)out; (void)s; return MDL_FAIL("aclmdlExecuteAsync"); }

/* ---------------------------------------------------------------- the report */

typedef struct { char *s; size_t n, cap; } Buf;

static void put(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(Buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (b->s && b->n + (size_t)k < b->cap) { b->n += (size_t)k; return; }
        b->cap = (b->cap + (size_t)k + 1) * 2;
        b->s = realloc(b->s, b->cap);
    }
}

static void put_str(Buf *b, const char *s) {
    put(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') put(b, "\\%c", c);
        else if (c < 0x20) put(b, "\\u%04x", c);
        else put(b, "%c", c);
    }
    put(b, "\"");
}

/* Always listed, so a test can see a zero. */
static const char *k_aclnn[] = {
    "aclnnSiluBackwardGetWorkspaceSize", "aclnnSiluBackward",
    "aclnnMishBackwardGetWorkspaceSize", "aclnnMishBackward",
    "aclnnGroupNormSwishGradGetWorkspaceSize", "aclnnGroupNormSwishGrad",
    "aclnnGroupNormSwishGetWorkspaceSize", "aclnnGroupNormSwish",
};

static long counter_value(const char *table, const char *key) {
    for (size_t i = 0; i < g_ncounters; i++)
        if (!strcmp(g_counters[i].table, table) && !strcmp(g_counters[i].key, key)) return g_counters[i].count;
    return 0;
}

static long gauge_value(const char *name) {
    for (int i = 0; i < g_ngauges; i++)
        if (!strcmp(g_gauges[i].name, name)) return g_gauges[i].value;
    return 0;
}

static char *g_report;

SIM_API const char *simcann_report(void) {
    simcann_lock();
    Buf b = {0};
    put(&b, "{\"aclnn_calls\": {");
    for (size_t i = 0; i < sizeof k_aclnn / sizeof *k_aclnn; i++)
        put(&b, "%s\"%s\": %ld", i ? ", " : "", k_aclnn[i], counter_value("aclnn", k_aclnn[i]));
    const char *tables[] = {"aclop", "aclop_unsupported"};
    for (int t = 0; t < 2; t++) {
        put(&b, "}, \"%s_calls\": {", tables[t]);
        int first = 1;
        for (size_t i = 0; i < g_ncounters; i++)
            if (!strcmp(g_counters[i].table, tables[t])) {
                put(&b, "%s", first ? "" : ", ");
                put_str(&b, g_counters[i].key);
                put(&b, ": %ld", g_counters[i].count);
                first = 0;
            }
    }
    put(&b, "}, \"aclop_dtypes\": {");
    int first = 1;
    for (size_t i = 0; i < g_ncounters; i++)
        if (!strcmp(g_counters[i].table, "aclop")) {
            put(&b, "%s", first ? "" : ", ");
            put_str(&b, g_counters[i].key);
            put(&b, ": [");
            int f2 = 1;
            for (char *p = g_counters[i].details; *p;) {
                char *e = strchr(p, '\n');
                *e = 0;
                put(&b, "%s", f2 ? "" : ", ");
                put_str(&b, p);
                *e = '\n';
                f2 = 0;
                p = e + 1;
            }
            put(&b, "]");
            first = 0;
        }
    put(&b, "}, \"violations\": [");
    for (long i = 0; i < g_violation_count && i < MAX_VIOLATIONS; i++) {
        put(&b, "%s", i ? ", " : "");
        put_str(&b, g_violations[i]);
    }
    size_t live_allocs = 0;
    for (size_t i = 0; i < g_nallocs; i++) live_allocs += g_allocs[i].live;
    put(&b, "], \"violation_count\": %ld, \"forced_failures\": %ld", g_violation_count, g_forced_count);
    put(&b, ", \"live_device_bytes\": %zu, \"live_device_allocations\": %zu, \"peak_device_bytes\": %zu", g_live_bytes, live_allocs, g_peak_bytes);
    put(&b, ", \"device_mallocs\": %ld, \"device_frees\": %ld, \"live_host_bytes\": %zu", g_device_mallocs, g_device_frees, g_live_host_bytes);
    put(&b, ", \"memcpy\": {\"host_to_host\": %ld, \"host_to_device\": %ld, \"device_to_host\": %ld, \"device_to_device\": %ld}",
        g_memcpy_counts[0], g_memcpy_counts[1], g_memcpy_counts[2], g_memcpy_counts[3]);
    put(&b, ", \"live_streams\": %ld, \"live_events\": %ld", g_live_streams, g_live_events);
    const char *gauges[] = {"live_tensors", "unused_executors", "live_tensor_descs", "live_data_buffers", "live_op_attrs"};
    for (int i = 0; i < 5; i++) put(&b, ", \"%s\": %ld", gauges[i], gauge_value(gauges[i]));
    put(&b, ", \"initialized\": %s, \"finalized\": %s}", g_initialized ? "true" : "false", g_finalized ? "true" : "false");
    free(g_report);
    g_report = b.s;
    simcann_unlock();
    return g_report;
}

/* SIMCANN_REPORT=<file>: written when this library is unloaded at exit, and written again by any
 * later call that changes what it says (onnxruntime may tear down after this library's
 * destructor ran, depending on load order), so the file always holds the final state. */
static int g_exited;

static void write_report(void) {
    const char *path = getenv("SIMCANN_REPORT");
    if (!path || !*path) return;
    const char *json = simcann_report();
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fputs(json, f);
    fclose(f);
    rename(tmp, path);
}

static void report_after_exit(void) {
    if (g_exited) write_report();
}

__attribute__((constructor)) static void sim_init(void) {
    pthread_once(&g_once, init_lock);
    parse_forced();
}

__attribute__((destructor)) static void sim_exit(void) {
    simcann_lock();
    g_exited = 1;
    write_report();
    simcann_unlock();
}
