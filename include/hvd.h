/*
 * hvd — data-parallel collectives for deep-learning training.
 *
 * The stable C API. Compiles as C99 and as C++.
 *
 * Conventions
 *  - Every function returns an hvd_status_t (HVD_OK = 0, positive values are
 *    not-an-error states such as HVD_IN_PROGRESS, negative values are errors),
 *    except hvd_status_string() and hvd_last_error(), which return constant text.
 *  - Values are returned through out-pointers, never on the status channel.
 *  - When a call fails, hvd_last_error() (per thread, never NULL) describes why.
 *  - Status numbers, enum values and struct layouts never change once released;
 *    new params fields are only ever appended.
 *  - A NULL hvd_context_t means "the default context" (the one hvd_init made).
 *  - No call blocks forever under the default settings: waits take a
 *    timeout, and an operation that cannot finish completes with an error:
 *      . some live rank never submits it: the stall inspector, after
 *        stall_shutdown_s (default 300 s), naming the missing ranks;
 *      . a peer stops answering (stopped, frozen, cut off) while the ranks
 *        negotiate: the peer timeout, peer_timeout_s (default 10 s), naming
 *        it (gloo transport; see peer_timeout_s below);
 *      . a peer dies, or a transfer stalls: the transport, at once where it
 *        sees the peer go (a closed connection, a vanished pid) or at
 *        transport_timeout_s (default 30 s);
 *      . the context is destroyed (HVD_ERR_ABORTED).
 *    Settings that remove a bound: stall_shutdown_s <= 0 removes the only
 *    bound for operations that some live, answering rank never submits, so
 *    hvd_handle_wait(h, -1) and the blocking conveniences may then wait for
 *    ever; peer_timeout_s <= 0 leaves a stopped peer to the transport
 *    timeout; a transport_timeout_s beyond 3e7 s (about a year) counts as
 *    none. The mpi transport bounds its waits by transport_timeout_s but
 *    has no peer timeout. hvd_context_create / hvd_init are bounded by
 *    start_timeout_s, except inside a user's oob_allgather callback, which
 *    hvd cannot interrupt. A log_fn that blocks stalls its context's
 *    background thread (see "Threads and ownership" below).
 *
 * Threads and ownership
 *  - Any thread may call any function. Calls on one context from several
 *    threads are safe, with these exceptions (caller errors, not detected):
 *      . hvd_context_destroy (and hvd_shutdown for the default context) must
 *        not run while another thread is inside a call on that context
 *        (submitting, querying rank/size); ending it while other threads
 *        wait on its handles is fine: those waits return HVD_ERR_ABORTED;
 *      . hvd_handle_release must not run while another thread is inside a
 *        call on the same handle (wait, poll, output): the handle's memory
 *        goes. Several threads may wait on or poll one handle at once.
 *    hvd_init and hvd_shutdown are serialized with each other.
 *  - Ranks match operations by name, so threads may submit in any order;
 *    barriers and joins have no name and match in the order each rank
 *    submits them, so submit those from one thread (or in a fixed order).
 *  - hvd_last_error is per thread: read it on the thread whose call failed.
 *  - Handles do not depend on their context: a handle stays valid after its
 *    context is destroyed (it completes with HVD_ERR_ABORTED) and must still
 *    be released.
 *  - Strings in hvd_params_t (transport, rendezvous_addr, secret,
 *    timeline_path, network_interface, transport_path) are copied during
 *    hvd_context_create / hvd_init: they may be freed once it returns; the
 *    same holds for the params struct itself and for tensor names, tensor
 *    descriptors and shape arrays (read during the *_async call only).
 *    Data buffers must stay valid until the operation completes.
 *  - oob_allgather is called only during hvd_context_create / hvd_init, on
 *    the calling thread: oob_user must live until that call returns.
 *  - log_fn is called on the thread creating the context (during
 *    hvd_context_create / hvd_init), then on the context's background
 *    thread, and last on the thread destroying it (hvd_context_destroy /
 *    the last hvd_shutdown); for one context never two calls at once (each
 *    phase ends before the next starts), but the log_fns of different
 *    contexts may run concurrently. log_user must live until the context is
 *    destroyed. log_fn may call hvd's query functions (hvd_rank, ...), but
 *    must not wait on a handle, call a blocking collective, or destroy a
 *    context: the background thread it runs on is the one that
 *    would complete it (a deadlock no timeout ends).
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

/* ------------------------------------------------------------------------ */
/* Status codes. Numbers are frozen.                                          */
/* ------------------------------------------------------------------------ */
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

