/*
 * hvd_transport.h — the transport plugin ABI (C99, installed next to hvd.h).
 *
 * A transport is a shared object libhvd_transport_<name>.so. The core finds
 * it next to libhvd.so (or in the folders of params.transport_path or
 * HVD_TRANSPORT_PATH), dlopens it, and asks for the newest table it knows:
 *     const hvd_transport_v4_t *hvd_transport_plugin_v4(void);   (newest)
 *     const hvd_transport_v3_t *hvd_transport_plugin_v3(void);
 *     const hvd_transport_v2_t *hvd_transport_plugin_v2(void);
 *     const hvd_transport_v1_t *hvd_transport_plugin_v1(void);
 * A plugin exports any of them; the core takes the newest present. A plugin
 * never links against libhvd: what it needs from the core (the rendezvous
 * key-value store, the logger, the reduction kernels) comes in through
 * hvd_transport_env_v1_t. A plugin needs only this header and hvd.h: see
 * docs/transports.md for the contract in prose and how to write one.
 *
 * Version 4 (the table at the end of this file) is the point-to-point
 * contract: a plugin provides connection setup and non-blocking send and
 * receive, and the core runs every collective over them (its algorithms:
 * ring, recursive doubling, pipelined broadcast, pairwise all-to-all, the
 * shared-memory collectives, hierarchical compositions). A plugin may also
 * provide native collectives, which the core uses where the plugin says they
 * win. Versions 1-3 are collective-only tables; cores keep loading them.
 *
 * Threading: every entry point of one communicator is called from one thread
 * at a time (the context's background thread, or, where the plugin sets
 * HVD_TRANSPORT_CAP_ANY_THREAD, a user thread the core hands it to), except
 * those marked "any thread" (abort, async_error). Entry points never throw or unwind: they return an hvd_status_t and
 * keep a message for last_error().
 *
 * Data: counts are elements for reductions, bytes elsewhere. Versions 1-3
 * take host memory only; version 4 describes every buffer
 * (hvd_transport_buffer_t: memory type, device, stream).
 */
#ifndef HVD_TRANSPORT_H_
#define HVD_TRANSPORT_H_

#include <stddef.h>
#include <stdint.h>

#include "hvd.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HVD_TRANSPORT_ABI_V1 1

/* dst[i] = dst[i] (op) src[i] for i < count; op is SUM, MIN, MAX or PRODUCT. */
typedef void (*hvd_reduce_kernel_fn)(void *dst, const void *src, size_t count,
                                     hvd_dtype_t dtype, hvd_reduce_op_t op);

typedef struct hvd_transport_env_v1 {
    size_t struct_size;
    int32_t rank, size;
    int32_t local_rank, local_size;
    int32_t cross_rank, cross_size;

    /* Rendezvous store, already scoped to this communicator (keys do not
     * collide with other communicators). Both return an hvd_status_t. get
     * blocks until the key exists or timeout_s passes; the value is malloc'd
     * and the caller frees it with kv_free. */
    void *kv;
    int (*kv_set)(void *kv, const char *key, const void *value, size_t len);
    int (*kv_get)(void *kv, const char *key, void **value, size_t *len, double timeout_s);
    void (*kv_free)(void *value);

    /* Logging into the core's sink. */
    void *logger;
    void (*log)(void *logger, int level, const char *msg);

    /* The core's reduction kernels, so plugins share one implementation. */
    hvd_reduce_kernel_fn reduce;

    double timeout_s;              /* per-operation limit for peers to answer */
    double start_timeout_s;        /* limit for connecting to every peer      */
    const char *network_interface; /* NULL or "" = choose                     */
    const char *local_address;     /* this host's address as peers reach it   */
    void *mpi_comm;                /* pointer to an MPI_Comm, or NULL         */
} hvd_transport_env_v1_t;

/* Every entry not marked optional is required: the core refuses, at load,
 * a plugin whose table leaves one NULL (or name NULL or ""), naming the file
 * and the entry, and goes on to the next folder of the search path. */
