/*
 * The transport plugin ABI (C).
 *
 * A transport is a shared object libhvd_transport_<name>.so exporting
 *     const hvd_transport_v1_t *hvd_transport_plugin_v1(void);
 * The core finds it next to libhvd.so (or in the directories of
 * params.transport_path or HVD_TRANSPORT_PATH), dlopens it, and asks for the
 * newest table version it knows, falling back to older ones. A plugin never
 * links against libhvd: all it needs from the core (the rendezvous key-value
 * store, the logger, the reduction kernels) comes in through
 * hvd_transport_env_v1_t.
 *
 * Threading: every entry point of one communicator is called from one thread
 * at a time (the context's background thread). Entry points are noexcept:
 * they return an hvd_status_t and keep a message for last_error().
 *
 * Data: all buffers are contiguous host memory (device buffers come with a
 * later table version). Counts are elements for reductions, bytes elsewhere.
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

#ifdef __cplusplus
}
#endif

#endif /* HVD_TRANSPORT_H_ */