/* ------------------------------------------------------------------------ */
/* Data types, reduction ops, devices. Numbers are frozen.                   */
/* ------------------------------------------------------------------------ */
typedef enum hvd_dtype {
    HVD_UINT8 = 0,
    HVD_INT8 = 1,
    HVD_UINT16 = 2,
    HVD_INT16 = 3,
    HVD_INT32 = 4,
    HVD_INT64 = 5,
    HVD_FLOAT16 = 6,   /* IEEE 754 binary16; reduced in float32 arithmetic   */
    HVD_BFLOAT16 = 7,  /* bfloat16; reduced in float32 arithmetic            */
    HVD_FLOAT32 = 8,
    HVD_FLOAT64 = 9,
    HVD_BOOL = 10      /* one byte, 0 or 1; MIN and PRODUCT = logical and, MAX
                        * and SUM = logical or; AVERAGE is refused            */
} hvd_dtype_t;

typedef enum hvd_reduce_op {
    HVD_SUM = 0,
    HVD_AVERAGE = 1,   /* sum / size; integers round toward zero             */
    HVD_MIN = 2,
    HVD_MAX = 3,
    HVD_PRODUCT = 4,
    HVD_ADASUM = 5     /* Adaptive summation (Horovod's Adasum): per tensor,
                        * adasum(a, b) = (1 - a.b / (2|a|^2)) a
                        *              + (1 - a.b / (2|b|^2)) b
                        * (a side with |x|^2 = 0 has coefficient 1), with
                        * dot products and norms accumulated in double,
                        * combined over the ranks as a binary tree: level 1
                        * pairs ranks (0,1), (2,3), ...; each next level pairs
                        * the previous results in rank order; an odd one out
                        * passes up unchanged. The result is bitwise the same
                        * on every rank. HVD_FLOAT16, HVD_BFLOAT16 (computed
                        * in float32), HVD_FLOAT32 and HVD_FLOAT64 only, host
                        * tensors (CUDA ones staged through host memory),
                        * allreduce and grouped allreduce only (each
                        * tensor of a group is combined on its own); other
                        * dtypes and operations fail with
                        * HVD_ERR_INVALID_ARGUMENT. prescale and postscale
                        * apply as for HVD_SUM. Each rank gathers every
                        * rank's copy: memory of size x the tensor's bytes. */
} hvd_reduce_op_t;

#define HVD_DEVICE_CPU (-1)