typedef struct hvd_transport_v1 {
    uint32_t abi_version;          /* HVD_TRANSPORT_ABI_V1 */
    const char *name;              /* the core keeps its own copy */

    /* Connects to every peer; on failure returns an error and sets *comm to
     * NULL after writing a message to err (NUL-terminated, err_len bytes). */
    int (*init)(const hvd_transport_env_v1_t *env, void **comm, char *err, size_t err_len);
    void (*finalize)(void *comm);

    /* In-place reduction of count elements; op is SUM, MIN, MAX or PRODUCT
     * (the core turns AVERAGE and scaling into SUM plus local scaling). */
    int (*allreduce)(void *comm, void *buf, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op);
    /* recv = concatenation over ranks r of recv_bytes[r] bytes; this rank's
     * contribution, recv_bytes[rank] bytes, is read from send. */
    int (*allgatherv)(void *comm, const void *send, void *recv, const size_t *recv_bytes);
    int (*broadcast)(void *comm, void *buf, size_t bytes, int32_t root);
    /* send holds size blocks of send_bytes[r] bytes (to rank r, in order);
     * recv receives size blocks of recv_bytes[r] bytes (from rank r). */
    int (*alltoallv)(void *comm, const void *send, const size_t *send_bytes, void *recv,
                     const size_t *recv_bytes);
    int (*barrier)(void *comm);

    /* Message of the last failing call on comm; never NULL. */
    const char *(*last_error)(void *comm);

    /* Optional (may be NULL): answers a named integer property, e.g.
     * "mpi_thread_level" (the MPI_THREAD_* level provided). Returns
     * HVD_ERR_UNSUPPORTED for unknown keys. */
    int (*query)(void *comm, const char *key, int64_t *value);
} hvd_transport_v1_t;

typedef const hvd_transport_v1_t *(*hvd_transport_plugin_v1_fn)(void);
#define HVD_TRANSPORT_PLUGIN_V1_SYMBOL "hvd_transport_plugin_v1"

/*
 * ABI version 2: entry points added after version 1, in a table that points
 * at the plugin's version 1 table (so a plugin serves cores of both
 * versions: an older core only looks up hvd_transport_plugin_v1). A plugin
 * may export
 *     const hvd_transport_v2_t *hvd_transport_plugin_v2(void);
 * and the core uses it when present, else the version 1 table alone. Every
 * entry point added here may be NULL; the core then uses a version 1
 * equivalent.
 */
#define HVD_TRANSPORT_ABI_V2 2

/* One buffer of a multi-buffer call: count elements at data. */
typedef struct hvd_transport_span {
    void *data;
    size_t count;
} hvd_transport_span_t;

typedef struct hvd_transport_v2 {
    uint32_t abi_version;          /* HVD_TRANSPORT_ABI_V2 */
    const hvd_transport_v1_t *v1;  /* every version 1 entry point (abi_version V1) */

    /* In-place reduce-scatter: buf holds sum(counts) elements; on return the
     * counts[rank] elements at offset sum(counts[0..rank)) hold the reduction
     * over ranks of that block, and the rest of buf is scratch (clobbered).
     * op is SUM, MIN, MAX or PRODUCT. Moves (size-1)/size of the data once,
     * where an allreduce moves it twice. NULL: the core runs an allreduce. */
    int (*reducescatter)(void *comm, void *buf, const size_t *counts, hvd_dtype_t dtype,
                         hvd_reduce_op_t op);

    /* In-place allreduce of the concatenation of nspans buffers, with the
     * result every allreduce of that one packed buffer would give: the core's
     * fused batches without a fusion buffer (no copy in, no copy out). The
     * core calls it only while query("allreduce_spans") answers 1, which a
     * plugin may answer per communicator (say, only where it can read the
     * spans in place); elsewhere it packs the spans and calls allreduce.
     * NULL: never called. */
    int (*allreduce_spans)(void *comm, const hvd_transport_span_t *spans, size_t nspans,
                           hvd_dtype_t dtype, hvd_reduce_op_t op);
} hvd_transport_v2_t;

