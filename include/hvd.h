/*
 * hvd: data-parallel collectives for deep-learning training. The stable C API
 * (C99 and C++). The long form of every contract below: docs/api.md.
 *
 * Conventions
 *  - Status: every function returns an hvd_status_t: HVD_OK = 0, positive =
 *    not an error (HVD_IN_PROGRESS), negative = an error. Exceptions:
 *    hvd_status_string and hvd_last_error (constant text) and
 *    hvd_clear_last_error. Values come back through out-pointers only.
 *  - Last error: a failing call sets the calling thread's hvd_last_error()
 *    (never NULL, owned by the library); a successful call leaves it alone.
 *  - Frozen: status numbers, enum values and struct layouts never change once
 *    released; params fields are only ever appended.
 *  - Params structs carry their caller's struct_size; the library reads and
 *    writes only the fields that size holds (hvd_params_t: and its mask bit).
 *  - ctx NULL = the default context (hvd_init). Using a destroyed context or
 *    a released handle is a caller error, detected best-effort.
 *  - Ownership: strings, params, names, descriptors and shapes are read or
 *    copied during the call; data buffers must live until the operation
 *    completes; strings the library returns are the library's.
 *  - Threads: any thread may call any function, except that destroying a
 *    context or releasing a handle must not race with other calls on it;
 *    barriers and joins match in submit order (docs/api.md#threads-and-ownership).
 *  - Blocking: no call blocks forever under the default settings; the bounds
 *    are stall_shutdown_s, peer_timeout_s, transport_timeout_s and
 *    start_timeout_s (docs/api.md#bounded-waits).
 *  - Reductions of host tensors give, for a given world (or process set)
 *    size, the bits of the left fold s0 op s1 op ... op s(size-1) in rank
 *    order, whatever the fusion, algorithm, transport and timing; across
 *    hosts with several ranks each, with HVD_REPRODUCIBLE=1
 *    (docs/reproducibility.md).
 */
#ifndef HVD_H_
#define HVD_H_

#include <stddef.h>
#include <stdint.h>

#define HVD_VERSION_MAJOR 0
#define HVD_VERSION_MINOR 1
#define HVD_VERSION_PATCH 0
#define HVD_VERSION_CODE(major, minor, patch) ((major) * 10000 + (minor) * 100 + (patch))
#define HVD_VERSION HVD_VERSION_CODE(HVD_VERSION_MAJOR, HVD_VERSION_MINOR, HVD_VERSION_PATCH)

#if defined(__GNUC__) || defined(__clang__)
#define HVD_API __attribute__((visibility("default")))
#else
#define HVD_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status codes (frozen) ---------------------------------------------- */
typedef enum hvd_status {
    HVD_OK = 0,
    HVD_IN_PROGRESS = 1,            /* operation not complete yet (poll)        */

    HVD_ERR_INVALID_ARGUMENT = -1,  /* NULL pointer, bad size, unknown enum...  */
    HVD_ERR_NOT_INITIALIZED = -2,   /* no default context / destroyed context   */
    HVD_ERR_NO_MEMORY = -3,
    HVD_ERR_TIMEOUT = -4,           /* a wait or a peer exceeded its time limit */
    HVD_ERR_MISMATCH = -5,          /* ranks disagree on dtype, shape, op, root */
    HVD_ERR_TRANSPORT = -6,         /* the transport failed (peer died, I/O)    */
    HVD_ERR_UNSUPPORTED = -7,       /* valid request this build cannot serve    */
    HVD_ERR_NOT_FOUND = -8,         /* transport plugin or library missing      */
    HVD_ERR_ABORTED = -9,           /* context shut down while op was pending   */
    HVD_ERR_DUPLICATE_NAME = -10,   /* same tensor name already in flight       */
    HVD_ERR_VERSION = -11,          /* incompatible versions (plugin, peer)     */
    HVD_ERR_RENDEZVOUS = -12,       /* could not form the job (store, peers)    */
    HVD_ERR_INTERNAL = -13,         /* a bug in hvd: please report              */
    HVD_ERR_MEMBERSHIP_CHANGED = -14 /* elastic job: a peer left or hosts changed;
                                        hvd_context_reset forms the job again   */
} hvd_status_t;