/* A tensor descriptor. The descriptor and its shape array are read during the
 * *_async call only; the data buffer must stay valid until the operation
 * completes (or the context is destroyed).
 *
 * CUDA tensors (device >= 0; docs/gpu.md). Every collective takes them. The
 * context loads the CUDA runtime at run time the first time it sees one
 * (HVD_CUDA_RUNTIME: a path or soname, else libcudart.so.13, .12, .so; libhvd
 * itself links no CUDA) and refuses the tensor at the *_async call with
 *   HVD_ERR_UNSUPPORTED "CUDA tensor on device N (tensor 'x'): no CUDA
 *     runtime could be loaded (...)" or "...: this host has no CUDA device
 *     (...)";
 *   HVD_ERR_INVALID_ARGUMENT where N is not below the device count, or data
 *     (and output, for allreduce and broadcast) is not memory of device N
 *     (cudaPointerGetAttributes; managed memory is accepted);
 *   HVD_ERR_INVALID_ARGUMENT for a grouped allreduce whose members are on
 *     different devices (host and device mixed included).
 * Ranks must agree on the kind (all host or all CUDA; else HVD_ERR_MISMATCH),
 * not on the ordinal. stream: the cudaStream_t the data is ordered on, on
 * device `device`; NULL = that device's legacy default stream. The operation
 * is ordered after the work already queued on that stream when the
 * collective runs (its data is copied out on that stream, which is then
 * synchronized), and the handle completes only once the results are in the
 * output's device memory (copied back on the same stream, synchronized):
 * after hvd_handle_wait returns HVD_OK the output may be used from any
 * stream. Until the handle completes the stream must stay valid and the
 * caller must not write the input or output.
 * Stream-ordered completion (HVD_CUDA_ASYNC_COMPLETION=1, or Horovod's
 * HOROVOD_ENABLE_ASYNC_COMPLETION=1; off by default): the host no longer
 * waits for the results' last copies and scaling. The handle completes
 * once they are queued on the tensor's stream (a grouped allreduce: the
 * first tensor's, after which the others' streams are ordered), so work the
 * caller queues on that stream afterwards sees the results without blocking
 * the host; any other stream, or the host, waits first through
 * hvd_handle_stream_wait or hvd_handle_cuda_event. The stream must then
 * stay valid until the handle is released. A CUDA failure in the queued
 * work shows in the stream's later CUDA calls, not in the handle.
 * Over the host transports (gloo, mpi, ucx, local) the data is staged
 * through page-locked host memory (per context, reused); results the handle
 * owns (allgather, alltoall, reducescatter) are then HOST memory for CUDA
 * inputs too: hvd_handle_output returns a host pointer, and frontends copy
 * it to the device (hvd.torch does). A transport declaring
 * HVD_TRANSPORT_CAP_CUDA_MEMORY (nccl) receives the device buffers of every
 * collective as they are (scale factors and AVERAGE applied on the device;
 * Adasum is staged over a host transport beside it); the results the handle
 * owns then stay in device memory the handle owns (hvd_handle_output_device;
 * hvd_handle_output copies them to host memory when asked). A CUDA error
 * while copying fails the operation on that rank with HVD_ERR_TRANSPORT
 * naming the CUDA call. */
typedef struct hvd_tensor {
    void *data;            /* may be NULL only when the element count is 0     */
    hvd_dtype_t dtype;
    int32_t ndim;          /* 0 = scalar (one element); at most HVD_MAX_NDIM  */
    const int64_t *shape;  /* ndim entries, each >= 0                          */
    int32_t device;        /* HVD_DEVICE_CPU, or a CUDA device ordinal (above) */
    void *stream;          /* cudaStream_t the data is ordered on; NULL = the
                            * legacy default stream; ignored for host memory  */
} hvd_tensor_t;

#define HVD_MAX_NDIM 32
#define HVD_TENSOR_INIT {NULL, HVD_FLOAT32, 0, NULL, HVD_DEVICE_CPU, NULL}

/* ------------------------------------------------------------------------ */
/* Opaque handles.                                                          */
/* ------------------------------------------------------------------------ */
typedef struct hvd_context_s *hvd_context_t;  /* a communicator              */
typedef struct hvd_handle_s *hvd_handle_t;    /* one pending operation       */

/* ------------------------------------------------------------------------ */
/* Context parameters: an extensible struct.                                 */
/*                                                                          */
/* Start from HVD_PARAMS_INIT, set a field, and set its bit in `mask`. The  */
/* library reads a field only if its bit is set and the caller's struct     */
/* (struct_size) is large enough to hold it; unset fields come from HVD_*   */
/* environment variables, then from defaults. Unknown mask bits are an      */
/* error (HVD_ERR_UNSUPPORTED), so a newer caller never silently loses a    */
/* setting on an older library.                                             */
/* ------------------------------------------------------------------------ */

/* Out-of-band allgather used to bootstrap a context: copy `bytes` bytes from
 * `send` into every rank's `recv` at offset rank*bytes. Return 0 on success.
 * Called once or a few times during context creation, from the creating thread. */
typedef int (*hvd_oob_allgather_fn)(const void *send, void *recv, size_t bytes, void *user);