typedef const hvd_transport_v2_t *(*hvd_transport_plugin_v2_fn)(void);
#define HVD_TRANSPORT_PLUGIN_V2_SYMBOL "hvd_transport_plugin_v2"

/*
 * ABI version 3: a table that points at the plugin's version 2 table. A
 * plugin may export
 *     const hvd_transport_v3_t *hvd_transport_plugin_v3(void);
 * and the core uses it when present (its v2 must be the plugin's version 2
 * table). Every entry point added here may be NULL.
 */
#define HVD_TRANSPORT_ABI_V3 3

/* What a limit set by set_timeout stands for, so a timeout's message can say. */
#define HVD_TRANSPORT_LIMIT_TRANSFER 0 /* env.timeout_s: a transfer's limit     */
#define HVD_TRANSPORT_LIMIT_PEER 1     /* the peer timeout: the core negotiates,
                                        * and every live peer enters within its
                                        * heartbeat, so a peer that has not
                                        * answered by then is stopped or cut off */

typedef struct hvd_transport_v3 {
    uint32_t abi_version;          /* HVD_TRANSPORT_ABI_V3 */
    const hvd_transport_v2_t *v2;  /* every version 2 entry point (abi_version V2) */

    /* Sets the limit (seconds; <= 0: none) for peers to answer in the calls
     * that follow, until the next set_timeout; kind is HVD_TRANSPORT_LIMIT_*.
     * The core brackets its negotiation with (peer timeout, PEER) and
     * (env.timeout_s, TRANSFER). A timeout under kind PEER should name the
     * silent rank ("rank 2 (host h) has not answered for 5 s"). NULL: the
     * core has no peer timeout on this transport (env.timeout_s only). */
    int (*set_timeout)(void *comm, double timeout_s, int32_t kind);
} hvd_transport_v3_t;

typedef const hvd_transport_v3_t *(*hvd_transport_plugin_v3_fn)(void);
#define HVD_TRANSPORT_PLUGIN_V3_SYMBOL "hvd_transport_plugin_v3"


/*
 * ABI version 4: one self-contained table (it does not point at older
 * ones). A plugin exports
 *     const hvd_transport_v4_t *hvd_transport_plugin_v4(void);
 * The core checks abi_version, reads only the fields that fit in struct_size
 * (so entries appended later are NULL for older plugins, and a capability
 * whose entries lie beyond struct_size is ignored), and refuses at load a
 * table whose required entries are NULL or whose caps promise an entry that
 * is NULL, naming the entry (and does not fall back to the same file's
 * older tables: a broken table is a bug to fix). A plugin whose
 * hvd_transport_plugin_v4 returns NULL declines version 4: its older tables
 * serve.
 *
 * The env (hvd_transport_env_v1_t, shared with version 1): valid during init
 * only, except the callbacks and their handles (kv, logger), which stay
 * valid until finalize returns and may be called from any entry point but
 * abort and async_error. kv_set/kv_get/kv_free are NULL where the context
 * has no store (a world of one; MPI launches). env.timeout_s <= 0 means no
 * limit. The core never calls abort or async_error concurrently with, or
 * after, finalize.
 */
#define HVD_TRANSPORT_ABI_V4 4
#define HVD_TRANSPORT_ABI_NEWEST HVD_TRANSPORT_ABI_V4

/* Memory types of a buffer. */
#define HVD_MEMORY_HOST 0 /* ordinary host memory                          */
#define HVD_MEMORY_CUDA 1 /* CUDA device memory (device = the ordinal)     */

