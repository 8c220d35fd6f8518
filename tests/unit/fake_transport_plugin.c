/*
 * A fake transport plugin for the loader's tests (test_transport_loader):
 * a world of one whose collectives do nothing. Built as a shared library
 * that the tests copy to libhvd_transport_<name>.so in folders of their own.
 *
 * FAKE_PLUGIN_NULL (read when the core asks for the table) names one entry
 * of the version 1 table to leave NULL ("name", "init", ..., "query"), so
 * one library serves every "missing entry" case. The version 2 table has
 * both of its entries NULL (the core must treat them as absent and never
 * call them, whatever query says).
 *
 * FAKE_PLUGIN_V4 makes the plugin offer a version 4 table as well (unset:
 * its hvd_transport_plugin_v4 returns NULL, which declines version 4):
 * "native" (no point-to-point: every collective native) or "p2p"
 * (point-to-point only; a world of one never sends). FAKE_PLUGIN_NULL then
 * names a version 4 entry to leave NULL ("isend", "barrier", ...), and
 * FAKE_PLUGIN_V4_SIZE, if set, is the struct_size the table claims (an older
 * plugin's smaller table).
 */
#include <stdlib.h>
#include <string.h>

#include "hvd_transport.h"

#define FAKE_EXPORT __attribute__((visibility("default")))

static int g_comm;

static int fake_init(const hvd_transport_env_v1_t *env, void **comm, char *err, size_t err_len) {
    (void)env;
    (void)err;
    (void)err_len;
    *comm = &g_comm;
    return HVD_OK;
}
static void fake_finalize(void *comm) { (void)comm; }
static int fake_allreduce(void *comm, void *buf, size_t count, hvd_dtype_t dtype,
                          hvd_reduce_op_t op) {
    (void)comm;
    (void)buf;
    (void)count;
    (void)dtype;
    (void)op;
    return HVD_OK;
}
static int fake_allgatherv(void *comm, const void *send, void *recv, const size_t *recv_bytes) {
    (void)comm;
    if (recv_bytes[0] > 0 && send != recv) memmove(recv, send, recv_bytes[0]);
    return HVD_OK;
}
static int fake_broadcast(void *comm, void *buf, size_t bytes, int32_t root) {
    (void)comm;
    (void)buf;
    (void)bytes;
    (void)root;
    return HVD_OK;
}
static int fake_alltoallv(void *comm, const void *send, const size_t *send_bytes, void *recv,
                          const size_t *recv_bytes) {
    (void)comm;
    (void)recv_bytes;
    if (send_bytes[0] > 0 && send != recv) memmove(recv, send, send_bytes[0]);
    return HVD_OK;
}
static int fake_barrier(void *comm) {
    (void)comm;
    return HVD_OK;
}
static const char *fake_last_error(void *comm) {
    (void)comm;
    return "";
}
/* Claims allreduce_spans although the version 2 entry is NULL: the core
 * must go by the entry, not by this answer. */
static int fake_query(void *comm, const char *key, int64_t *value) {
    (void)comm;
    if (strcmp(key, "allreduce_spans") == 0) {
        *value = 1;
        return HVD_OK;
    }
    if (strcmp(key, "answer") == 0) {
        *value = 42;
        return HVD_OK;
    }
    return HVD_ERR_UNSUPPORTED;
}

/* Rebuilt on every call: the name the plugin gives itself lives here, in the
 * plugin's own memory, and goes away when the plugin is unloaded. */
static char g_name[16];
static hvd_transport_v1_t g_table;
static hvd_transport_v2_t g_table_v2;