/* Log sink: level is one of HVD_LOG_*. msg is one line without newline. */
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
                                       * (then an operation some live rank
                                       * never submits waits for ever)       */
    double start_timeout_s;           /* HVD_PARAM_START_TIMEOUT              */
    const char *timeline_path;        /* HVD_PARAM_TIMELINE: Chrome trace JSON */

    hvd_log_fn log_fn;                /* HVD_PARAM_LOG_FN                     */
    void *log_user;                   /*   (same bit)                         */
    int32_t log_level;                /* HVD_PARAM_LOG_LEVEL: HVD_LOG_*       */

    const char *network_interface;    /* HVD_PARAM_NETWORK_INTERFACE          */
    void *mpi_comm;                   /* HVD_PARAM_MPI_COMM: pointer to an MPI_Comm */
    double transport_timeout_s;       /* HVD_PARAM_TRANSPORT_TIMEOUT
                                       * (HVD_TRANSPORT_TIMEOUT, default 30 s,
                                       * > 0): the limit for a peer to answer
                                       * within one transfer; see also
                                       * peer_timeout_s (the last field)     */
    int32_t autotune;                 /* HVD_PARAM_AUTOTUNE: 0 off, 1 on (the
                                       * tuner's knobs stay HVD_AUTOTUNE_*)   */
    const char *transport_path;       /* HVD_PARAM_TRANSPORT_PATH: ':'-separated
                                       * plugin folders searched before the one
                                       * of libhvd.so; NULL or "" = that one only */
    double peer_timeout_s;            /* HVD_PARAM_PEER_TIMEOUT (HVD_PEER_TIMEOUT,
                                       * default 10 s; <= 0 = off): a peer that
                                       * has not entered the ranks' negotiation
                                       * for this long is declared silent, and
                                       * every rank's pending handles fail with
                                       * an error naming it ("rank 2 (host h)
                                       * has not answered for 10 s (stopped or
                                       * cut off?...)"). The negotiation is run
                                       * by each rank's background thread at
                                       * least every 0.1 s (or peer_timeout_s/4)
                                       * whatever the user's threads do, so a
                                       * slow rank (long compute between steps,
                                       * no submits) is not silent; a stopped
                                       * (SIGSTOP), frozen or cut-off one is.
                                       * Bound: a peer that goes silent between
                                       * transfers is named within peer_timeout_s
                                       * plus one negotiation; one that goes
                                       * silent inside a data transfer, at the
                                       * transport timeout. Applies only where
                                       * it is below transport_timeout_s, and
                                       * only on transports that can change
                                       * their limit per call (gloo: TCP and
                                       * shared memory; not mpi).            */
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

/* ------------------------------------------------------------------------ */
/* Library.                                                                 */
/* ------------------------------------------------------------------------ */

/* Run-time version of the loaded library. Any pointer may be NULL. */
HVD_API hvd_status_t hvd_version(int *major, int *minor, int *patch);

/* Constant English text for a status code; never NULL (unknown codes too). */
HVD_API const char *hvd_status_string(hvd_status_t status);

/* The calling thread's last error message; never NULL ("" when none). The
 * text stays valid until the next failing hvd call on the same thread. */
HVD_API const char *hvd_last_error(void);

/* Clears the calling thread's last error. */
HVD_API void hvd_clear_last_error(void);

/* Size in bytes of one element. */
HVD_API hvd_status_t hvd_dtype_size(hvd_dtype_t dtype, size_t *out);

/* ------------------------------------------------------------------------ */
/* Explicit contexts: any number per process (threads as ranks, sub-jobs).  */
/* Creation is collective over the ranks of the job.                        */
/* ------------------------------------------------------------------------ */
HVD_API hvd_status_t hvd_context_create(const hvd_params_t *params, hvd_context_t *out);
/* Completes pending operations with HVD_ERR_ABORTED, tells peers, frees all. */
HVD_API hvd_status_t hvd_context_destroy(hvd_context_t ctx);
/* Using a destroyed context is a caller error; hvd detects it on a best-effort
 * basis (HVD_ERR_NOT_INITIALIZED or HVD_ERR_INVALID_ARGUMENT). */

HVD_API hvd_status_t hvd_context_rank(hvd_context_t ctx, int *out);
HVD_API hvd_status_t hvd_context_size(hvd_context_t ctx, int *out);
HVD_API hvd_status_t hvd_context_local_rank(hvd_context_t ctx, int *out);
HVD_API hvd_status_t hvd_context_local_size(hvd_context_t ctx, int *out);
HVD_API hvd_status_t hvd_context_cross_rank(hvd_context_t ctx, int *out);
HVD_API hvd_status_t hvd_context_cross_size(hvd_context_t ctx, int *out);
/* Name of the transport in use ("local", "gloo", "mpi", or the name a
 * third-party plugin gives itself). The string is owned by libhvd, never
 * changes, and stays valid after the context is destroyed and its transport
 * plugin unloaded, for as long as libhvd itself stays loaded; do not free it. */