/* One buffer as the core hands it to a version 4 entry point. */
typedef struct hvd_transport_buffer {
    void *data;           /* may be NULL only when bytes is 0              */
    size_t bytes;
    int32_t memory_type;  /* HVD_MEMORY_*                                  */
    int32_t device;       /* HVD_DEVICE_CPU for host memory, else ordinal  */
    void *stream;         /* device memory: the cudaStream_t the data is
                           * ordered on (NULL = the legacy default stream);
                           * host memory: NULL                              */
    void *memory_handle;  /* register_memory's handle for a region holding
                           * [data, data + bytes), or NULL (not registered) */
} hvd_transport_buffer_t;

/* An operation in flight, owned by the plugin (opaque to the core). */
typedef struct hvd_transport_request hvd_transport_request_t;

/* Capabilities (hvd_transport_v4_t.caps): what the core may rely on, read
 * once at load. Entry points marked optional below are also optional in
 * fact (NULL = absent); a flag promising one that is NULL is refused. */
#define HVD_TRANSPORT_CAP_P2P ((uint64_t)1 << 0)        /* isend, irecv, wait       */
#define HVD_TRANSPORT_CAP_P2P_TEST ((uint64_t)1 << 1)   /* test and progress        */
#define HVD_TRANSPORT_CAP_CUDA_MEMORY ((uint64_t)1 << 2) /* buffers may be CUDA     */
#define HVD_TRANSPORT_CAP_STREAM_ORDERED ((uint64_t)1 << 3)
/*     native collectives on CUDA buffers return once their work is enqueued
 *     on buffer.stream; the result is ordered on that stream (the core
 *     records an event after it), and failures surface later through
 *     async_error. Without the flag every call returns complete.          */
#define HVD_TRANSPORT_CAP_REGISTER_MEMORY ((uint64_t)1 << 4) /* register_memory */
#define HVD_TRANSPORT_CAP_ABORT ((uint64_t)1 << 5)      /* abort, async_error       */
#define HVD_TRANSPORT_CAP_PEER_TIMEOUT ((uint64_t)1 << 6) /* set_timeout            */
#define HVD_TRANSPORT_CAP_ANY_THREAD ((uint64_t)1 << 7)
/*     the communicator's entry points may be called from any thread, still
 *     one call at a time: the core then hands the communicator between its
 *     background thread and a user thread waiting on a handle (under a
 *     lock, so each call sees the previous one's effects). Without the flag
 *     every call comes from the background thread.                        */

#define HVD_TRANSPORT_CAP_AVERAGE ((uint64_t)1 << 8)
/*     native allreduce on CUDA buffers also takes op HVD_AVERAGE for the
 *     floating dtypes (the sum divided by the size in the plugin's own
 *     arithmetic: NCCL's ncclAvg). Without the flag the core sends the sum
 *     and divides on the device itself.                                    */

/* The collectives, as indices of hvd_transport_info_t.native_max_bytes. */
#define HVD_TRANSPORT_ALLREDUCE 0
#define HVD_TRANSPORT_ALLGATHERV 1
#define HVD_TRANSPORT_BROADCAST 2
#define HVD_TRANSPORT_ALLTOALLV 3
#define HVD_TRANSPORT_REDUCESCATTER 4
#define HVD_TRANSPORT_BARRIER 5
#define HVD_TRANSPORT_COLLECTIVES 6

/* Per-communicator facts that init writes (the core reads them once, after
 * init, and never asks again). The core zero-fills it, presets
 * mpi_thread_level and the topology fields to -1 ("not known here") and sets
 * struct_size; a plugin writes only the fields that fit in struct_size. */
