/*
 * hvd_transport.h -- the transport plugin ABI (C99; installed next to hvd.h).
 * A reference: the contract in prose, and how to write a plugin, are in
 * docs/transports.md.
 *
 * Conventions
 * - Plugin file: libhvd_transport_<name>.so, <name> of letters, digits and _.
 *   The core looks in each folder of params.transport_path (or
 *   HVD_TRANSPORT_PATH), ':'-separated, then next to libhvd.so; the first
 *   file that loads and holds a usable table wins.
 * - Export: one symbol, HVD_TRANSPORT_PLUGIN_SYMBOL, a function
 *   hvd_transport_plugin_fn returning the plugin's table (static storage).
 *   Nothing else need be exported; a plugin never links against libhvd.
 * - The table grows only by appending. The core reads the first struct_size
 *   bytes (at least HVD_TRANSPORT_MIN_SIZE), takes entries beyond them as
 *   NULL, and refuses at load, naming the file and the entry, a table whose
 *   abi_version is not HVD_TRANSPORT_ABI, whose name is NULL or "", whose required
 *   entry is NULL, or whose caps promise an entry that is NULL.
 * - Required: name, init, finalize, last_error; with HVD_TRANSPORT_CAP_P2P
 *   also isend, irecv, wait; without it every native collective but
 *   reducescatter. Every other entry is optional (NULL = absent).
 * - Status: every entry returning int returns HVD_OK or a negative
 *   hvd_status_t (listed at each entry) and keeps a message for last_error;
 *   a positive value reads as HVD_ERR_TRANSPORT. Entry points never throw
 *   or unwind.
 * - Threads: one communicator is driven by one thread at a time (the
 *   context's loop thread; a user thread too with HVD_TRANSPORT_CAP_ANY_THREAD,
 *   under the core's lock). abort and async_error come from any thread. The
 *   core never calls anything after, or concurrently with, finalize.
 * - Time: seconds as double. A limit > 0 bounds the wait; 0 or less means
 *   none. wait alone takes a negative value as "the limit in force".
 * - Data: counts are elements for reductions, bytes elsewhere; every buffer
 *   is an hvd_transport_buffer_t (memory type, device, stream).
 * - Logging: env.log(env.logger, level, line), level HVD_LOG_ERROR (0) ..
 *   HVD_LOG_TRACE (4) from hvd.h; a line without newline.
 * - Store: env.kv_set/kv_get/kv_free, scoped by the core to the communicator
 *   (keys of different communicators never collide). A key is any
 *   NUL-terminated text; set overwrites; a key and its value together stay
 *   under 64 MiB. NULL where the context has no store (a world of one; MPI
 *   launches).
 * - Hosts: env.hosts names every rank's host before init (the core's store
 *   round), so a plugin exchanges no host names; without a store (a world
 *   of one, the MPI transport) only this rank's entry is set.
 * - struct hvd_transport_request is the plugin's own type (opaque to the core).
 */
#ifndef HVD_TRANSPORT_H_
#define HVD_TRANSPORT_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hvd.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HVD_TRANSPORT_ABI 1 /* hvd_transport_t.abi_version; changes only incompatibly */
#define HVD_TRANSPORT_PLUGIN_SYMBOL "hvd_transport_plugin"

/* dst[i] = dst[i] (op) src[i] for i < count; op is SUM, MIN, MAX or PRODUCT. */
typedef void (*hvd_reduce_kernel_fn)(void *dst, const void *src, size_t count,
                                     hvd_dtype_t dtype, hvd_reduce_op_t op);

/* One rank's entry in the host table (env.hosts). */
typedef struct hvd_transport_host {
    const char *name;    /* host name; NULL only without a store (MPI)    */
    const char *address; /* its host's address as peers reach it, or NULL */
} hvd_transport_host_t;

/* A setting for one transport, by key. Keys the core passes: "network_interface"
 * (value: interface name), "local_address" (value: this host's address as
 * peers reach it), "mpi_comm" (pointer: an MPI_Comm*). A plugin ignores keys
 * it does not know. */