HVD_API hvd_status_t hvd_context_transport(hvd_context_t ctx, const char **out);
/* 1 if the context's transport is MPI and MPI runs at MPI_THREAD_MULTIPLE,
 * else 0; HVD_ERR_UNSUPPORTED if the transport is not MPI. */
HVD_API hvd_status_t hvd_mpi_threads_supported(hvd_context_t ctx, int *out);

/* ------------------------------------------------------------------------ */
/* The default context (Horovod style). hvd_init is reference counted: the  */
/* first call creates the context, each hvd_shutdown releases one count.    */
/* params may be NULL (environment and defaults).                           */
/* ------------------------------------------------------------------------ */
HVD_API hvd_status_t hvd_init(const hvd_params_t *params); /* later calls ignore params */
HVD_API hvd_status_t hvd_shutdown(void);
HVD_API hvd_status_t hvd_is_initialized(int *out);
HVD_API hvd_status_t hvd_default_context(hvd_context_t *out);
HVD_API hvd_status_t hvd_rank(int *out);
HVD_API hvd_status_t hvd_size(int *out);
HVD_API hvd_status_t hvd_local_rank(int *out);
HVD_API hvd_status_t hvd_local_size(int *out);
HVD_API hvd_status_t hvd_cross_rank(int *out);
HVD_API hvd_status_t hvd_cross_size(int *out);

/* ------------------------------------------------------------------------ */
/* Asynchronous named collectives.                                          */
/*                                                                          */
/* Operations are matched across ranks by name (not by call order): ranks   */
/* may submit in different orders. A name may be reused once its previous  */
/* operation completed. If ranks disagree on dtype, shape, op or root, the  */
/* operation completes with HVD_ERR_MISMATCH on every rank and the context  */
/* stays usable. On success *handle must eventually be released.            */
/* ------------------------------------------------------------------------ */

/* output: same dtype/shape/device as input; output == input->data is in place.
 * Result = postscale * reduce_over_ranks(prescale * input), AVERAGE divides the
 * sum by size. */
HVD_API hvd_status_t hvd_allreduce_async(hvd_context_t ctx, const char *name,
                                         const hvd_tensor_t *input, void *output,
                                         hvd_reduce_op_t op, double prescale,
                                         double postscale, hvd_handle_t *handle);

/* Several allreduces that are negotiated and fused as one unit: none starts
 * until all are ready on every rank. All members share one dtype and device.
 * One handle covers the whole group. */
HVD_API hvd_status_t hvd_grouped_allreduce_async(hvd_context_t ctx, int32_t count,
                                                 const char *const *names,
                                                 const hvd_tensor_t *inputs,
                                                 void *const *outputs, hvd_reduce_op_t op,
                                                 double prescale, double postscale,
                                                 hvd_handle_t *handle);

/* Concatenates along the first dimension, which may differ between ranks; the
 * other dimensions must agree. The result is owned by the handle
 * (hvd_handle_output / hvd_handle_output_shape). */
HVD_API hvd_status_t hvd_allgather_async(hvd_context_t ctx, const char *name,
                                         const hvd_tensor_t *input, hvd_handle_t *handle);

/* Copies root's input into every rank's output (output == input->data: in
 * place). Non-root ranks must pass a tensor of the same dtype and shape. */
HVD_API hvd_status_t hvd_broadcast_async(hvd_context_t ctx, const char *name,
                                         const hvd_tensor_t *input, void *output,
                                         int32_t root, hvd_handle_t *handle);

/* Sends splits[j] rows (first dimension) of input to rank j, in order.
 * splits: size entries summing to shape[0], or NULL for an even split (shape[0]
 * must then be divisible by size). The result (rows received, in rank order)
 * is owned by the handle; hvd_handle_recv_splits tells how many came from whom. */
HVD_API hvd_status_t hvd_alltoall_async(hvd_context_t ctx, const char *name,
                                        const hvd_tensor_t *input, const int64_t *splits,
                                        hvd_handle_t *handle);

/* Reduces across ranks, then rank r keeps its block of rows: the first
 * dimension is split as evenly as possible, the first (shape[0] % size)
 * ranks getting one extra row. The result is owned by the handle. */