typedef struct hvd_transport_info {
    size_t struct_size;
    /* Largest tag isend/irecv accept on this communicator (>= 32767; 0 =
     * 32767). The core keeps its tags at or below it. */
    uint32_t max_tag;
    /* MPI transports: the thread level MPI provided, as hvd numbers them
     * (MPI's own constants differ between implementations): 0 single,
     * 1 funneled, 2 serialized, 3 multiple; others: -1. */
    int32_t mpi_thread_level;
    /* Per collective (HVD_TRANSPORT_*): the core uses the plugin's native
     * entry for messages of at most this many bytes (the whole message:
     * for allgatherv the total received, for alltoallv the larger of the
     * totals sent and received), and its own algorithms over
     * point-to-point above it. 0: never (unless the plugin has no
     * point-to-point); SIZE_MAX: always. Ignored where the entry is NULL.
     * Every rank must reach the same choice: for alltoallv, whose size
     * differs per rank, the core reads only SIZE_MAX (always) and anything
     * else as 0 (never).
     * HVD_ALGORITHM_<COLLECTIVE>=native|<algorithm> overrides it. */
    size_t native_max_bytes[HVD_TRANSPORT_COLLECTIVES];
    /* A transport that owns its communicator (MPI on a sub-communicator)
     * has the last word on the topology: it writes what it found here. The
     * core presets each to -1, meaning "as in env". */
    int32_t rank, size;
    int32_t local_rank, local_size;
    int32_t cross_rank, cross_size;
    /* The message size the core's pipelined algorithms (ring, chain) cut
     * large transfers into on this transport: the best trade between
     * per-message cost and pipelining. 0: the core's default (1 MiB). */
    size_t segment_bytes;
} hvd_transport_info_t;