/* ---- Data types, reduce ops, devices (frozen; docs/api.md#data-types-and-reduce-ops) */
typedef enum hvd_dtype {
    HVD_UINT8 = 0,
    HVD_INT8 = 1,
    HVD_UINT16 = 2,
    HVD_INT16 = 3,
    HVD_INT32 = 4,
    HVD_INT64 = 5,
    HVD_FLOAT16 = 6,   /* IEEE 754 binary16; reduced in float32              */
    HVD_BFLOAT16 = 7,  /* reduced in float32                                 */
    HVD_FLOAT32 = 8,
    HVD_FLOAT64 = 9,
    HVD_BOOL = 10      /* one byte, 0 or 1; logical reductions, no AVERAGE   */
} hvd_dtype_t;

typedef enum hvd_reduce_op {
    HVD_SUM = 0,
    HVD_AVERAGE = 1,   /* sum / size; integers round toward zero             */
    HVD_MIN = 2,
    HVD_MAX = 3,
    HVD_PRODUCT = 4,
    HVD_ADASUM = 5     /* Horovod's Adasum: float types, allreduce only
                        * (docs/api.md#adasum)                               */
} hvd_reduce_op_t;

#define HVD_DEVICE_CPU (-1)

/* A tensor descriptor, read during the *_async call only; data must live
 * until the operation completes. device >= 0: a CUDA tensor ordered on
 * `stream` (docs/api.md#cuda-tensors). */
typedef struct hvd_tensor {
    void *data;            /* may be NULL only when the element count is 0     */
    hvd_dtype_t dtype;
    int32_t ndim;          /* 0 = scalar (one element); at most HVD_MAX_NDIM  */
    const int64_t *shape;  /* ndim entries, each >= 0                          */
    int32_t device;        /* HVD_DEVICE_CPU, or a CUDA device ordinal         */
    void *stream;          /* cudaStream_t the data is ordered on; NULL = the
                            * legacy default stream; ignored for host memory  */
} hvd_tensor_t;

#define HVD_MAX_NDIM 32
#define HVD_TENSOR_INIT {NULL, HVD_FLOAT32, 0, NULL, HVD_DEVICE_CPU, NULL}

/* ---- Opaque handles ----------------------------------------------------- */
typedef struct hvd_context_s *hvd_context_t;  /* a communicator              */
typedef struct hvd_handle_s *hvd_handle_t;    /* one pending operation       */

/* ---- Context parameters (docs/api.md#context-parameters) ----------------
 * Start from HVD_PARAMS_INIT, set a field and its HVD_PARAM_* bit in mask.
 * Unset fields come from HVD_* variables, then defaults. Unknown mask bits:
 * HVD_ERR_UNSUPPORTED. */

/* Bootstrap allgather: copy `bytes` from send to every rank's recv at
 * rank*bytes; return 0 on success. Called during creation, on its thread. */
typedef int (*hvd_oob_allgather_fn)(const void *send, void *recv, size_t bytes, void *user);

/* Log sink: level is an HVD_LOG_*; msg is one line without newline. */
typedef void (*hvd_log_fn)(int level, const char *msg, void *user);

#define HVD_LOG_ERROR 0
#define HVD_LOG_WARNING 1
#define HVD_LOG_INFO 2
#define HVD_LOG_DEBUG 3
#define HVD_LOG_TRACE 4

