/*
 * A fake CUDA runtime for tests on hosts without a GPU: a shared library
 * exporting the CUDA runtime entry points libhvd loads (core/exec/cuda_runtime.cc),
 * selected with HVD_CUDA_RUNTIME=<path of this library>.
 *
 *  - Devices: HVD_FAKE_CUDA_DEVICES (default 2; 0 = "no device", as CUDA's
 *    cudaErrorNoDevice).
 *  - "Device memory" is host memory from cudaMalloc, remembered with its
 *    device so that cudaPointerGetAttributes reports it as device memory;
 *    every other pointer is unregistered host memory (cudaHostAlloc's:
 *    page-locked host).
 *  - Streams are queues: cudaMemcpyAsync and fake_cuda_fill_async append
 *    to the stream's queue, which runs only when the stream is synchronized
 *    (cudaStreamSynchronize, an event recorded on it and synchronized, a
 *    stream made to wait for such an event). A caller that reads a copy
 *    before synchronizing its stream reads stale memory, and a copy issued
 *    on another stream than the data's runs before the work it should
 *    follow: tests see both.
 *  - cudaMemcpyAsync checks its direction against the pointers: the device
 *    side must be cudaMalloc memory, the host side must not be.
 *  - cudaLaunchHostFunc queues a host function on the stream, run in order
 *    with the stream's copies when it is synchronized: the fake CUDA
 *    kernels (fake_cuda_kernels.cc) launch through it.
 *  - Counters (fake_cuda_stats) let tests assert what happened.
 * Thread-safe (one lock): ranks as threads share it.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int cudaError_t;
enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoDevice = 100
};

struct cudaPointerAttributes {
    int type;
    int device;
    void *devicePointer;
    void *hostPointer;
    long reserved[8];
};

typedef struct fake_cuda_stats {
    long get_device_count;
    long set_device;
    long host_alloc;
    long free_host;
    long copies_to_host;    /* cudaMemcpyAsync device -> host   */
    long copies_to_device;  /* host -> device                   */
    long copies_on_device;  /* device -> device                 */
    long bytes_to_host;
    long bytes_to_device;
    long stream_syncs;
    long event_syncs;
    long pointer_queries;
    long bad_copies;        /* direction did not match the memory */
    long pending;           /* operations queued and not yet run  */
    long dropped;           /* queued operations on memory freed before they ran */
    void *last_copy_stream; /* the stream of the last cudaMemcpyAsync */
} fake_cuda_stats_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static fake_cuda_stats_t g_stats;
static __thread int t_device = 0;
static long g_mallocs;

/* cudaMalloc'd ranges. */
struct region {
    uintptr_t lo, hi;
    int device;
    struct region *next;
};
static struct region *g_regions;

/* Per-stream queues of pending operations (a copy of bytes to put at dst). */
struct op {
    void *dst;
    const void *src;  /* NULL: data holds the bytes (a fill) */
    unsigned char *data;
    size_t n;
    void (*fn)(void *); /* a host function (cudaLaunchHostFunc): runs fn(arg) */
    void *arg;
    struct op *next;
};
struct stream_q {
    void *stream;
    struct op *head, *tail;
    struct stream_q *next;
};
static struct stream_q *g_streams;

struct event {
    void *stream;
    int recorded;
};

static int devices(void) {
    const char *e = getenv("HVD_FAKE_CUDA_DEVICES");
    return e != NULL ? atoi(e) : 2;
}

static struct region *find_region(const void *p) {
    uintptr_t a = (uintptr_t)p;
    for (struct region *r = g_regions; r != NULL; r = r->next) {
        if (a >= r->lo && a < r->hi) return r;
    }
    return NULL;
}

static struct stream_q *queue_of(void *stream) {
    for (struct stream_q *q = g_streams; q != NULL; q = q->next) {
        if (q->stream == stream) return q;
    }
    struct stream_q *q = calloc(1, sizeof(*q));
    q->stream = stream;
    q->next = g_streams;
    g_streams = q;
    return q;
}

static void enqueue(void *stream, struct op *o) {
    struct stream_q *q = queue_of(stream);
    if (q->tail != NULL) q->tail->next = o;
    else q->head = o;
    q->tail = o;
    ++g_stats.pending;
}

static void flush(void *stream) {
    struct stream_q *q = queue_of(stream);
    for (struct op *o = q->head; o != NULL;) {
        struct op *next = o->next;
        if (o->fn != NULL) {
            o->fn(o->arg);
        } else {
            memcpy(o->dst, o->src != NULL ? o->src : o->data, o->n);
        }
        free(o->data);
        free(o);
        --g_stats.pending;
        o = next;
    }
    q->head = q->tail = NULL;
}