typedef struct hvd_transport_option {
    const char *key;
    const char *value; /* text, or NULL                                  */
    void *pointer;     /* an object handed through, or NULL              */
} hvd_transport_option_t;

/* What init gets. Valid during init only, except the callbacks and their
 * handles (kv, logger), valid until finalize returns (callable from any entry
 * but abort and async_error). */
typedef struct hvd_transport_env {
    size_t struct_size;                  /* sizeof as the core built it       */
    int32_t rank, size;                  /* this communicator's               */
    int32_t local_rank, local_size;      /* ranks on this host                */
    int32_t cross_rank, cross_size;      /* across hosts, one local rank      */
    void *kv;                            /* handle for the kv_* callbacks     */
    /* Returns HVD_OK, HVD_ERR_INVALID_ARGUMENT, HVD_ERR_NO_MEMORY or the store's error. */
    int (*kv_set)(void *kv, const char *key, const void *value, size_t len);
    /* Waits up to timeout_s for key; *value is malloc'd, freed with kv_free.
     * Returns HVD_OK, HVD_ERR_TIMEOUT, HVD_ERR_MEMBERSHIP_CHANGED, or as kv_set. */
    int (*kv_get)(void *kv, const char *key, void **value, size_t *len, double timeout_s);
    void (*kv_free)(void *value);
    void *logger;                        /* handle for log                    */
    void (*log)(void *logger, int level, const char *msg);
    hvd_reduce_kernel_fn reduce;         /* the core's reduction kernels      */
    double timeout_s;                    /* a transfer's limit                */
    double start_timeout_s;              /* limit for connecting to every peer */
    const hvd_transport_host_t *hosts;   /* size entries by rank, never NULL  */
    const hvd_transport_option_t *options; /* noptions settings               */
    size_t noptions;
} hvd_transport_env_t;

/* The option `key` of env, or NULL (also where env predates options). */
static inline const hvd_transport_option_t *hvd_transport_find_option(
    const hvd_transport_env_t *env, const char *key) {
    size_t i;
    if (env == NULL || env->struct_size < offsetof(hvd_transport_env_t, noptions) + sizeof(size_t))
        return NULL;
    for (i = 0; i < env->noptions; ++i)
        if (env->options[i].key != NULL && strcmp(env->options[i].key, key) == 0)
            return &env->options[i];
    return NULL;
}

/* Memory types of a buffer. */
#define HVD_MEMORY_HOST 0 /* host memory                                  */
#define HVD_MEMORY_CUDA 1 /* CUDA device memory (device = the ordinal)    */

/* One buffer as the core hands it over. */
typedef struct hvd_transport_buffer {
    void *data;          /* NULL only when bytes is 0                      */
    size_t bytes;
    int32_t memory_type; /* HVD_MEMORY_*                                   */
    int32_t device;      /* HVD_DEVICE_CPU for host memory, else ordinal   */
    void *stream;        /* CUDA: the cudaStream_t (NULL = legacy default); host: NULL */
    void *memory_handle; /* register_memory's handle covering the data, or NULL */
} hvd_transport_buffer_t;

/* An operation in flight: defined by the plugin, opaque to the core. */
typedef struct hvd_transport_request hvd_transport_request_t;

/* Capabilities (hvd_transport_t.caps), read once at load. */
#define HVD_TRANSPORT_CAP_P2P ((uint64_t)1 << 0)             /* isend, irecv, wait          */
#define HVD_TRANSPORT_CAP_P2P_TEST ((uint64_t)1 << 1)        /* test, progress              */
#define HVD_TRANSPORT_CAP_CUDA_MEMORY ((uint64_t)1 << 2)     /* buffers may be CUDA         */
#define HVD_TRANSPORT_CAP_STREAM_ORDERED ((uint64_t)1 << 3)  /* CUDA natives return enqueued */
#define HVD_TRANSPORT_CAP_REGISTER_MEMORY ((uint64_t)1 << 4) /* (de)register_memory         */
#define HVD_TRANSPORT_CAP_ABORT ((uint64_t)1 << 5)           /* abort, async_error          */
#define HVD_TRANSPORT_CAP_PEER_TIMEOUT ((uint64_t)1 << 6)    /* set_timeout                 */
#define HVD_TRANSPORT_CAP_ANY_THREAD ((uint64_t)1 << 7)      /* any thread, one at a time   */
#define HVD_TRANSPORT_CAP_AVERAGE ((uint64_t)1 << 8)         /* CUDA allreduce takes AVERAGE */