typedef struct hvd_params {
    size_t struct_size;               /* sizeof(hvd_params_t) of the caller   */
    uint64_t mask;                    /* HVD_PARAM_* bits of fields set       */

    int32_t rank;                     /* HVD_PARAM_RANK                       */
    int32_t size;                     /* HVD_PARAM_SIZE                       */
    int32_t local_rank;               /* HVD_PARAM_LOCAL_RANK                 */
    int32_t local_size;               /* HVD_PARAM_LOCAL_SIZE                 */
    int32_t cross_rank;               /* HVD_PARAM_CROSS_RANK                 */
    int32_t cross_size;               /* HVD_PARAM_CROSS_SIZE                 */

    const char *transport;            /* HVD_PARAM_TRANSPORT: "gloo", "local", ... */
    const char *rendezvous_addr;      /* HVD_PARAM_RENDEZVOUS_ADDR: "host:port" */
    const char *secret;               /* HVD_PARAM_SECRET: job secret (hex)   */
    hvd_oob_allgather_fn oob_allgather; /* HVD_PARAM_OOB                      */
    void *oob_user;                   /*   (same bit)                         */

    int64_t fusion_threshold_bytes;   /* HVD_PARAM_FUSION_THRESHOLD; 0 = off  */
    double cycle_time_ms;             /* HVD_PARAM_CYCLE_TIME: max batching wait */
    int32_t cache_capacity;           /* HVD_PARAM_CACHE_CAPACITY; 0 = off    */
    double stall_warning_s;           /* HVD_PARAM_STALL_WARNING; <= 0 = off  */
    double stall_shutdown_s;          /* HVD_PARAM_STALL_SHUTDOWN; <= 0 = off
                                       * (a missing submit then waits for ever) */
    double start_timeout_s;           /* HVD_PARAM_START_TIMEOUT              */
    const char *timeline_path;        /* HVD_PARAM_TIMELINE: Chrome trace JSON */

    hvd_log_fn log_fn;                /* HVD_PARAM_LOG_FN                     */
    void *log_user;                   /*   (same bit)                         */
    int32_t log_level;                /* HVD_PARAM_LOG_LEVEL: HVD_LOG_*       */

    const char *network_interface;    /* HVD_PARAM_NETWORK_INTERFACE          */
    void *mpi_comm;                   /* HVD_PARAM_MPI_COMM: pointer to an MPI_Comm */
    double transport_timeout_s;       /* HVD_PARAM_TRANSPORT_TIMEOUT: limit for a
                                       * peer within one transfer (default 30 s) */
    int32_t autotune;                 /* HVD_PARAM_AUTOTUNE: 0 off, 1 on      */
    const char *transport_path;       /* HVD_PARAM_TRANSPORT_PATH: ':'-separated
                                       * plugin folders searched first        */
    double peer_timeout_s;            /* HVD_PARAM_PEER_TIMEOUT: a peer silent
                                       * this long (in negotiation, or no byte
                                       * moved in a transfer) fails the ops
                                       * (default 10 s; <= 0 = off;
                                       * docs/api.md#peer_timeout_s)          */
} hvd_params_t;

#define HVD_PARAM_RANK               (1ULL << 0)
#define HVD_PARAM_SIZE               (1ULL << 1)
#define HVD_PARAM_LOCAL_RANK         (1ULL << 2)
#define HVD_PARAM_LOCAL_SIZE         (1ULL << 3)
#define HVD_PARAM_CROSS_RANK         (1ULL << 4)
#define HVD_PARAM_CROSS_SIZE         (1ULL << 5)
#define HVD_PARAM_TRANSPORT          (1ULL << 6)
#define HVD_PARAM_RENDEZVOUS_ADDR    (1ULL << 7)
#define HVD_PARAM_SECRET             (1ULL << 8)
#define HVD_PARAM_OOB                (1ULL << 9)
#define HVD_PARAM_FUSION_THRESHOLD   (1ULL << 10)
#define HVD_PARAM_CYCLE_TIME         (1ULL << 11)
#define HVD_PARAM_CACHE_CAPACITY     (1ULL << 12)
#define HVD_PARAM_STALL_WARNING      (1ULL << 13)
#define HVD_PARAM_STALL_SHUTDOWN     (1ULL << 14)
#define HVD_PARAM_START_TIMEOUT      (1ULL << 15)
#define HVD_PARAM_TIMELINE           (1ULL << 16)
#define HVD_PARAM_LOG_FN             (1ULL << 17)
#define HVD_PARAM_LOG_LEVEL          (1ULL << 18)
#define HVD_PARAM_NETWORK_INTERFACE  (1ULL << 19)
#define HVD_PARAM_MPI_COMM           (1ULL << 20)
#define HVD_PARAM_TRANSPORT_TIMEOUT  (1ULL << 21)
#define HVD_PARAM_AUTOTUNE           (1ULL << 22)
#define HVD_PARAM_TRANSPORT_PATH     (1ULL << 23)
#define HVD_PARAM_PEER_TIMEOUT       (1ULL << 24)
#define HVD_PARAM_ALL_               ((1ULL << 25) - 1) /* bits this header knows */