EXPORT cudaError_t cudaGetDeviceCount(int *count) {
    pthread_mutex_lock(&g_mu);
    ++g_stats.get_device_count;
    pthread_mutex_unlock(&g_mu);
    int n = devices();
    *count = n > 0 ? n : 0;
    return n > 0 ? cudaSuccess : cudaErrorNoDevice;
}

EXPORT cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= devices()) return cudaErrorInvalidDevice;
    pthread_mutex_lock(&g_mu);
    ++g_stats.set_device;
    pthread_mutex_unlock(&g_mu);
    t_device = device;
    return cudaSuccess;
}

EXPORT cudaError_t cudaGetDevice(int *device) {
    *device = t_device;
    return cudaSuccess;
}

EXPORT cudaError_t cudaMalloc(void **p, size_t bytes) {
    *p = malloc(bytes > 0 ? bytes : 1);
    if (*p == NULL) return cudaErrorMemoryAllocation;
    struct region *r = malloc(sizeof(*r));
    r->lo = (uintptr_t)*p;
    r->hi = r->lo + (bytes > 0 ? bytes : 1);
    r->device = t_device;
    pthread_mutex_lock(&g_mu);
    ++g_mallocs;
    r->next = g_regions;
    g_regions = r;
    pthread_mutex_unlock(&g_mu);
    return cudaSuccess;
}

/* Queued operations reading or writing [lo, hi) are dropped (counted): the
 * memory goes before they ran, a caller's bug that tests should see. */
static void drop_ops(uintptr_t lo, uintptr_t hi) {
    for (struct stream_q *q = g_streams; q != NULL; q = q->next) {
        struct op **po = &q->head;
        q->tail = NULL;
        while (*po != NULL) {
            struct op *o = *po;
            const uintptr_t d = (uintptr_t)o->dst, s = (uintptr_t)o->src;
            const int hit = (d < hi && d + o->n > lo) || (o->src != NULL && s < hi && s + o->n > lo);
            if (hit) {
                *po = o->next;
                free(o->data);
                free(o);
                --g_stats.pending;
                ++g_stats.dropped;
            } else {
                q->tail = o;
                po = &o->next;
            }
        }
    }
}

EXPORT cudaError_t cudaFree(void *p) {
    pthread_mutex_lock(&g_mu);
    for (struct region **pr = &g_regions; *pr != NULL; pr = &(*pr)->next) {
        if ((*pr)->lo == (uintptr_t)p) {
            struct region *r = *pr;
            drop_ops(r->lo, r->hi);
            *pr = r->next;
            free(r);
            break;
        }
    }
    pthread_mutex_unlock(&g_mu);
    free(p);
    return cudaSuccess;
}

EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
    memset(a, 0, sizeof(*a));
    pthread_mutex_lock(&g_mu);
    ++g_stats.pointer_queries;
    struct region *r = find_region(p);
    if (r != NULL) {
        a->type = 2; /* cudaMemoryTypeDevice */
        a->device = r->device;
        a->devicePointer = (void *)p;
    } else {
        a->type = 0; /* unregistered host memory */
        a->device = -2;
        a->hostPointer = (void *)p;
    }
    pthread_mutex_unlock(&g_mu);
    return cudaSuccess;
}

EXPORT cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags) {
    (void)flags;
    *p = malloc(bytes > 0 ? bytes : 1);
    if (*p == NULL) return cudaErrorMemoryAllocation;
    pthread_mutex_lock(&g_mu);
    ++g_stats.host_alloc;
    pthread_mutex_unlock(&g_mu);
    return cudaSuccess;
}

EXPORT cudaError_t cudaFreeHost(void *p) {
    pthread_mutex_lock(&g_mu);
    ++g_stats.free_host;
    pthread_mutex_unlock(&g_mu);
    free(p);
    return cudaSuccess;
}