/* The collectives, as indices of hvd_transport_info_t.native_max_bytes. */
#define HVD_TRANSPORT_ALLREDUCE 0
#define HVD_TRANSPORT_ALLGATHERV 1
#define HVD_TRANSPORT_BROADCAST 2
#define HVD_TRANSPORT_ALLTOALLV 3
#define HVD_TRANSPORT_REDUCESCATTER 4
#define HVD_TRANSPORT_BARRIER 5
#define HVD_TRANSPORT_COLLECTIVES 6

/* set_timeout's kind: what the limit stands for, so a timeout can say. */
#define HVD_TRANSPORT_LIMIT_TRANSFER 0 /* env.timeout_s                          */
#define HVD_TRANSPORT_LIMIT_PEER 1     /* the peer timeout: a silent peer is gone */

/* Facts init writes, read once after init. The core zero-fills it, sets
 * struct_size and presets mpi_thread_level and the topology to -1; a plugin
 * writes only fields within struct_size. */
typedef struct hvd_transport_info {
    size_t struct_size;
    uint32_t max_tag;          /* largest tag isend/irecv take (>= 32767; 0 = 32767) */
    int32_t mpi_thread_level;  /* MPI: 0 single .. 3 multiple; else -1         */
    /* Per HVD_TRANSPORT_*: natives serve messages up to this many bytes (0 never,
     * SIZE_MAX always; alltoallv reads SIZE_MAX only). */
    size_t native_max_bytes[HVD_TRANSPORT_COLLECTIVES];
    int32_t rank, size;        /* where the plugin owns its communicator; -1 = env's */
    int32_t local_rank, local_size;
    int32_t cross_rank, cross_size;
    size_t segment_bytes;      /* pipelining segment of the core's algorithms; 0 = 1 MiB */
} hvd_transport_info_t;

/* The table. Every entry: called by the core's loop thread (see Threads),
 * comm is what init made. */