/* Every field listed, so user code builds cleanly with -Wextra -Werror. */
#define HVD_PARAMS_INIT                                                              \
    {sizeof(hvd_params_t), 0, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, 0, 0.0, 0, \
     0.0, 0.0, 0.0, NULL, NULL, NULL, 0, NULL, NULL, 0.0, 0, NULL, 0.0}

/* ---- Library ------------------------------------------------------------- */

/* Run-time version of the loaded library. Any pointer may be NULL. */
HVD_API hvd_status_t hvd_version(int *major, int *minor, int *patch);

/* Constant English text for a status code; never NULL (unknown codes too). */
HVD_API const char *hvd_status_string(hvd_status_t status);

/* The calling thread's last error; never NULL ("" when none); valid until
 * this thread's next failing call. */
HVD_API const char *hvd_last_error(void);

/* Clears the calling thread's last error. */
HVD_API void hvd_clear_last_error(void);

/* Size in bytes of one element. */
HVD_API hvd_status_t hvd_dtype_size(hvd_dtype_t dtype, size_t *out);

/* ---- Explicit contexts (any number per process) -------------------------- */

/* Collective over the job's ranks; blocks up to start_timeout_s. */
HVD_API hvd_status_t hvd_context_create(const hvd_params_t *params, hvd_context_t *out);
/* This rank's pending operations complete with HVD_ERR_ABORTED; the others'
 * that involve it too, naming it; theirs without it go on: it waits until
 * every rank has destroyed the context, at most stall_shutdown_s. Frees ctx.
 * NULL is refused (use hvd_shutdown); a process set: collective. */
HVD_API hvd_status_t hvd_context_destroy(hvd_context_t ctx);

HVD_API hvd_status_t hvd_context_rank(hvd_context_t ctx, int *out);
HVD_API hvd_status_t hvd_context_size(hvd_context_t ctx, int *out);
HVD_API hvd_status_t hvd_context_local_rank(hvd_context_t ctx, int *out);
HVD_API hvd_status_t hvd_context_local_size(hvd_context_t ctx, int *out);
HVD_API hvd_status_t hvd_context_cross_rank(hvd_context_t ctx, int *out);
HVD_API hvd_status_t hvd_context_cross_size(hvd_context_t ctx, int *out);
/* The transport's name; owned by libhvd, valid while libhvd stays loaded. */
HVD_API hvd_status_t hvd_context_transport(hvd_context_t ctx, const char **out);
/* HVD_OK if transport `name` loads here (its plugin and the libraries that
 * plugin needs), searching transport_path (':'-separated, NULL = none) then
 * libhvd's folder; else the loader's error, the last error saying why and
 * what to install. Needs no init; unloads what it loaded where it can. */
HVD_API hvd_status_t hvd_transport_probe(const char *name, const char *transport_path);
/* 1 if MPI runs at MPI_THREAD_MULTIPLE, else 0; not MPI: HVD_ERR_UNSUPPORTED. */
HVD_API hvd_status_t hvd_mpi_threads_supported(hvd_context_t ctx, int *out);

/* ---- The default context (Horovod style, reference counted) -------------- */

/* The first call creates the context (params may be NULL); later calls only
 * count and ignore params. */
HVD_API hvd_status_t hvd_init(const hvd_params_t *params);
/* Releases one count; the last destroys the context (hvd_context_destroy). */
HVD_API hvd_status_t hvd_shutdown(void);
HVD_API hvd_status_t hvd_is_initialized(int *out);
HVD_API hvd_status_t hvd_default_context(hvd_context_t *out);
HVD_API hvd_status_t hvd_rank(int *out);
HVD_API hvd_status_t hvd_size(int *out);
HVD_API hvd_status_t hvd_local_rank(int *out);
HVD_API hvd_status_t hvd_local_size(int *out);
HVD_API hvd_status_t hvd_cross_rank(int *out);
HVD_API hvd_status_t hvd_cross_size(int *out);

/* ---- Asynchronous named collectives (docs/api.md#collectives) ------------
 * Matched across ranks by name, not call order. Ranks that disagree on
 * dtype, shape, op or root: HVD_ERR_MISMATCH on every rank. On success
 * *handle must be released. */