/* kind: 1 host->device, 2 device->host, 3 device->device, 4 default. */
EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream) {
    pthread_mutex_lock(&g_mu);
    const int dst_dev = n == 0 || find_region(dst) != NULL;
    const int src_dev = n == 0 || find_region(src) != NULL;
    int ok = 1;
    if (kind == 1) {
        ok = dst_dev && !src_dev;
        ++g_stats.copies_to_device;
        g_stats.bytes_to_device += (long)n;
    } else if (kind == 2) {
        ok = src_dev && !dst_dev;
        ++g_stats.copies_to_host;
        g_stats.bytes_to_host += (long)n;
    } else if (kind == 3) {
        ok = src_dev && dst_dev;
        ++g_stats.copies_on_device;
    }
    g_stats.last_copy_stream = stream;
    if (!ok) {
        ++g_stats.bad_copies;
        pthread_mutex_unlock(&g_mu);
        return cudaErrorInvalidValue;
    }
    struct op *o = calloc(1, sizeof(*o));
    o->dst = dst;
    o->src = src;
    o->n = n;
    enqueue(stream, o);
    pthread_mutex_unlock(&g_mu);
    return cudaSuccess;
}

EXPORT cudaError_t cudaStreamSynchronize(void *stream) {
    pthread_mutex_lock(&g_mu);
    ++g_stats.stream_syncs;
    flush(stream);
    pthread_mutex_unlock(&g_mu);
    return cudaSuccess;
}

EXPORT cudaError_t cudaEventCreateWithFlags(void **ev, unsigned flags) {
    (void)flags;
    *ev = calloc(1, sizeof(struct event));
    return *ev != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

EXPORT cudaError_t cudaEventRecord(void *ev, void *stream) {
    struct event *e = ev;
    e->stream = stream;
    e->recorded = 1;
    return cudaSuccess;
}

EXPORT cudaError_t cudaEventSynchronize(void *ev) {
    struct event *e = ev;
    pthread_mutex_lock(&g_mu);
    ++g_stats.event_syncs;
    if (e->recorded) flush(e->stream);
    pthread_mutex_unlock(&g_mu);
    return cudaSuccess;
}

EXPORT cudaError_t cudaEventDestroy(void *ev) {
    free(ev);
    return cudaSuccess;
}

EXPORT cudaError_t cudaStreamWaitEvent(void *stream, void *ev, unsigned flags) {
    (void)stream;
    (void)flags;
    struct event *e = ev;
    pthread_mutex_lock(&g_mu);
    if (e->recorded) flush(e->stream);
    pthread_mutex_unlock(&g_mu);
    return cudaSuccess;
}

EXPORT const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        default: return "unknown error";
    }
}

/* The function runs when the stream is synchronized, after the work queued
 * before it; it must not call back into this library (the lock is held). */
EXPORT cudaError_t cudaLaunchHostFunc(void *stream, void (*fn)(void *), void *arg) {
    if (fn == NULL) return cudaErrorInvalidValue;
    struct op *o = calloc(1, sizeof(*o));
    o->fn = fn;
    o->arg = arg;
    pthread_mutex_lock(&g_mu);
    enqueue(stream, o);
    pthread_mutex_unlock(&g_mu);
    return cudaSuccess;
}

/* ---- test hooks (not CUDA's) ------------------------------------------- */

/* Queues a write of n bytes of `value` at dst on `stream`: "a kernel" that
 * runs when the stream is synchronized. */
EXPORT void fake_cuda_fill_async(void *dst, const void *value, size_t n, void *stream) {
    struct op *o = calloc(1, sizeof(*o));
    o->dst = dst;
    o->data = malloc(n > 0 ? n : 1);
    memcpy(o->data, value, n);
    o->n = n;
    pthread_mutex_lock(&g_mu);
    enqueue(stream, o);
    pthread_mutex_unlock(&g_mu);
}

/* cudaMalloc calls so far, and the ranges not yet freed. */
EXPORT long fake_cuda_mallocs(void) {
    pthread_mutex_lock(&g_mu);
    long n = g_mallocs;
    pthread_mutex_unlock(&g_mu);
    return n;
}
EXPORT long fake_cuda_live_allocations(void) {
    pthread_mutex_lock(&g_mu);
    long n = 0;
    for (struct region *r = g_regions; r != NULL; r = r->next) ++n;
    pthread_mutex_unlock(&g_mu);
    return n;
}

EXPORT void fake_cuda_stats(fake_cuda_stats_t *out) {
    pthread_mutex_lock(&g_mu);
    *out = g_stats;
    pthread_mutex_unlock(&g_mu);
}

EXPORT void fake_cuda_reset_stats(void) {
    pthread_mutex_lock(&g_mu);
    const long pending = g_stats.pending;
    memset(&g_stats, 0, sizeof(g_stats));
    g_stats.pending = pending;
    pthread_mutex_unlock(&g_mu);
}