HVD_API hvd_status_t hvd_reducescatter_async(hvd_context_t ctx, const char *name,
                                             const hvd_tensor_t *input, hvd_reduce_op_t op,
                                             double prescale, double postscale,
                                             hvd_handle_t *handle);

/* Completes on every rank once all ranks have called it. */
HVD_API hvd_status_t hvd_barrier_async(hvd_context_t ctx, hvd_handle_t *handle);

/* Marks this rank as out of data (uneven inputs). Until every rank has
 * joined, a joined rank takes part in the other ranks' allreduces with zeros
 * (AVERAGE still divides by size) and its other collectives fail with
 * HVD_ERR_UNSUPPORTED. The handle completes once every rank has joined; its
 * output (hvd_handle_output, shape {1}) is one int32, the same on every rank:
 * the rank that joined last (joins announced in one negotiation count in rank
 * order), which is what Horovod's join() returns. */
HVD_API hvd_status_t hvd_join_async(hvd_context_t ctx, hvd_handle_t *handle);

/* Blocking conveniences: submit, wait without a limit, release. The wait
 * ends as hvd_handle_wait(h, -1) does (see "No call blocks forever" at the
 * top: with stall_shutdown_s <= 0 an operation some live rank never submits
 * waits for ever). */
HVD_API hvd_status_t hvd_allreduce(hvd_context_t ctx, const char *name,
                                   const hvd_tensor_t *input, void *output, hvd_reduce_op_t op);
HVD_API hvd_status_t hvd_broadcast(hvd_context_t ctx, const char *name,
                                   const hvd_tensor_t *input, void *output, int32_t root);
HVD_API hvd_status_t hvd_barrier(hvd_context_t ctx);

/* ------------------------------------------------------------------------ */
/* Handles.                                                                 */
/* ------------------------------------------------------------------------ */

/* Waits until the operation completes or timeout_s passes (timeout_s < 0:
 * no limit). Returns the operation's status, or HVD_ERR_TIMEOUT with a message
 * naming the ranks not yet ready when known; the handle stays valid. To tell
 * "the wait ran out" from "the operation failed with a timeout" (the stall
 * inspector), call hvd_handle_poll: HVD_IN_PROGRESS means still pending.
 * A wait (timeout_s < 0 or >= 0.01) runs the negotiation and the operation
 * on the calling thread, sparing two thread hand-offs (HVD_CALLER_CYCLES=0
 * turns this off); if the background thread or another waiting caller is
 * inside a cycle, it waits for that cycle's end (at most until timeout_s)
 * and takes the next. The wait then returns when its cycle ends, which may
 * be after timeout_s if a peer is slow to enter it (bounded by the peer and
 * transport timeouts). */
HVD_API hvd_status_t hvd_handle_wait(hvd_handle_t handle, double timeout_s);

/* HVD_IN_PROGRESS while pending, then the operation's status. */
HVD_API hvd_status_t hvd_handle_poll(hvd_handle_t handle);

/* Frees the handle. A pending operation still runs to completion, and its
 * buffers must stay valid until then. */
HVD_API hvd_status_t hvd_handle_release(hvd_handle_t handle);

/* For operations whose result the handle owns (allgather, alltoall,
 * reducescatter, join): the data, valid until the handle is released. Always
 * host memory: where a transport that takes CUDA memory left the result on
 * the device (see hvd_tensor_t), the first call copies it to host memory
 * (blocking; later calls return the same copy). */
HVD_API hvd_status_t hvd_handle_output(hvd_handle_t handle, const void **data, size_t *bytes);
/* Where that result lies, without copying it: *device = HVD_DEVICE_CPU and
 * the host memory hvd_handle_output returns (before any copy of a device
 * result: see below), or *device = the CUDA device whose memory holds it
 * (allgather, alltoall and reducescatter of CUDA tensors run by a transport
 * that takes CUDA memory). Device memory belongs to the handle until
 * hvd_handle_release, and is complete when the handle is: any stream may
 * read it without further synchronization (with stream-ordered completion:
 * the input's stream may; others wait through hvd_handle_stream_wait, and
 * the release is ordered on that stream: work queued there before it may
 * still read the block, work on other streams must have been ordered before
 * it or have finished). Results staged through host
 * memory (the host transports) are host memory. An empty result: *data
 * NULL, *bytes 0, *device where it would have been. */