/* Result = postscale * reduce(prescale * input); output may be input->data. */
HVD_API hvd_status_t hvd_allreduce_async(hvd_context_t ctx, const char *name,
                                         const hvd_tensor_t *input, void *output,
                                         hvd_reduce_op_t op, double prescale,
                                         double postscale, hvd_handle_t *handle);

/* count allreduces negotiated and fused as one (one dtype, one device). */
HVD_API hvd_status_t hvd_grouped_allreduce_async(hvd_context_t ctx, int32_t count,
                                                 const char *const *names,
                                                 const hvd_tensor_t *inputs,
                                                 void *const *outputs, hvd_reduce_op_t op,
                                                 double prescale, double postscale,
                                                 hvd_handle_t *handle);

/* Concatenates along the first dimension; the handle owns the result. */
HVD_API hvd_status_t hvd_allgather_async(hvd_context_t ctx, const char *name,
                                         const hvd_tensor_t *input, hvd_handle_t *handle);

/* root's input into every rank's output (output may be input->data). */
HVD_API hvd_status_t hvd_broadcast_async(hvd_context_t ctx, const char *name,
                                         const hvd_tensor_t *input, void *output,
                                         int32_t root, hvd_handle_t *handle);

/* splits[j] rows to rank j (NULL: even split); the handle owns the result. */
HVD_API hvd_status_t hvd_alltoall_async(hvd_context_t ctx, const char *name,
                                        const hvd_tensor_t *input, const int64_t *splits,
                                        hvd_handle_t *handle);

/* Reduces, then each rank keeps its block of rows; the handle owns it. */
HVD_API hvd_status_t hvd_reducescatter_async(hvd_context_t ctx, const char *name,
                                             const hvd_tensor_t *input, hvd_reduce_op_t op,
                                             double prescale, double postscale,
                                             hvd_handle_t *handle);

/* Completes on every rank once all ranks have called it. */
HVD_API hvd_status_t hvd_barrier_async(hvd_context_t ctx, hvd_handle_t *handle);

/* This rank is out of data; output: one int32, the rank that joined last. */
HVD_API hvd_status_t hvd_join_async(hvd_context_t ctx, hvd_handle_t *handle);

/* Blocking: submit, wait as hvd_handle_wait(h, -1), release. */
HVD_API hvd_status_t hvd_allreduce(hvd_context_t ctx, const char *name,
                                   const hvd_tensor_t *input, void *output, hvd_reduce_op_t op);
HVD_API hvd_status_t hvd_broadcast(hvd_context_t ctx, const char *name,
                                   const hvd_tensor_t *input, void *output, int32_t root);
HVD_API hvd_status_t hvd_barrier(hvd_context_t ctx);

/* ---- Handles (docs/api.md#handles) -------------------------------------- */

/* Waits up to timeout_s (< 0: no limit): the operation's status, or
 * HVD_ERR_TIMEOUT with the handle still valid (poll tells which). */
HVD_API hvd_status_t hvd_handle_wait(hvd_handle_t handle, double timeout_s);

/* HVD_IN_PROGRESS while pending, then the operation's status. */
HVD_API hvd_status_t hvd_handle_poll(hvd_handle_t handle);

/* Frees the handle; a pending operation still runs (keep its buffers). */
HVD_API hvd_status_t hvd_handle_release(hvd_handle_t handle);

/* A result the handle owns (allgather, alltoall, reducescatter, join), in
 * host memory (a device result is copied on the first call), until release. */
HVD_API hvd_status_t hvd_handle_output(hvd_handle_t handle, const void **data, size_t *bytes);
/* The same result where it lies, without a copy: host, or *device's memory. */
HVD_API hvd_status_t hvd_handle_output_device(hvd_handle_t handle, const void **data,
                                              size_t *bytes, int32_t *device);
/* Stream-ordered completion: the cudaEvent_t after the results (NULL: none
 * needed), owned by the handle; HVD_IN_PROGRESS while pending. */
HVD_API hvd_status_t hvd_handle_cuda_event(hvd_handle_t handle, void **event);
/* Makes `stream` wait on the device for the results; HVD_IN_PROGRESS while
 * pending. */