FAKE_EXPORT const hvd_transport_v1_t *hvd_transport_plugin_v1(void) {
    const char *null_entry = getenv("FAKE_PLUGIN_NULL");
    strcpy(g_name, "fake");
    g_table.abi_version = HVD_TRANSPORT_ABI_V1;
    g_table.name = g_name;
    g_table.init = fake_init;
    g_table.finalize = fake_finalize;
    g_table.allreduce = fake_allreduce;
    g_table.allgatherv = fake_allgatherv;
    g_table.broadcast = fake_broadcast;
    g_table.alltoallv = fake_alltoallv;
    g_table.barrier = fake_barrier;
    g_table.last_error = fake_last_error;
    g_table.query = fake_query;
    if (null_entry != NULL) {
#define FAKE_NULL(field) \
    if (strcmp(null_entry, #field) == 0) g_table.field = NULL
        FAKE_NULL(name);
        FAKE_NULL(init);
        FAKE_NULL(finalize);
        FAKE_NULL(allreduce);
        FAKE_NULL(allgatherv);
        FAKE_NULL(broadcast);
        FAKE_NULL(alltoallv);
        FAKE_NULL(barrier);
        FAKE_NULL(last_error);
        FAKE_NULL(query);
#undef FAKE_NULL
    }
    return &g_table;
}

FAKE_EXPORT const hvd_transport_v2_t *hvd_transport_plugin_v2(void) {
    g_table_v2.abi_version = HVD_TRANSPORT_ABI_V2;
    g_table_v2.v1 = &g_table;
    g_table_v2.reducescatter = NULL;
    g_table_v2.allreduce_spans = NULL;
    return &g_table_v2;
}

/* ---- version 4 ------------------------------------------------------------ */

static int fake4_init(const hvd_transport_env_v1_t *env, hvd_transport_info_t *info, void **comm,
                      char *err, size_t err_len) {
    (void)env;
    (void)info;
    (void)err;
    (void)err_len;
    *comm = &g_comm;
    return HVD_OK;
}
static int fake4_p2p(void *comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t *buf,
                     hvd_transport_request_t **req) {
    (void)comm;
    (void)peer;
    (void)tag;
    (void)buf;
    (void)req;
    return HVD_ERR_INTERNAL; /* a world of one never sends */
}
static int fake4_wait(void *comm, hvd_transport_request_t *req, double timeout_s) {
    (void)comm;
    (void)req;
    (void)timeout_s;
    return HVD_ERR_INTERNAL;
}
static int g_native_calls;
static int fake4_allreduce(void *comm, const hvd_transport_buffer_t *buf, size_t count,
                           hvd_dtype_t dtype, hvd_reduce_op_t op) {
    (void)comm;
    (void)buf;
    (void)count;
    (void)dtype;
    (void)op;
    ++g_native_calls;
    return HVD_OK;
}
static int fake4_allgatherv(void *comm, const hvd_transport_buffer_t *send,
                            const hvd_transport_buffer_t *recv, const size_t *recv_bytes) {
    (void)comm;
    if (recv_bytes[0] > 0 && send->data != recv->data) memmove(recv->data, send->data, recv_bytes[0]);
    return HVD_OK;
}
static int fake4_broadcast(void *comm, const hvd_transport_buffer_t *buf, int32_t root) {
    (void)comm;
    (void)buf;
    (void)root;
    return HVD_OK;
}
static int fake4_alltoallv(void *comm, const hvd_transport_buffer_t *send, const size_t *send_bytes,
                           const hvd_transport_buffer_t *recv, const size_t *recv_bytes) {
    (void)comm;
    (void)recv_bytes;
    if (send_bytes[0] > 0 && send->data != recv->data) memmove(recv->data, send->data, send_bytes[0]);
    return HVD_OK;
}
static int fake4_set_timeout(void *comm, double timeout_s, int32_t kind) {
    (void)comm;
    (void)timeout_s;
    (void)kind;
    return HVD_OK;
}

/* How many times the native allreduce ran (the test reads it with dlsym). */
FAKE_EXPORT int fake_native_calls(void) { return g_native_calls; }

static hvd_transport_v4_t g_table_v4;

FAKE_EXPORT const hvd_transport_v4_t *hvd_transport_plugin_v4(void) {
    const char *mode = getenv("FAKE_PLUGIN_V4");
    const char *null_entry = getenv("FAKE_PLUGIN_NULL");
    const char *size = getenv("FAKE_PLUGIN_V4_SIZE");
    if (mode == NULL) return NULL;
    memset(&g_table_v4, 0, sizeof(g_table_v4));
    strcpy(g_name, "fake");
    g_table_v4.abi_version = HVD_TRANSPORT_ABI_V4;
    g_table_v4.struct_size = size != NULL ? (uint32_t)atoi(size) : (uint32_t)sizeof(g_table_v4);
    g_table_v4.name = g_name;
    g_table_v4.init = fake4_init;
    g_table_v4.finalize = fake_finalize;
    g_table_v4.last_error = fake_last_error;
    g_table_v4.caps = HVD_TRANSPORT_CAP_PEER_TIMEOUT;
    g_table_v4.set_timeout = fake4_set_timeout;
    if (strcmp(mode, "p2p") == 0) {
        g_table_v4.caps |= HVD_TRANSPORT_CAP_P2P;
        g_table_v4.isend = fake4_p2p;
        g_table_v4.irecv = fake4_p2p;
        g_table_v4.wait = fake4_wait;
    } else {
        g_table_v4.allreduce = fake4_allreduce;
        g_table_v4.allgatherv = fake4_allgatherv;
        g_table_v4.broadcast = fake4_broadcast;
        g_table_v4.alltoallv = fake4_alltoallv;
        g_table_v4.barrier = fake_barrier;
    }
    if (null_entry != NULL) {
#define FAKE_NULL4(field) \
    if (strcmp(null_entry, #field) == 0) g_table_v4.field = NULL
        FAKE_NULL4(init);
        FAKE_NULL4(isend);
        FAKE_NULL4(wait);
        FAKE_NULL4(barrier);
        FAKE_NULL4(set_timeout);
#undef FAKE_NULL4
    }
    return &g_table_v4;
}
