/*
 * Compiled, not run: proves include/hvd.h is valid C99 on its own under
 * -std=c99 -pedantic -Wall -Wextra -Werror (and as C++, see CMakeLists.txt).
 * The translation unit includes nothing but hvd.h and touches every type,
 * constant and function it declares.
 */
#include "hvd.h"

typedef char hvd_check_major_[(HVD_VERSION_MAJOR >= 0) ? 1 : -1];
typedef char hvd_check_code_[(HVD_VERSION == HVD_VERSION_CODE(HVD_VERSION_MAJOR, HVD_VERSION_MINOR,
                                                              HVD_VERSION_PATCH)) ? 1 : -1];
typedef char hvd_check_ndim_[(HVD_MAX_NDIM == 32) ? 1 : -1];
typedef char hvd_check_all_[(HVD_PARAM_ALL_ & HVD_PARAM_TRANSPORT_TIMEOUT) ? 1 : -1];
typedef char hvd_check_last_[(HVD_PARAM_ALL_ == (HVD_PARAM_PEER_TIMEOUT << 1) - 1 &&
                              (HVD_PARAM_ALL_ & HVD_PARAM_AUTOTUNE)) ? 1 : -1];

static int oob(const void *send, void *recv, size_t bytes, void *user) {
    (void)send; (void)recv; (void)bytes; (void)user;
    return 0;
}

static void log_sink(int level, const char *msg, void *user) {
    (void)level; (void)msg; (void)user;
}

int hvd_header_c99_touch(void);