HVD_API hvd_status_t hvd_handle_stream_wait(hvd_handle_t handle, void *stream);
/* Writes up to max_ndim dims of the result into shape, and the true ndim. */
HVD_API hvd_status_t hvd_handle_output_shape(hvd_handle_t handle, int64_t *shape,
                                             int32_t max_ndim, int32_t *ndim);
/* Alltoall: rows received from each rank (n >= size; entries past size = 0). */
HVD_API hvd_status_t hvd_handle_recv_splits(hvd_handle_t handle, int64_t *splits, int32_t n);

/* ---- Process sets (docs/api.md#process-sets) ----------------------------
 * A context over some of a parent's ranks, sharing its connections. Making
 * one is collective over the parent, in the same order on every rank; a
 * rank outside the set gets *child = NULL and HVD_OK. */
#define HVD_UNDEFINED_COLOR (-1)

/* MPI_Comm_split: same color >= 0, one set ordered by (key, parent rank). */
HVD_API hvd_status_t hvd_context_split(hvd_context_t parent, int color, int key,
                                       hvd_context_t *child);
/* The n parent ranks listed (ascending, same list everywhere). */
HVD_API hvd_status_t hvd_process_set_create(hvd_context_t parent, int32_t n,
                                            const int32_t *ranks, hvd_context_t *child);
/* The parent ranks of ctx's members in ctx's order: the first min(n, size). */
HVD_API hvd_status_t hvd_context_parent_ranks(hvd_context_t ctx, int32_t *ranks, int32_t n);

/* ---- Timeline at run time (docs/api.md#timeline-at-run-time) ------------- */

/* Rank 0 records into path from the next cycle on; waits up to 30 s. */
HVD_API hvd_status_t hvd_timeline_start(hvd_context_t ctx, const char *path, int mark_cycles);
/* Closes the timeline (HVD_OK when none); waits up to 30 s. */
HVD_API hvd_status_t hvd_timeline_stop(hvd_context_t ctx);

/* ---- Metrics (docs/metrics.md) ------------------------------------------ */

typedef enum hvd_metrics_format {
    HVD_METRICS_JSON = 0,       /* one object, "version": 1 (docs/metrics.md)  */
    HVD_METRICS_PROMETHEUS = 1  /* Prometheus' text format, label rank=...     */
} hvd_metrics_format_t;

/* ctx's job context and its live process sets, as NUL-terminated text in
 * buf; *needed = its size with the NUL. buf NULL with len 0: the size only;
 * len < *needed: HVD_ERR_INVALID_ARGUMENT, buf untouched. */
HVD_API hvd_status_t hvd_metrics(hvd_context_t ctx, hvd_metrics_format_t format, char *buf,
                                 size_t len, size_t *needed);
/* ---- Flight recorder (docs/flight-recorder.md) --------------------------- */

/* Writes this rank's last operations (HVD_FLIGHT_RECORDER_SIZE) as JSON to path
 * (NULL: HVD_FLIGHT_RECORDER_DIR/rank-<r>.json); off: HVD_ERR_UNSUPPORTED. */
HVD_API hvd_status_t hvd_flight_recorder_dump(hvd_context_t ctx, const char *path);

/* ---- Elastic jobs (docs/api.md#elastic-jobs) ----------------------------- */

/* Collective over the new membership: re-forms ctx under the next epoch
 * (HVD_ERR_MEMBERSHIP_CHANGED: call again; not elastic: HVD_ERR_UNSUPPORTED). */
HVD_API hvd_status_t hvd_context_reset(hvd_context_t ctx);

typedef struct hvd_membership {
    size_t struct_size;    /* set to sizeof(hvd_membership_t) before the call */
    int32_t elastic;       /* 1: an elastic job (hvd_context_reset works)     */
    int32_t hosts_updated; /* 1: the launcher changed hosts since this epoch  */
    int64_t epoch;         /* the epoch ctx was formed in (0 the first)       */
} hvd_membership_t;

/* Fills the fields out->struct_size holds; a process set: its parent's job. */
HVD_API hvd_status_t hvd_context_membership(hvd_context_t ctx, hvd_membership_t *out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HVD_H_ */