typedef struct hvd_transport_v4 {
    uint32_t abi_version;  /* HVD_TRANSPORT_ABI_V4                              */
    uint32_t struct_size;  /* sizeof(hvd_transport_v4_t) the plugin was built with */
    const char *name;      /* the core keeps its own copy                       */
    uint64_t caps;         /* HVD_TRANSPORT_CAP_*                               */

    /* Connects to every peer (env is valid during init only: copy what is
     * kept) and fills *info. On failure returns an error, sets *comm to NULL
     * and writes a message naming the rank or host at fault to err
     * (NUL-terminated, at most err_len bytes). Required. */
    int (*init)(const hvd_transport_env_v1_t *env, hvd_transport_info_t *info, void **comm,
                char *err, size_t err_len);
    /* Releases everything, including requests still pending (after a failure
     * or an abort). Never blocks beyond env.timeout_s. Required. */
    void (*finalize)(void *comm);
    /* Message of the last failing call on comm; never NULL. Required. */
    const char *(*last_error)(void *comm);

    /* ---- point-to-point (HVD_TRANSPORT_CAP_P2P) --------------------------
     * Non-blocking send and receive of buf->bytes bytes to or from peer
     * (0 <= peer < size, never this rank) with a tag (0 <= tag <=
     * info.max_tag). Messages between two ranks with one tag arrive in the
     * order sent and match receives in the order posted; a receive's size
     * equals the matching send's (the core's algorithms guarantee it). The
     * buffer must stay untouched until the request completes. On success
     * *req is a request the core completes with wait (or test); on error
     * no request exists. */
    int (*isend)(void *comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t *buf,
                 hvd_transport_request_t **req);
    int (*irecv)(void *comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t *buf,
                 hvd_transport_request_t **req);
    /* Blocks until req completes, at most timeout_s seconds (< 0: the limit
     * in force: set_timeout's, else env.timeout_s; 0: no limit). Returns
     * HVD_OK, or an error (HVD_ERR_TIMEOUT naming the peer; HVD_ERR_TRANSPORT;
     * the abort status). Either way the request is released and must not be
     * used again. A wait that fails breaks the communicator (later calls fail
     * with the first error); what became of a message half sent or half
     * received then is the plugin's business (finalize releases it). */
    int (*wait)(void *comm, hvd_transport_request_t *req, double timeout_s);
    /* Optional (HVD_TRANSPORT_CAP_P2P_TEST): never blocks. *done = 1 and
     * the request released when it completed (the status is its outcome),
     * else *done = 0 and HVD_OK (or the error that broke the communicator:
     * the request is then released too). */
    int (*test)(void *comm, hvd_transport_request_t *req, int *done);
    /* Optional (HVD_TRANSPORT_CAP_P2P_TEST): advances pending transfers
     * without blocking (progress-driven transports). */
    int (*progress)(void *comm);
    /* Optional (HVD_TRANSPORT_CAP_REGISTER_MEMORY, which covers both
     * entries): registers a region for transfers (pinning, RDMA keys); the
     * handle goes into hvd_transport_buffer_t.memory_handle for buffers
     * inside it. Point-to-point on CUDA memory: the core has made the data
     * ready (its stream synchronised) before isend, and reads a receive's
     * buffer only after wait; CAP_STREAM_ORDERED concerns native collectives
     * only. */
    int (*register_memory)(void *comm, void *data, size_t bytes, int32_t memory_type,
                           int32_t device, void **handle);
    int (*deregister_memory)(void *comm, void *handle);

    /* ---- native collectives (each optional) ------------------------------
     * Semantics as in version 1-2 (allreduce in place over count elements,
     * op SUM/MIN/MAX/PRODUCT; allgatherv concatenates recv_bytes[r] from
     * each rank, this rank's part read from send; broadcast from root;
     * alltoallv with per-peer byte counts; reducescatter in place, this
     * rank's block of counts[rank] elements at offset sum(counts[..rank))
     * holds its reduction and the rest is scratch; barrier). Used per
     * info.native_max_bytes; where point-to-point is absent, always. */
    int (*allreduce)(void *comm, const hvd_transport_buffer_t *buf, size_t count,
                     hvd_dtype_t dtype, hvd_reduce_op_t op);
    int (*allgatherv)(void *comm, const hvd_transport_buffer_t *send,
                      const hvd_transport_buffer_t *recv, const size_t *recv_bytes);
    int (*broadcast)(void *comm, const hvd_transport_buffer_t *buf, int32_t root);
    int (*alltoallv)(void *comm, const hvd_transport_buffer_t *send, const size_t *send_bytes,
                     const hvd_transport_buffer_t *recv, const size_t *recv_bytes);
    int (*reducescatter)(void *comm, const hvd_transport_buffer_t *buf, const size_t *counts,
                         hvd_dtype_t dtype, hvd_reduce_op_t op);
    int (*barrier)(void *comm);

    /* ---- faults -----------------------------------------------------------
     * abort (HVD_TRANSPORT_CAP_ABORT), any thread, any time, idempotent:
     * every call blocked in this communicator returns `status` promptly
     * (within about a second), every pending request fails, and every later
     * call fails with it; reason (may be NULL) goes into last_error. */
    int (*abort)(void *comm, int status, const char *reason);
    /* async_error (HVD_TRANSPORT_CAP_ABORT), any thread, never blocks:
     * HVD_OK while the communicator is healthy, else the error that broke
     * it (a peer lost between calls, a device fault in stream-ordered work,
     * an abort). */
    int (*async_error)(void *comm);
    /* set_timeout (HVD_TRANSPORT_CAP_PEER_TIMEOUT): as in version 3. */
    int (*set_timeout)(void *comm, double timeout_s, int32_t kind);

    /* ---- appended (read only where struct_size reaches it) --------------
     * The dtypes the native reductions (allreduce, reducescatter) take, bit
     * (1 << dtype) each; 0, or a table too old to hold the field: every
     * dtype. Beside a device-only transport the core stages a reduction of
     * another dtype over the host transport instead (NCCL has no 16-bit
     * integer type). */
    uint64_t reduce_dtypes;
} hvd_transport_v4_t;

typedef const hvd_transport_v4_t *(*hvd_transport_plugin_v4_fn)(void);
#define HVD_TRANSPORT_PLUGIN_V4_SYMBOL "hvd_transport_plugin_v4"

#ifdef __cplusplus
}
#endif

#endif /* HVD_TRANSPORT_H_ */
