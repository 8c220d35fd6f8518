/*
 * A fake transport plugin for the loader's tests (test_transport_loader):
 * a world of one whose collectives do nothing. Built as a shared library
 * that the tests copy to libhvd_transport_<name>.so in folders of their own.
 *
 * Read when the core asks for the table:
 *   FAKE_PLUGIN_MODE  "native" (unset too: no point-to-point, every
 *                     collective native but reducescatter) or "p2p"
 *                     (point-to-point only; a world of one never sends);
 *   FAKE_PLUGIN_NULL  an entry to leave NULL ("name", "init", "isend",
 *                     "barrier", ...), so one library serves every
 *                     "missing entry" case;
 *   FAKE_PLUGIN_SIZE  the struct_size the table claims (an older plugin's
 *                     smaller table).
 */
#include <stdlib.h>
#include <string.h>

#include "hvd_transport.h"

#define FAKE_EXPORT __attribute__((visibility("default")))

static int g_comm;

static int fake_init(const hvd_transport_env_t *env, hvd_transport_info_t *info, void **comm,
                     char *err, size_t err_len) {
    (void)env;
    (void)info;
    (void)err;
    (void)err_len;
    *comm = &g_comm;
    return HVD_OK;
}
static void fake_finalize(void *comm) { (void)comm; }
static const char *fake_last_error(void *comm) {
    (void)comm;
    return "";
}
static int fake_p2p(void *comm, int32_t peer, uint32_t tag, const hvd_transport_buffer_t *buf,
                    hvd_transport_request_t **req) {
    (void)comm;
    (void)peer;
    (void)tag;
    (void)buf;
    (void)req;
    return HVD_ERR_INTERNAL; /* a world of one never sends */
}
static int fake_wait(void *comm, hvd_transport_request_t *req, double timeout_s) {
    (void)comm;
    (void)req;
    (void)timeout_s;
    return HVD_ERR_INTERNAL;
}
static int g_native_calls;
static int fake_allreduce(void *comm, const hvd_transport_buffer_t *buf, size_t count,
                          hvd_dtype_t dtype, hvd_reduce_op_t op) {
    (void)comm;
    (void)buf;
    (void)count;
    (void)dtype;
    (void)op;
    ++g_native_calls;
    return HVD_OK;
}
static int fake_allgatherv(void *comm, const hvd_transport_buffer_t *send,
                           const hvd_transport_buffer_t *recv, const size_t *recv_bytes) {
    (void)comm;
    if (recv_bytes[0] > 0 && send->data != recv->data) memmove(recv->data, send->data, recv_bytes[0]);
    return HVD_OK;
}
static int fake_broadcast(void *comm, const hvd_transport_buffer_t *buf, int32_t root) {
    (void)comm;
    (void)buf;
    (void)root;
    return HVD_OK;
}
static int fake_alltoallv(void *comm, const hvd_transport_buffer_t *send, const size_t *send_bytes,
                          const hvd_transport_buffer_t *recv, const size_t *recv_bytes) {
    (void)comm;
    (void)recv_bytes;
    if (send_bytes[0] > 0 && send->data != recv->data) memmove(recv->data, send->data, send_bytes[0]);
    return HVD_OK;
}
static int fake_barrier(void *comm) {
    (void)comm;
    return HVD_OK;
}
static int fake_set_timeout(void *comm, double timeout_s, int32_t kind) {
    (void)comm;
    (void)timeout_s;
    (void)kind;
    return HVD_OK;
}

/* How many times the native allreduce ran (the test reads it with dlsym). */
FAKE_EXPORT int fake_native_calls(void) { return g_native_calls; }

/* Rebuilt on every call: the name the plugin gives itself lives here, in the
 * plugin's own memory, and goes away when the plugin is unloaded. */
static char g_name[16];
static hvd_transport_t g_table;

FAKE_EXPORT const hvd_transport_t *hvd_transport_plugin(void) {
    const char *mode = getenv("FAKE_PLUGIN_MODE");
    const char *null_entry = getenv("FAKE_PLUGIN_NULL");
    const char *size = getenv("FAKE_PLUGIN_SIZE");
    memset(&g_table, 0, sizeof(g_table));
    strcpy(g_name, "fake");
    g_table.abi_version = HVD_TRANSPORT_ABI;
    g_table.struct_size = size != NULL ? (uint32_t)atoi(size) : (uint32_t)sizeof(g_table);
    g_table.name = g_name;
    g_table.init = fake_init;
    g_table.finalize = fake_finalize;
    g_table.last_error = fake_last_error;
    g_table.caps = HVD_TRANSPORT_CAP_PEER_TIMEOUT;
    g_table.set_timeout = fake_set_timeout;
    if (mode != NULL && strcmp(mode, "p2p") == 0) {
        g_table.caps |= HVD_TRANSPORT_CAP_P2P;
        g_table.isend = fake_p2p;
        g_table.irecv = fake_p2p;
        g_table.wait = fake_wait;
    } else {
        g_table.allreduce = fake_allreduce;
        g_table.allgatherv = fake_allgatherv;
        g_table.broadcast = fake_broadcast;
        g_table.alltoallv = fake_alltoallv;
        g_table.barrier = fake_barrier;
    }
    if (null_entry != NULL) {
#define FAKE_NULL(field) \
    if (strcmp(null_entry, #field) == 0) g_table.field = NULL
        FAKE_NULL(name);
        FAKE_NULL(init);
        FAKE_NULL(finalize);
        FAKE_NULL(last_error);
        FAKE_NULL(isend);
        FAKE_NULL(irecv);
        FAKE_NULL(wait);
        FAKE_NULL(allreduce);
        FAKE_NULL(allgatherv);
        FAKE_NULL(broadcast);
        FAKE_NULL(alltoallv);
        FAKE_NULL(barrier);
        FAKE_NULL(set_timeout);
#undef FAKE_NULL
    }
    return &g_table;
}