HVD_API hvd_status_t hvd_handle_output_device(hvd_handle_t handle, const void **data,
                                              size_t *bytes, int32_t *device);
/* Stream-ordered completion of CUDA tensors (see hvd_tensor_t): the
 * cudaEvent_t recorded after the operation's results on the tensor's stream,
 * valid until the handle is released (the caller must not destroy it); a
 * stream or the host waits for it with cudaStreamWaitEvent or
 * cudaEventSynchronize. *event = NULL where nothing is left to wait for:
 * host tensors, or CUDA tensors with the default completion (the results
 * were in place when the handle completed). The handle must have completed:
 * HVD_IN_PROGRESS while pending, the operation's failure if it failed. */
HVD_API hvd_status_t hvd_handle_cuda_event(hvd_handle_t handle, void **event);
/* The same, for callers without the CUDA runtime: `stream` (a cudaStream_t
 * of the tensor's device; NULL = its legacy default stream) waits on the
 * device for the results; the host does not block. HVD_OK without effect
 * where there is nothing to wait for. HVD_IN_PROGRESS while pending. */
HVD_API hvd_status_t hvd_handle_stream_wait(hvd_handle_t handle, void *stream);
/* Result shape: writes up to max_ndim dims into shape and the true ndim. */
HVD_API hvd_status_t hvd_handle_output_shape(hvd_handle_t handle, int64_t *shape,
                                             int32_t max_ndim, int32_t *ndim);
/* Alltoall: rows received from each rank (n must be >= size; entries past
 * size are set to 0). */
HVD_API hvd_status_t hvd_handle_recv_splits(hvd_handle_t handle, int64_t *splits, int32_t n);

/* ------------------------------------------------------------------------ */
/* Process sets.                                                            */
/* ------------------------------------------------------------------------ */
/* A process set is a context over some of a parent context's ranks, made
 * without a new rendezvous. It shares the parent's connections and
 * background thread, and has its own ranks (0 .. n-1 in the set's order),
 * local and cross ranks (among its members), negotiation, response cache
 * and names: the same name in two sets, or in a set and its parent, never
 * clashes. Every operation works on it; broadcast roots are ranks within
 * the set; hvd_context_rank / _size / ... answer within the set.
 *  - Making one is collective over the parent: every rank of the parent
 *    calls, in the same order as its other process-set calls on that
 *    parent (from one thread, as barriers). A rank outside the new set gets
 *    *child = NULL and HVD_OK.
 *  - If ranks disagree (different lists, or one rank splits while another
 *    creates), every rank fails with HVD_ERR_MISMATCH naming both; a bad
 *    list or color on any rank makes every rank fail with
 *    HVD_ERR_INVALID_ARGUMENT naming that rank. Nothing is made then.
 *  - hvd_context_destroy(child) is collective over the set's members: it
 *    returns once every member has destroyed the set (bounded as any
 *    operation: the stall inspector), and the set's pending operations
 *    complete with HVD_ERR_ABORTED. The child is freed whatever it returns.
 *  - Destroying the parent stops its sets: their pending operations
 *    complete with HVD_ERR_ABORTED and later ones fail; the children must
 *    still be destroyed (each then only frees memory), and the parent's
 *    connections close when the last of them is.
 *  - A set's operations are negotiated in the parent's rounds (one
 *    allreduce serves the parent and all its sets), so every rank of the
 *    parent takes part in them: while some set is busy the others negotiate
 *    continuously, and an idle parent with live sets negotiates every 10 ms
 *    (not every 100 ms). While sets exist the negotiation is bounded by the
 *    transport timeout instead of the peer timeout: a rank outside a set
 *    waits while the set's members move its data.
 *  - Sets of sets are not supported (HVD_ERR_UNSUPPORTED): split the parent.
 *    A set of more than one rank needs a transport with point-to-point
 *    (gloo, mpi); its collectives run over the parent's connections (MPI:
 *    the parent's communicator, with tags of its own), and over shared
 *    memory of its own when its members share a host. */
#define HVD_UNDEFINED_COLOR (-1)

/* MPI_Comm_split: ranks passing the same color >= 0 form one set, ordered
 * by (key, parent rank); HVD_UNDEFINED_COLOR joins none (*child = NULL). */