int hvd_header_c99_touch(void) {
    hvd_status_t st = HVD_OK;
    hvd_dtype_t dt = HVD_BFLOAT16;
    hvd_reduce_op_t op = HVD_PRODUCT;
    hvd_oob_allgather_fn f = oob;
    hvd_log_fn lf = log_sink;
    hvd_context_t ctx = NULL;
    hvd_handle_t h = NULL;
    hvd_params_t p;
    hvd_tensor_t t;
    int64_t shape[1] = {0};
    /* Every function, through a pointer of its exact type. */
    hvd_status_t (*version)(int *, int *, int *) = hvd_version;
    const char *(*status_string)(hvd_status_t) = hvd_status_string;
    const char *(*last_error)(void) = hvd_last_error;
    void (*clear_last_error)(void) = hvd_clear_last_error;
    hvd_status_t (*dtype_size)(hvd_dtype_t, size_t *) = hvd_dtype_size;
    hvd_status_t (*create)(const hvd_params_t *, hvd_context_t *) = hvd_context_create;
    hvd_status_t (*destroy)(hvd_context_t) = hvd_context_destroy;
    hvd_status_t (*ctx_getters[6])(hvd_context_t, int *) = {
        hvd_context_rank, hvd_context_size, hvd_context_local_rank,
        hvd_context_local_size, hvd_context_cross_rank, hvd_context_cross_size};
    hvd_status_t (*transport)(hvd_context_t, const char **) = hvd_context_transport;
    hvd_status_t (*mpi_threads)(hvd_context_t, int *) = hvd_mpi_threads_supported;
    hvd_status_t (*init)(const hvd_params_t *) = hvd_init;
    hvd_status_t (*shutdown)(void) = hvd_shutdown;
    hvd_status_t (*is_init)(int *) = hvd_is_initialized;
    hvd_status_t (*dflt)(hvd_context_t *) = hvd_default_context;
    hvd_status_t (*getters[6])(int *) = {hvd_rank, hvd_size, hvd_local_rank,
                                          hvd_local_size, hvd_cross_rank, hvd_cross_size};
    hvd_status_t (*ar)(hvd_context_t, const char *, const hvd_tensor_t *, void *,
                       hvd_reduce_op_t, double, double, hvd_handle_t *) = hvd_allreduce_async;
    hvd_status_t (*gar)(hvd_context_t, int32_t, const char *const *, const hvd_tensor_t *,
                        void *const *, hvd_reduce_op_t, double, double, hvd_handle_t *) =
        hvd_grouped_allreduce_async;
    hvd_status_t (*ag)(hvd_context_t, const char *, const hvd_tensor_t *, hvd_handle_t *) =
        hvd_allgather_async;
    hvd_status_t (*bc)(hvd_context_t, const char *, const hvd_tensor_t *, void *, int32_t,
                       hvd_handle_t *) = hvd_broadcast_async;
    hvd_status_t (*a2a)(hvd_context_t, const char *, const hvd_tensor_t *, const int64_t *,
                        hvd_handle_t *) = hvd_alltoall_async;
    hvd_status_t (*rs)(hvd_context_t, const char *, const hvd_tensor_t *, hvd_reduce_op_t,
                       double, double, hvd_handle_t *) = hvd_reducescatter_async;
    hvd_status_t (*bar)(hvd_context_t, hvd_handle_t *) = hvd_barrier_async;
    hvd_status_t (*join)(hvd_context_t, hvd_handle_t *) = hvd_join_async;
    hvd_status_t (*ar_b)(hvd_context_t, const char *, const hvd_tensor_t *, void *,
                         hvd_reduce_op_t) = hvd_allreduce;
    hvd_status_t (*bc_b)(hvd_context_t, const char *, const hvd_tensor_t *, void *, int32_t) =
        hvd_broadcast;
    hvd_status_t (*bar_b)(hvd_context_t) = hvd_barrier;
    hvd_status_t (*wait)(hvd_handle_t, double) = hvd_handle_wait;
    hvd_status_t (*poll)(hvd_handle_t) = hvd_handle_poll;
    hvd_status_t (*release)(hvd_handle_t) = hvd_handle_release;
    hvd_status_t (*output)(hvd_handle_t, const void **, size_t *) = hvd_handle_output;
    hvd_status_t (*output_device)(hvd_handle_t, const void **, size_t *, int32_t *) =
        hvd_handle_output_device;
    hvd_status_t (*output_shape)(hvd_handle_t, int64_t *, int32_t, int32_t *) =
        hvd_handle_output_shape;
    hvd_status_t (*recv_splits)(hvd_handle_t, int64_t *, int32_t) = hvd_handle_recv_splits;
    hvd_status_t (*cuda_event)(hvd_handle_t, void **) = hvd_handle_cuda_event;
    hvd_status_t (*stream_wait)(hvd_handle_t, void *) = hvd_handle_stream_wait;

    p.struct_size = sizeof(p);
    p.mask = HVD_PARAM_RANK | HVD_PARAM_SIZE | HVD_PARAM_LOCAL_RANK | HVD_PARAM_LOCAL_SIZE |
             HVD_PARAM_CROSS_RANK | HVD_PARAM_CROSS_SIZE | HVD_PARAM_TRANSPORT |
             HVD_PARAM_RENDEZVOUS_ADDR | HVD_PARAM_SECRET | HVD_PARAM_OOB |
             HVD_PARAM_FUSION_THRESHOLD | HVD_PARAM_CYCLE_TIME | HVD_PARAM_CACHE_CAPACITY |
             HVD_PARAM_STALL_WARNING | HVD_PARAM_STALL_SHUTDOWN | HVD_PARAM_START_TIMEOUT |
             HVD_PARAM_TIMELINE | HVD_PARAM_LOG_FN | HVD_PARAM_LOG_LEVEL |
             HVD_PARAM_NETWORK_INTERFACE | HVD_PARAM_MPI_COMM | HVD_PARAM_TRANSPORT_TIMEOUT |
             HVD_PARAM_AUTOTUNE | HVD_PARAM_TRANSPORT_PATH;
    p.oob_allgather = f;
    p.log_fn = lf;
    p.log_level = HVD_LOG_ERROR + HVD_LOG_WARNING + HVD_LOG_INFO + HVD_LOG_DEBUG + HVD_LOG_TRACE;
    p.autotune = 1;
    p.transport_path = "/opt/hvd/plugins";
    t.data = NULL;
    t.dtype = dt;
    t.ndim = 1;
    t.shape = shape;
    t.device = HVD_DEVICE_CPU;
    t.stream = NULL;

    return (int)st + (int)op + (int)p.mask + t.ndim + (ctx == NULL) + (h == NULL) +
           (version != 0) + (status_string != 0) + (last_error != 0) + (clear_last_error != 0) +
           (dtype_size != 0) + (create != 0) + (destroy != 0) + (ctx_getters[0] != 0) +
           (transport != 0) + (init != 0) + (shutdown != 0) + (is_init != 0) + (dflt != 0) +
           (getters[0] != 0) + (ar != 0) + (gar != 0) + (ag != 0) + (bc != 0) + (a2a != 0) +
           (rs != 0) + (bar != 0) + (ar_b != 0) + (bc_b != 0) + (bar_b != 0) + (wait != 0) +
           (poll != 0) + (release != 0) + (output != 0) + (output_device != 0) + (output_shape != 0) +
           (recv_splits != 0) + (cuda_event != 0) + (stream_wait != 0) + (mpi_threads != 0) +
           (join != 0);
}