typedef struct hvd_transport {
    uint32_t abi_version;  /* HVD_TRANSPORT_ABI                                     */
    uint32_t struct_size;  /* sizeof(hvd_transport_t) the plugin was built with     */
    const char *name;      /* required; the core copies it                          */
    uint64_t caps;         /* HVD_TRANSPORT_CAP_*                                   */

    /* Required. Connects to every peer (within env.start_timeout_s), fills *info.
     * Error: *comm NULL, a message naming the rank or host at fault in err
     * (NUL-terminated, <= err_len bytes). Returns HVD_OK, HVD_ERR_TIMEOUT,
     * HVD_ERR_INVALID_ARGUMENT, HVD_ERR_UNSUPPORTED, HVD_ERR_MEMBERSHIP_CHANGED,
     * HVD_ERR_TRANSPORT. */
    int (*init)(const hvd_transport_env_t *env, hvd_transport_info_t *info, void **comm,
                char *err, size_t err_len);
    /* Required. Releases everything, pending requests too; blocks at most env.timeout_s. */
    void (*finalize)(void *comm);
    /* Required. The last failing call's message; never NULL. */
    const char *(*last_error)(void *comm);

    /* CAP_P2P. Post a send/receive of buf->bytes to/from peer (never this rank),
     * tag <= info.max_tag; per (peer, tag) in order; sizes match; buffer untouched
     * until done. *req set on HVD_OK only. Returns HVD_OK, HVD_ERR_TRANSPORT, the abort status. */
    int (*isend)(void *comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t *buf,
                 hvd_transport_request_t **req);
    int (*irecv)(void *comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t *buf,
                 hvd_transport_request_t **req);
    /* CAP_P2P. Blocks until req completes (see Time); releases req either way; a
     * failure breaks comm (later calls fail with it). Returns HVD_OK,
     * HVD_ERR_TIMEOUT (naming the peer), HVD_ERR_TRANSPORT, the abort status. */
    int (*wait)(void *comm, hvd_transport_request_t *req, double timeout_s);
    /* CAP_P2P_TEST. Never blocks: *done = 1 and req released with its outcome, or
     * *done = 0 and HVD_OK (or comm's error, req then released). */
    int (*test)(void *comm, hvd_transport_request_t *req, int *done);
    /* CAP_P2P_TEST. Advances pending transfers without blocking. Returns as wait. */
    int (*progress)(void *comm);
    /* CAP_REGISTER_MEMORY. Registers a region; *handle goes into buffers inside it.
     * Returns HVD_OK, HVD_ERR_NO_MEMORY, HVD_ERR_TRANSPORT. */
    int (*register_memory)(void *comm, void *data, size_t bytes, int32_t memory_type,
                           int32_t device, void **handle);
    int (*deregister_memory)(void *comm, void *handle);

    /* Native collectives (required without CAP_P2P, else optional; used per
     * info.native_max_bytes). op: SUM, MIN, MAX, PRODUCT (AVERAGE with
     * CAP_AVERAGE). Return HVD_OK, HVD_ERR_TIMEOUT, HVD_ERR_TRANSPORT, the abort
     * status. */
    /* In place over count elements. */
    int (*allreduce)(void *comm, const hvd_transport_buffer_t *buf, size_t count,
                     hvd_dtype_t dtype, hvd_reduce_op_t op);
    /* recv = rank r's recv_bytes[r] in rank order; this rank's from send. */
    int (*allgatherv)(void *comm, const hvd_transport_buffer_t *send,
                      const hvd_transport_buffer_t *recv, const size_t *recv_bytes);
    /* buf->bytes from root to every rank. */
    int (*broadcast)(void *comm, const hvd_transport_buffer_t *buf, int32_t root);
    /* send_bytes[r] to rank r, recv_bytes[r] from rank r, blocks in rank order. */
    int (*alltoallv)(void *comm, const hvd_transport_buffer_t *send, const size_t *send_bytes,
                     const hvd_transport_buffer_t *recv, const size_t *recv_bytes);
    /* In place over sum(counts): counts[rank] at sum(counts[..rank)) reduced, rest scratch. */
    int (*reducescatter)(void *comm, const hvd_transport_buffer_t *buf, const size_t *counts,
                         hvd_dtype_t dtype, hvd_reduce_op_t op);
    int (*barrier)(void *comm);

    /* CAP_ABORT. Any thread, idempotent: blocked and later calls return status
     * within about a second; reason (or NULL) goes to last_error. Returns HVD_OK. */
    int (*abort)(void *comm, int status, const char *reason);
    /* CAP_ABORT. Any thread, never blocks: HVD_OK, or the error that broke comm. */
    int (*async_error)(void *comm);
    /* CAP_PEER_TIMEOUT. The limit for the calls that follow; kind HVD_TRANSPORT_LIMIT_*.
     * A PEER timeout names the silent rank. Returns HVD_OK or HVD_ERR_INVALID_ARGUMENT. */
    int (*set_timeout)(void *comm, double timeout_s, int32_t kind);

    /* Appended. Bit (1 << dtype) per dtype the native reductions take; 0: all. */
    uint64_t reduce_dtypes;
} hvd_transport_t;

/* The smallest struct_size the core takes (through last_error). */
#define HVD_TRANSPORT_MIN_SIZE (offsetof(hvd_transport_t, last_error) + sizeof(void *))

typedef const hvd_transport_t *(*hvd_transport_plugin_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* HVD_TRANSPORT_H_ */