HVD_API hvd_status_t hvd_context_split(hvd_context_t parent, int color, int key,
                                       hvd_context_t *child);
/* The n ranks listed (parent ranks, sorted ascending, no duplicates, the
 * same list on every rank); the set's rank i is ranks[i]. */
HVD_API hvd_status_t hvd_process_set_create(hvd_context_t parent, int32_t n,
                                            const int32_t *ranks, hvd_context_t *child);
/* The parent's ranks of ctx's members, in ctx's rank order: writes the
 * first min(n, size) of them. A context that is not a process set:
 * 0 .. size-1. */
HVD_API hvd_status_t hvd_context_parent_ranks(hvd_context_t ctx, int32_t *ranks, int32_t n);

/* ---- Timeline at run time ------------------------------------------------
 * The timeline (a Chrome trace of what the background thread did, written by
 * rank 0 of the job: see HVD_TIMELINE) can also be started and stopped while
 * the job runs, as Horovod's start_timeline/stop_timeline do. Every rank may
 * call; only rank 0 writes, the others check the arguments and return
 * HVD_OK. ctx NULL: the default context (a process set: its job's).
 *
 * hvd_timeline_start: records into `path` from the background thread's next
 * cycle on (a timeline being written is closed first, as complete JSON);
 * mark_cycles != 0 also adds an instant event at the start of every cycle.
 * Returns once the background thread has opened the file: its error (the
 * file cannot be written: HVD_ERR_INVALID_ARGUMENT) is this call's.
 * hvd_timeline_stop: closes the file (complete JSON); HVD_OK when none is
 * being written. Both wait for the background thread at most 30 s
 * (HVD_ERR_TIMEOUT), and fail with HVD_ERR_ABORTED once it has stopped. */
HVD_API hvd_status_t hvd_timeline_start(hvd_context_t ctx, const char *path, int mark_cycles);
HVD_API hvd_status_t hvd_timeline_stop(hvd_context_t ctx);

/* ---- Elastic jobs ----------------------------------------------------------
 * Under `hvdrun --min-np/--max-np/--host-discovery-script` (docs/elastic.md)
 * a context's membership may change: when a peer dies, stops or is cut off,
 * or hosts are added, pending and later operations fail with
 * HVD_ERR_MEMBERSHIP_CHANGED (naming what happened), and hvd_context_reset
 * forms the job again under the next epoch without restarting the process.
 *
 * hvd_context_reset: collective over the new membership. Completes pending
 * operations with HVD_ERR_MEMBERSHIP_CHANGED, leaves the current epoch, waits
 * at most the elastic timeout (HVD_ELASTIC_TIMEOUT) for the launcher to form
 * the next one, and re-forms ctx under it: rank, size, local and cross ranks
 * are the new epoch's (workers of the previous epoch keep their relative
 * order; new workers follow). Call it while no other thread uses ctx.
 * Process sets derived from ctx stop (their operations fail with
 * HVD_ERR_MEMBERSHIP_CHANGED): destroy them and make them again. A failure
 * while forming the new epoch (a peer lost again) returns
 * HVD_ERR_MEMBERSHIP_CHANGED and leaves ctx stopped: call it again. When the
 * launcher ends the job instead (fewer workers than --min-np, the reset
 * limit), it returns HVD_ERR_MEMBERSHIP_CHANGED with the launcher's reason.
 * A context not in an elastic job, or a process set: HVD_ERR_UNSUPPORTED.
 * ctx NULL: the default context. */
HVD_API hvd_status_t hvd_context_reset(hvd_context_t ctx);

typedef struct hvd_membership {
    size_t struct_size;    /* set to sizeof(hvd_membership_t) before the call */
    int32_t elastic;       /* 1: an elastic job (hvd_context_reset works)     */
    int32_t hosts_updated; /* 1: the launcher added or removed hosts since
                              this epoch formed (one store round trip)       */
    int64_t epoch;         /* the epoch ctx was formed in (0 the first; 0
                              for a context that is not elastic)             */
} hvd_membership_t;

/* Fills *out (struct_size first: an older, smaller struct gets the fields it
 * has). ctx NULL: the default context; a process set answers for its
 * parent's job. */
HVD_API hvd_status_t hvd_context_membership(hvd_context_t ctx, hvd_membership_t *out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HVD_H_ */
