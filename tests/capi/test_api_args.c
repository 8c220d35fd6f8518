/*
 * The C ABI without a launcher: init macros, frozen layouts and numbers,
 * status strings, the per-thread last error, the params struct's size and
 * mask rules, and NULL / invalid arguments on every function (a documented
 * status and a message, never a crash). Collectives run on explicit
 * world-of-one contexts; hvd_init is never called in this program, so the
 * default context stays absent throughout.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "capi_test_util.h"
#include "hvd.h"

/* A call fails with `code` and leaves a non-empty last error. */
#define EXPECT_FAIL(call, code)                                                  \
    do {                                                                         \
        hvd_clear_last_error();                                                  \
        assert_int_equal((call), (code));                                        \
        if (hvd_last_error()[0] == '\0') fail_msg("%s: empty last error", #call); \
    } while (0)

/* ... and the message contains every needle (argument and tensor names). */
#define EXPECT_FAIL_MSG(call, code, needle1, needle2)                                    \
    do {                                                                                 \
        EXPECT_FAIL(call, code);                                                         \
        if (strstr(hvd_last_error(), (needle1)) == NULL ||                               \
            strstr(hvd_last_error(), (needle2)) == NULL)                                 \
            fail_msg("%s: message \"%s\" does not name \"%s\" and \"%s\"", #call,          \
                     hvd_last_error(), (needle1), (needle2));                            \
    } while (0)

#define EXPECT_OK(call)                                                          \
    do {                                                                         \
        hvd_status_t st_ = (call);                                               \
        if (st_ != HVD_OK) fail_msg("%s = %d (%s)", #call, (int)st_, hvd_last_error()); \
    } while (0)

/* A pointer that is not NULL and not a handle: *handle must be reset to NULL
 * by a failing call. */
#define GARBAGE_HANDLE ((hvd_handle_t)(uintptr_t)0x10)

static hvd_params_t world_of_one_params(void) {
    hvd_params_t p = HVD_PARAMS_INIT;
    p.mask = HVD_PARAM_RANK | HVD_PARAM_SIZE;
    p.rank = 0;
    p.size = 1;
    return p;
}

/* ---------------------------------------------------------------------- */
/* Macros, layout, numbers.                                               */
/* ---------------------------------------------------------------------- */

static void test_params_init_macro(void **state) {
    hvd_params_t p = HVD_PARAMS_INIT;
    (void)state;
    /* Every field: struct_size is the caller's sizeof, the rest zero/NULL. */
    assert_int_equal(p.struct_size, sizeof(hvd_params_t));
    assert_int_equal(p.mask, 0);
    assert_int_equal(p.rank, 0);
    assert_int_equal(p.size, 0);
    assert_int_equal(p.local_rank, 0);
    assert_int_equal(p.local_size, 0);
    assert_int_equal(p.cross_rank, 0);
    assert_int_equal(p.cross_size, 0);
    assert_null(p.transport);
    assert_null(p.rendezvous_addr);
    assert_null(p.secret);
    assert_null(p.oob_allgather);
    assert_null(p.oob_user);
    assert_int_equal(p.fusion_threshold_bytes, 0);
    assert_true(p.cycle_time_ms == 0.0);
    assert_int_equal(p.cache_capacity, 0);
    assert_true(p.stall_warning_s == 0.0);
    assert_true(p.stall_shutdown_s == 0.0);
    assert_true(p.start_timeout_s == 0.0);
    assert_null(p.timeline_path);
    assert_null(p.log_fn);
    assert_null(p.log_user);
    assert_int_equal(p.log_level, 0);
    assert_null(p.network_interface);
    assert_null(p.mpi_comm);
    assert_true(p.transport_timeout_s == 0.0);
    assert_int_equal(p.autotune, 0);
    assert_null(p.transport_path);
}

static void test_tensor_init_macro(void **state) {
    hvd_tensor_t t = HVD_TENSOR_INIT;
    (void)state;
    assert_null(t.data);
    assert_int_equal(t.dtype, HVD_FLOAT32);
    assert_int_equal(t.ndim, 0);
    assert_null(t.shape);
    assert_int_equal(t.device, HVD_DEVICE_CPU);
    assert_int_equal(t.device, -1);
    assert_null(t.stream);
}

/* Released numbers and layouts never change (object-size guards). */
static void test_frozen_numbers_and_layout(void **state) {
    (void)state;
    assert_int_equal(HVD_OK, 0);
    assert_int_equal(HVD_IN_PROGRESS, 1);
    assert_int_equal(HVD_ERR_INVALID_ARGUMENT, -1);
    assert_int_equal(HVD_ERR_NOT_INITIALIZED, -2);
    assert_int_equal(HVD_ERR_NO_MEMORY, -3);
    assert_int_equal(HVD_ERR_TIMEOUT, -4);
    assert_int_equal(HVD_ERR_MISMATCH, -5);
    assert_int_equal(HVD_ERR_TRANSPORT, -6);
    assert_int_equal(HVD_ERR_UNSUPPORTED, -7);
    assert_int_equal(HVD_ERR_NOT_FOUND, -8);
    assert_int_equal(HVD_ERR_ABORTED, -9);
    assert_int_equal(HVD_ERR_DUPLICATE_NAME, -10);
    assert_int_equal(HVD_ERR_VERSION, -11);
    assert_int_equal(HVD_ERR_RENDEZVOUS, -12);
    assert_int_equal(HVD_ERR_INTERNAL, -13);
    assert_int_equal(HVD_ERR_MEMBERSHIP_CHANGED, -14);
    assert_int_equal(HVD_UINT8, 0);
    assert_int_equal(HVD_INT32, 4);
    assert_int_equal(HVD_FLOAT16, 6);
    assert_int_equal(HVD_BFLOAT16, 7);
    assert_int_equal(HVD_FLOAT32, 8);
    assert_int_equal(HVD_BOOL, 10);
    assert_int_equal(HVD_SUM, 0);
    assert_int_equal(HVD_AVERAGE, 1);
    assert_int_equal(HVD_PRODUCT, 4);
    assert_int_equal(HVD_PARAM_TRANSPORT_TIMEOUT, 1ULL << 21);
    assert_int_equal(HVD_PARAM_AUTOTUNE, 1ULL << 22);
    assert_int_equal(HVD_PARAM_TRANSPORT_PATH, 1ULL << 23);
    assert_int_equal(HVD_PARAM_PEER_TIMEOUT, 1ULL << 24);
    assert_int_equal(HVD_PARAM_ALL_, (1ULL << 25) - 1);
#if defined(__x86_64__) || defined(__aarch64__)
    assert_int_equal(sizeof(hvd_tensor_t), 40);
    assert_int_equal(offsetof(hvd_tensor_t, dtype), 8);
    assert_int_equal(offsetof(hvd_tensor_t, ndim), 12);
    assert_int_equal(offsetof(hvd_tensor_t, shape), 16);
    assert_int_equal(offsetof(hvd_tensor_t, device), 24);
    assert_int_equal(offsetof(hvd_tensor_t, stream), 32);
    assert_int_equal(sizeof(hvd_params_t), 208);
    assert_int_equal(offsetof(hvd_params_t, mask), 8);
    assert_int_equal(offsetof(hvd_params_t, rank), 16);
    assert_int_equal(offsetof(hvd_params_t, cross_size), 36);
    assert_int_equal(offsetof(hvd_params_t, transport), 40);
    assert_int_equal(offsetof(hvd_params_t, oob_allgather), 64);
    assert_int_equal(offsetof(hvd_params_t, oob_user), 72);
    assert_int_equal(offsetof(hvd_params_t, fusion_threshold_bytes), 80);
    assert_int_equal(offsetof(hvd_params_t, cache_capacity), 96);
    assert_int_equal(offsetof(hvd_params_t, timeline_path), 128);
    assert_int_equal(offsetof(hvd_params_t, log_level), 152);
    assert_int_equal(offsetof(hvd_params_t, network_interface), 160);
    assert_int_equal(offsetof(hvd_params_t, mpi_comm), 168);
    assert_int_equal(offsetof(hvd_params_t, transport_timeout_s), 176);
    assert_int_equal(offsetof(hvd_params_t, autotune), 184);
    assert_int_equal(offsetof(hvd_params_t, transport_path), 192);
    assert_int_equal(offsetof(hvd_params_t, peer_timeout_s), 200);
#endif
}

static void test_version(void **state) {
    int major = -1, minor = -1, patch = -1;
    (void)state;
    EXPECT_OK(hvd_version(&major, &minor, &patch));
    assert_int_equal(major, HVD_VERSION_MAJOR);
    assert_int_equal(minor, HVD_VERSION_MINOR);
    assert_int_equal(patch, HVD_VERSION_PATCH);
    /* Any pointer may be NULL. */
    EXPECT_OK(hvd_version(NULL, NULL, NULL));
    minor = -1;
    EXPECT_OK(hvd_version(NULL, &minor, NULL));
    assert_int_equal(minor, HVD_VERSION_MINOR);
}

static void test_dtype_size(void **state) {
    static const struct { hvd_dtype_t dtype; size_t size; } want[] = {
        {HVD_UINT8, 1}, {HVD_INT8, 1},     {HVD_UINT16, 2},  {HVD_INT16, 2},
        {HVD_INT32, 4}, {HVD_INT64, 8},    {HVD_FLOAT16, 2}, {HVD_BFLOAT16, 2},
        {HVD_FLOAT32, 4}, {HVD_FLOAT64, 8}, {HVD_BOOL, 1}};
    size_t i, sz;
    (void)state;
    for (i = 0; i < sizeof(want) / sizeof(want[0]); ++i) {
        sz = 12345;
        EXPECT_OK(hvd_dtype_size(want[i].dtype, &sz));
        assert_int_equal(sz, want[i].size);
    }
    EXPECT_FAIL(hvd_dtype_size(HVD_FLOAT32, NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL_MSG(hvd_dtype_size((hvd_dtype_t)99, &sz), HVD_ERR_INVALID_ARGUMENT, "dtype", "99");
    EXPECT_FAIL(hvd_dtype_size((hvd_dtype_t)11, &sz), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_dtype_size((hvd_dtype_t)-1, &sz), HVD_ERR_INVALID_ARGUMENT);
}

/* ---------------------------------------------------------------------- */
/* Status strings and the last error.                                      */
/* ---------------------------------------------------------------------- */

static void test_status_strings(void **state) {
    static const hvd_status_t known[] = {
        HVD_OK, HVD_IN_PROGRESS, HVD_ERR_INVALID_ARGUMENT, HVD_ERR_NOT_INITIALIZED,
        HVD_ERR_NO_MEMORY, HVD_ERR_TIMEOUT, HVD_ERR_MISMATCH, HVD_ERR_TRANSPORT,
        HVD_ERR_UNSUPPORTED, HVD_ERR_NOT_FOUND, HVD_ERR_ABORTED, HVD_ERR_DUPLICATE_NAME,
        HVD_ERR_VERSION, HVD_ERR_RENDEZVOUS, HVD_ERR_INTERNAL, HVD_ERR_MEMBERSHIP_CHANGED};
    static const int unknown[] = {2, 3, 100, -15, -100, 2147483647, -2147483647 - 1};
    const size_t n = sizeof(known) / sizeof(known[0]);
    const char *fallback = hvd_status_string((hvd_status_t)-15);
    size_t i, j;
    (void)state;
    assert_non_null(fallback);
    assert_string_equal(fallback, "unknown status");
    for (i = 0; i < n; ++i) {
        const char *s = hvd_status_string(known[i]);
        assert_non_null(s);
        if (s[0] == '\0') fail_msg("status %d has empty text", (int)known[i]);
        if (strcmp(s, fallback) == 0) fail_msg("status %d has the fallback text", (int)known[i]);
        /* Constant text: the same pointer every time. */
        assert_ptr_equal(s, hvd_status_string(known[i]));
        for (j = 0; j < i; ++j) {
            if (strcmp(s, hvd_status_string(known[j])) == 0)
                fail_msg("statuses %d and %d share the text \"%s\"", (int)known[i],
                         (int)known[j], s);
        }
    }
    for (i = 0; i < sizeof(unknown) / sizeof(unknown[0]); ++i) {
        assert_string_equal(hvd_status_string((hvd_status_t)unknown[i]), "unknown status");
    }
}

static void test_last_error_lifecycle(void **state) {
    int v = 0;
    size_t sz = 0;
    (void)state;
    hvd_clear_last_error();
    assert_non_null(hvd_last_error());
    assert_string_equal(hvd_last_error(), "");
    /* A failure sets it. */
    assert_int_equal(hvd_dtype_size(HVD_INT32, NULL), HVD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hvd_last_error(), "out"));
    /* A success does not clear it (libgit2 style). */
    EXPECT_OK(hvd_version(&v, NULL, NULL));
    assert_non_null(strstr(hvd_last_error(), "out"));
    /* The next failure replaces it. */
    assert_int_equal(hvd_dtype_size((hvd_dtype_t)77, &sz), HVD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hvd_last_error(), "77"));
    assert_null(strstr(hvd_last_error(), "out is NULL"));
    hvd_clear_last_error();
    assert_string_equal(hvd_last_error(), "");
}

typedef struct per_thread_state {
    pthread_barrier_t *barrier;
    capi_record rec;
    char seen_at_start[256];
    char mine[512];
    char after_other[512];
    int which;
} per_thread_state;

/* Thread 0 fails with a NULL out-pointer, thread 1 with a bad dtype; each
 * must keep seeing its own message after the other has failed. */
static void *per_thread_body(void *arg) {
    per_thread_state *s = (per_thread_state *)arg;
    size_t sz;
    snprintf(s->seen_at_start, sizeof(s->seen_at_start), "%s", hvd_last_error());
    if (s->which == 0) {
        REC_EQ_INT(&s->rec, hvd_dtype_size(HVD_INT32, NULL), HVD_ERR_INVALID_ARGUMENT);
        snprintf(s->mine, sizeof(s->mine), "%s", hvd_last_error());
        pthread_barrier_wait(s->barrier); /* 1: thread 0 has failed */
        pthread_barrier_wait(s->barrier); /* 2: thread 1 has failed */
    } else {
        pthread_barrier_wait(s->barrier); /* 1 */
        REC_EQ_INT(&s->rec, hvd_dtype_size((hvd_dtype_t)99, &sz), HVD_ERR_INVALID_ARGUMENT);
        snprintf(s->mine, sizeof(s->mine), "%s", hvd_last_error());
        pthread_barrier_wait(s->barrier); /* 2 */
    }
    snprintf(s->after_other, sizeof(s->after_other), "%s", hvd_last_error());
    return NULL;
}

static void test_last_error_is_per_thread(void **state) {
    pthread_barrier_t barrier;
    pthread_t threads[2];
    per_thread_state s[2];
    int i;
    (void)state;
    /* The test thread's own error must not leak into new threads. */
    assert_int_equal(hvd_rank(NULL), HVD_ERR_INVALID_ARGUMENT);
    assert_string_not_equal(hvd_last_error(), "");
    pthread_barrier_init(&barrier, NULL, 2);
    memset(s, 0, sizeof(s));
    for (i = 0; i < 2; ++i) {
        s[i].barrier = &barrier;
        s[i].which = i;
        assert_int_equal(pthread_create(&threads[i], NULL, per_thread_body, &s[i]), 0);
    }
    for (i = 0; i < 2; ++i) pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&barrier);
    for (i = 0; i < 2; ++i) {
        if (s[i].rec.failures) fail_msg("thread %d: %s", i, s[i].rec.first);
        assert_string_equal(s[i].seen_at_start, "");
        assert_string_not_equal(s[i].mine, "");
        assert_string_equal(s[i].after_other, s[i].mine);
    }
    assert_string_not_equal(s[0].mine, s[1].mine);
    assert_non_null(strstr(s[1].mine, "99"));
    assert_null(strstr(s[0].mine, "99"));
    /* The test thread's message is its own too. */
    assert_non_null(strstr(hvd_last_error(), "hvd_rank"));
}

/* ---------------------------------------------------------------------- */
/* The default context is absent in this program.                         */
/* ---------------------------------------------------------------------- */

static void test_calls_before_init(void **state) {
    int v = 7;
    hvd_context_t ctx = (hvd_context_t)(uintptr_t)0x10;
    hvd_handle_t h = GARBAGE_HANDLE;
    float x[2] = {1, 2};
    int64_t shape[1] = {2};
    hvd_tensor_t t = capi_tensor_1d(x, HVD_FLOAT32, shape);
    (void)state;
    EXPECT_OK(hvd_is_initialized(&v));
    assert_int_equal(v, 0);
    EXPECT_FAIL(hvd_rank(&v), HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_size(&v), HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_local_rank(&v), HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_local_size(&v), HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_cross_rank(&v), HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_cross_size(&v), HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_context_rank(NULL, &v), HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_default_context(&ctx), HVD_ERR_NOT_INITIALIZED);
    assert_null(ctx);
    EXPECT_FAIL(hvd_shutdown(), HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_allreduce(NULL, "x", &t, x, HVD_SUM), HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_allreduce_async(NULL, "x", &t, x, HVD_SUM, 1.0, 1.0, &h),
                HVD_ERR_NOT_INITIALIZED);
    assert_null(h);
    EXPECT_FAIL(hvd_broadcast(NULL, "x", &t, x, 0), HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_barrier(NULL), HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_allgather_async(NULL, "x", &t, &h), HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_alltoall_async(NULL, "x", &t, NULL, &h), HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_reducescatter_async(NULL, "x", &t, HVD_SUM, 1.0, 1.0, &h),
                HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_barrier_async(NULL, &h), HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_join_async(NULL, &h), HVD_ERR_NOT_INITIALIZED);
    assert_null(h);
    EXPECT_FAIL(hvd_mpi_threads_supported(NULL, &v), HVD_ERR_NOT_INITIALIZED);
    assert_float_equal(x[0], 1.0f, 0.0f); /* untouched */
}

/* ---------------------------------------------------------------------- */
/* Params: struct size and mask rules.                                     */
/* ---------------------------------------------------------------------- */

static void expect_world_of_one(hvd_context_t ctx) {
    int v = -1;
    EXPECT_OK(hvd_context_rank(ctx, &v));
    assert_int_equal(v, 0);
    EXPECT_OK(hvd_context_size(ctx, &v));
    assert_int_equal(v, 1);
}

static void test_params_null_and_default(void **state) {
    hvd_context_t ctx = NULL;
    hvd_params_t p = world_of_one_params();
    (void)state;
    EXPECT_FAIL(hvd_context_create(&p, NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_OK(hvd_context_create(&p, &ctx));
    assert_non_null(ctx);
    expect_world_of_one(ctx);
    EXPECT_OK(hvd_context_destroy(ctx));
}

/* An older client: its struct ends before the newer fields; the bytes past
 * struct_size are garbage the library must not read. */
static void test_params_older_client(void **state) {
    unsigned char buf[sizeof(hvd_params_t)];
    hvd_params_t init = HVD_PARAMS_INIT;
    hvd_params_t *p = (hvd_params_t *)(void *)buf;
    hvd_context_t ctx = NULL;
    /* ..., the struct before autotune and transport_path, then before
     * transport_path alone. */
    const size_t sizes[] = {offsetof(hvd_params_t, transport),
                            offsetof(hvd_params_t, network_interface),
                            offsetof(hvd_params_t, transport_timeout_s),
                            offsetof(hvd_params_t, autotune),
                            offsetof(hvd_params_t, transport_path)};
    size_t i;
    (void)state;
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
        memset(buf, 0xAB, sizeof(buf));
        memcpy(buf, &init, sizes[i]);
        p->struct_size = sizes[i];
        p->mask = HVD_PARAM_RANK | HVD_PARAM_SIZE;
        p->rank = 0;
        p->size = 1;
        ctx = NULL;
        EXPECT_OK(hvd_context_create(p, &ctx));
        assert_non_null(ctx);
        expect_world_of_one(ctx);
        EXPECT_OK(hvd_context_destroy(ctx));
    }
}

static void test_params_unknown_mask_bits(void **state) {
    hvd_params_t p = world_of_one_params();
    hvd_context_t ctx = (hvd_context_t)(uintptr_t)0x10;
    (void)state;
    p.mask |= HVD_PARAM_ALL_ + 1; /* bit 24 */
    EXPECT_FAIL(hvd_context_create(&p, &ctx), HVD_ERR_UNSUPPORTED);
    assert_null(ctx);
    p.mask = HVD_PARAM_RANK | HVD_PARAM_SIZE | (1ULL << 63);
    EXPECT_FAIL(hvd_context_create(&p, &ctx), HVD_ERR_UNSUPPORTED);
    assert_null(ctx);
}

static void test_params_struct_too_small(void **state) {
    hvd_params_t p = world_of_one_params();
    hvd_context_t ctx = (hvd_context_t)(uintptr_t)0x10;
    (void)state;
    /* The transport bit is set but the struct ends before the field. */
    p.mask |= HVD_PARAM_TRANSPORT;
    p.transport = "local";
    p.struct_size = offsetof(hvd_params_t, transport);
    EXPECT_FAIL(hvd_context_create(&p, &ctx), HVD_ERR_INVALID_ARGUMENT);
    assert_null(ctx);
    /* Ends half-way through the field. */
    p.struct_size = offsetof(hvd_params_t, transport) + 4;
    EXPECT_FAIL(hvd_context_create(&p, &ctx), HVD_ERR_INVALID_ARGUMENT);
    /* The last fields: an older caller (struct ending before them) that sets
     * their bits gets an error naming the field. */
    p = world_of_one_params();
    p.mask |= HVD_PARAM_TRANSPORT_TIMEOUT;
    p.transport_timeout_s = 10.0;
    p.struct_size = offsetof(hvd_params_t, transport_timeout_s);
    EXPECT_FAIL(hvd_context_create(&p, &ctx), HVD_ERR_INVALID_ARGUMENT);
    p = world_of_one_params();
    p.mask |= HVD_PARAM_AUTOTUNE;
    p.autotune = 1;
    p.struct_size = offsetof(hvd_params_t, autotune);
    EXPECT_FAIL_MSG(hvd_context_create(&p, &ctx), HVD_ERR_INVALID_ARGUMENT, "autotune",
                    "struct_size");
    p = world_of_one_params();
    p.mask |= HVD_PARAM_TRANSPORT_PATH;
    p.transport_path = "/tmp";
    p.struct_size = offsetof(hvd_params_t, autotune);
    EXPECT_FAIL_MSG(hvd_context_create(&p, &ctx), HVD_ERR_INVALID_ARGUMENT, "transport_path",
                    "struct_size");
    p.struct_size = offsetof(hvd_params_t, transport_path);
    EXPECT_FAIL_MSG(hvd_context_create(&p, &ctx), HVD_ERR_INVALID_ARGUMENT, "transport_path",
                    "struct_size");
    assert_null(ctx);
    /* Too small to hold even the mask. */
    p = world_of_one_params();
    p.struct_size = 4;
    EXPECT_FAIL(hvd_context_create(&p, &ctx), HVD_ERR_INVALID_ARGUMENT);
    assert_null(ctx);
}

/* The "config: ..." line a context logs at debug level (one setting each). */
static pthread_mutex_t g_config_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_config_line[4096];

static void capture_config(int level, const char *msg, void *user) {
    (void)level;
    (void)user;
    if (strncmp(msg, "config: ", 8) != 0) return;
    pthread_mutex_lock(&g_config_mu);
    snprintf(g_config_line, sizeof(g_config_line), "%s", msg);
    pthread_mutex_unlock(&g_config_mu);
}

/* Creates and destroys a context from p (logging at debug level into
 * g_config_line); returns the status of the creation. */
static hvd_status_t create_logging_config(hvd_params_t p) {
    hvd_context_t ctx = NULL;
    hvd_status_t st;
    p.mask |= HVD_PARAM_LOG_FN | HVD_PARAM_LOG_LEVEL;
    p.log_fn = capture_config;
    p.log_level = HVD_LOG_DEBUG;
    g_config_line[0] = '\0';
    hvd_clear_last_error();
    st = hvd_context_create(&p, &ctx);
    if (st == HVD_OK) {
        EXPECT_OK(hvd_context_destroy(ctx));
    } else {
        assert_null(ctx);
    }
    return st;
}

static void expect_config(const char *needle) {
    if (strstr(g_config_line, needle) == NULL)
        fail_msg("config line \"%s\" lacks \"%s\"", g_config_line, needle);
}

static void test_params_autotune(void **state) {
    hvd_params_t p = world_of_one_params();
    (void)state;
    /* Bit clear: the environment applies, as before the field existed. */
    setenv("HVD_AUTOTUNE", "1", 1);
    EXPECT_OK(create_logging_config(p));
    expect_config("autotune=on");
    /* Bit set: the field wins over HVD_AUTOTUNE, either way. */
    p.mask |= HVD_PARAM_AUTOTUNE;
    p.autotune = 0;
    EXPECT_OK(create_logging_config(p));
    expect_config("autotune=off");
    setenv("HVD_AUTOTUNE", "not-a-switch", 1); /* not even parsed */
    p.autotune = 1;
    EXPECT_OK(create_logging_config(p));
    expect_config("autotune=on");
    unsetenv("HVD_AUTOTUNE");
    /* Only 0 and 1. */
    p.autotune = 2;
    assert_int_equal(create_logging_config(p), HVD_ERR_INVALID_ARGUMENT);
    if (strstr(hvd_last_error(), "params.autotune is 2") == NULL)
        fail_msg("unclear message: %s", hvd_last_error());
    p.autotune = -1;
    assert_int_equal(create_logging_config(p), HVD_ERR_INVALID_ARGUMENT);
}

/* transport_path is searched for plugins: a transport asked for by name must
 * be found there even where a world of one runs on "local". The plugin
 * "alias" exists only in a temporary folder (a link to the Gloo plugin). */
static void test_params_transport_path(void **state) {
    const char *lib_dir = getenv("HVD_TRANSPORT_PATH"); /* ctest: the build's lib folder */
    char env_saved[4096], dir[] = "/tmp/hvd_capi_plugins_XXXXXX", target[4200], alias[4200];
    hvd_params_t p = world_of_one_params();
    (void)state;
    if (lib_dir == NULL || lib_dir[0] == '\0' || strlen(lib_dir) >= sizeof(env_saved)) skip();
    snprintf(env_saved, sizeof(env_saved), "%s", lib_dir);
    snprintf(target, sizeof(target), "%s/libhvd_transport_gloo.so", env_saved);
    if (access(target, R_OK) != 0) skip(); /* Gloo plugin not built */
    assert_non_null(mkdtemp(dir));
    snprintf(alias, sizeof(alias), "%s/libhvd_transport_alias.so", dir);
    assert_int_equal(symlink(target, alias), 0);

    p.mask |= HVD_PARAM_TRANSPORT | HVD_PARAM_TRANSPORT_PATH;
    p.transport = "alias";
    /* The param names the folder: found. */
    p.transport_path = dir;
    EXPECT_OK(create_logging_config(p));
    expect_config(dir);
    /* The param wins over HVD_TRANSPORT_PATH: pointing elsewhere, not found,
     * and the message names the folder searched. */
    setenv("HVD_TRANSPORT_PATH", dir, 1);
    p.transport_path = "/nonexistent/hvd-plugins";
    EXPECT_FAIL_MSG(create_logging_config(p), HVD_ERR_NOT_FOUND, "/nonexistent/hvd-plugins",
                    "libhvd_transport_alias.so");
    if (strstr(hvd_last_error(), dir) != NULL)
        fail_msg("searched the environment's folder: %s", hvd_last_error());
    /* NULL or "" with the bit set: the default (next to libhvd.so only). */
    p.transport_path = "";
    EXPECT_FAIL(create_logging_config(p), HVD_ERR_NOT_FOUND);
    p.transport_path = NULL;
    EXPECT_FAIL(create_logging_config(p), HVD_ERR_NOT_FOUND);
    /* Bit clear: HVD_TRANSPORT_PATH applies as before. */
    p.mask &= ~HVD_PARAM_TRANSPORT_PATH;
    p.transport_path = "/nonexistent/hvd-plugins";
    EXPECT_OK(create_logging_config(p));
    /* The build's lib folder as the param: the real plugins load from it. */
    p.mask |= HVD_PARAM_TRANSPORT_PATH;
    p.transport_path = env_saved;
    p.transport = "gloo";
    EXPECT_OK(create_logging_config(p));
    expect_config(env_saved);

    setenv("HVD_TRANSPORT_PATH", env_saved, 1);
    assert_int_equal(unlink(alias), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* ---------------------------------------------------------------------- */
/* Context functions with bad arguments.                                   */
/* ---------------------------------------------------------------------- */

static hvd_context_t g_ctx; /* world of one, made by the group setup */

static int group_setup(void **state) {
    hvd_params_t p = world_of_one_params();
    (void)state;
    if (hvd_context_create(&p, &g_ctx) != HVD_OK) {
        fprintf(stderr, "group setup: hvd_context_create: %s\n", hvd_last_error());
        return -1;
    }
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    return hvd_context_destroy(g_ctx) == HVD_OK ? 0 : -1;
}

static void test_context_bad_arguments(void **state) {
    uint64_t foreign[16];
    hvd_context_t bogus = (hvd_context_t)(void *)foreign;
    const char *name = NULL;
    int v = 0;
    (void)state;
    memset(foreign, 0, sizeof(foreign));
    EXPECT_FAIL(hvd_context_destroy(NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_context_destroy(bogus), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_context_rank(bogus, &v), HVD_ERR_INVALID_ARGUMENT);
    memset(foreign, 0x5A, sizeof(foreign));
    EXPECT_FAIL(hvd_context_size(bogus, &v), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_context_rank(g_ctx, NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_context_size(g_ctx, NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_context_local_rank(g_ctx, NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_context_local_size(g_ctx, NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_context_cross_rank(g_ctx, NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_context_cross_size(g_ctx, NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_context_transport(g_ctx, NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_mpi_threads_supported(g_ctx, NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_mpi_threads_supported(bogus, &v), HVD_ERR_INVALID_ARGUMENT);
    /* A world of one runs on the local transport, which is not MPI. */
    EXPECT_FAIL(hvd_mpi_threads_supported(g_ctx, &v), HVD_ERR_UNSUPPORTED);
    EXPECT_FAIL(hvd_is_initialized(NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_default_context(NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_rank(NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_size(NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_local_rank(NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_local_size(NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_cross_rank(NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_cross_size(NULL), HVD_ERR_INVALID_ARGUMENT);
    /* The timeline at run time: bad arguments, and a world of one (rank 0)
     * writes: a file that cannot be opened is the call's error; start,
     * switch and stop succeed; stop with nothing recorded is fine. */
    EXPECT_FAIL(hvd_timeline_start(g_ctx, NULL, 0), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_timeline_start(g_ctx, "", 0), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_timeline_start(bogus, "/tmp/x.json", 0), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_timeline_stop(bogus), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_timeline_start(g_ctx, "/nonexistent-hvd-dir/tl.json", 1), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_OK(hvd_timeline_stop(g_ctx));
    {
        char path[64];
        snprintf(path, sizeof(path), "/tmp/hvd-capi-timeline-%d.json", (int)getpid());
        EXPECT_OK(hvd_timeline_start(g_ctx, path, 1));
        EXPECT_OK(hvd_timeline_start(g_ctx, path, 0));
        EXPECT_OK(hvd_timeline_stop(g_ctx));
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        char text[8] = {0};
        assert_true(fread(text, 1, 2, f) == 2);
        assert_int_equal(text[0], '[');
        fclose(f);
        remove(path);
    }
    /* Metrics: bad arguments; the size alone; a buffer too small is left
     * alone; the JSON report carries its version. */
    {
        size_t needed = 0;
        char small[8] = "intact";
        EXPECT_FAIL(hvd_metrics(g_ctx, HVD_METRICS_JSON, NULL, 0, NULL), HVD_ERR_INVALID_ARGUMENT);
        EXPECT_FAIL(hvd_metrics(g_ctx, (hvd_metrics_format_t)7, NULL, 0, &needed),
                    HVD_ERR_INVALID_ARGUMENT);
        EXPECT_FAIL(hvd_metrics(g_ctx, HVD_METRICS_JSON, NULL, 5, &needed), HVD_ERR_INVALID_ARGUMENT);
        EXPECT_FAIL(hvd_metrics(bogus, HVD_METRICS_JSON, NULL, 0, &needed), HVD_ERR_INVALID_ARGUMENT);
        EXPECT_OK(hvd_metrics(g_ctx, HVD_METRICS_JSON, NULL, 0, &needed));
        assert_true(needed > 100);
        EXPECT_FAIL(hvd_metrics(g_ctx, HVD_METRICS_JSON, small, sizeof(small), &needed),
                    HVD_ERR_INVALID_ARGUMENT);
        assert_string_equal(small, "intact");
        char *text = malloc(needed + 4096);
        assert_non_null(text);
        EXPECT_OK(hvd_metrics(g_ctx, HVD_METRICS_JSON, text, needed + 4096, &needed));
        assert_int_equal(strlen(text) + 1, needed);
        assert_true(strncmp(text, "{\"version\":1,", 13) == 0);
        EXPECT_OK(hvd_metrics(g_ctx, HVD_METRICS_PROMETHEUS, NULL, 0, &needed));
        text = realloc(text, needed + 4096);
        assert_non_null(text);
        EXPECT_OK(hvd_metrics(g_ctx, HVD_METRICS_PROMETHEUS, text, needed + 4096, &needed));
        assert_non_null(strstr(text, "# TYPE hvd_allreduce_bytes_total counter"));
        free(text);
    }
    /* The flight recorder's dump: bad arguments, no folder configured, a
     * file that cannot be written, and a written record. */
    EXPECT_FAIL(hvd_flight_recorder_dump(bogus, "/tmp/x.json"), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_flight_recorder_dump(g_ctx, ""), HVD_ERR_INVALID_ARGUMENT);
    if (getenv("HVD_FLIGHT_RECORDER_DIR") == NULL) {
        EXPECT_FAIL(hvd_flight_recorder_dump(g_ctx, NULL), HVD_ERR_INVALID_ARGUMENT);
    }
    EXPECT_FAIL(hvd_flight_recorder_dump(g_ctx, "/dev/null/fr.json"), HVD_ERR_INVALID_ARGUMENT);
    {
        char path[64];
        snprintf(path, sizeof(path), "/tmp/hvd-capi-flight-%d.json", (int)getpid());
        EXPECT_OK(hvd_flight_recorder_dump(g_ctx, path));
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        char text[64] = {0};
        assert_true(fread(text, 1, sizeof(text) - 1, f) > 0);
        assert_non_null(strstr(text, "\"format\": \"hvd-flight-recorder\""));
        fclose(f);
        remove(path);
    }
    /* The context still answers. */
    EXPECT_OK(hvd_context_transport(g_ctx, &name));
    assert_non_null(name);
    assert_string_not_equal(name, "");
    EXPECT_OK(hvd_context_local_rank(g_ctx, &v));
    assert_int_equal(v, 0);
    EXPECT_OK(hvd_context_local_size(g_ctx, &v));
    assert_int_equal(v, 1);
    EXPECT_OK(hvd_context_cross_rank(g_ctx, &v));
    assert_int_equal(v, 0);
    EXPECT_OK(hvd_context_cross_size(g_ctx, &v));
    assert_int_equal(v, 1);
}

/* ---------------------------------------------------------------------- */
/* Collectives with bad arguments: each fails before anything is queued.  */
/* ---------------------------------------------------------------------- */

static void test_allreduce_bad_arguments(void **state) {
    float x[4] = {1, 2, 3, 4}, y[4] = {0, 0, 0, 0};
    int64_t shape[2] = {2, 2};
    int64_t neg[2] = {2, -2};
    hvd_tensor_t t = capi_tensor_1d(x, HVD_FLOAT32, shape);
    hvd_tensor_t bad;
    hvd_handle_t h = GARBAGE_HANDLE;
    char long_name[1100];
    unsigned char flags[2] = {1, 0};
    (void)state;
    shape[0] = 4;
    memset(long_name, 'n', sizeof(long_name));
    long_name[1025] = '\0'; /* 1025 bytes: one too many */

    EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, "w1", &t, y, HVD_SUM, 1.0, 1.0, NULL),
                    HVD_ERR_INVALID_ARGUMENT, "handle", "w1");
    EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, NULL, &t, y, HVD_SUM, 1.0, 1.0, &h),
                    HVD_ERR_INVALID_ARGUMENT, "name", "NULL");
    assert_null(h);
    EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, "", &t, y, HVD_SUM, 1.0, 1.0, &h),
                    HVD_ERR_INVALID_ARGUMENT, "name", "empty");
    EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, long_name, &t, y, HVD_SUM, 1.0, 1.0, &h),
                    HVD_ERR_INVALID_ARGUMENT, "name", "1024");
    long_name[1024] = '\0'; /* exactly 1024 bytes: accepted */
    EXPECT_OK(hvd_allreduce(g_ctx, long_name, &t, y, HVD_SUM));
    assert_float_equal(y[3], 4.0f, 0.0f);

    EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, "w1", NULL, y, HVD_SUM, 1.0, 1.0, &h),
                    HVD_ERR_INVALID_ARGUMENT, "input", "w1");
    bad = t;
    bad.dtype = (hvd_dtype_t)99;
    EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, "w1", &bad, y, HVD_SUM, 1.0, 1.0, &h),
                    HVD_ERR_INVALID_ARGUMENT, "dtype", "w1");
    EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, "w1", &t, y, (hvd_reduce_op_t)99, 1.0, 1.0, &h),
                    HVD_ERR_INVALID_ARGUMENT, "op", "w1");
    EXPECT_FAIL(hvd_allreduce_async(g_ctx, "w1", &t, y, (hvd_reduce_op_t)-1, 1.0, 1.0, &h),
                HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_allreduce(g_ctx, "w1", &t, y, (hvd_reduce_op_t)6), HVD_ERR_INVALID_ARGUMENT);
    /* HVD_ADASUM: floating dtypes only, the refusal names op and dtype. */
    bad = t;
    bad.dtype = HVD_INT32;
    EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, "w1", &bad, y, HVD_ADASUM, 1.0, 1.0, &h),
                    HVD_ERR_INVALID_ARGUMENT, "HVD_ADASUM", "int32");
    bad.dtype = HVD_BOOL;
    EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, "w1", &bad, y, HVD_ADASUM, 1.0, 1.0, &h),
                    HVD_ERR_INVALID_ARGUMENT, "HVD_ADASUM", "bool");
    EXPECT_OK(hvd_allreduce(g_ctx, "w1", &t, y, HVD_ADASUM)); /* one rank: the input */
    assert_float_equal(y[3], 4.0f, 0.0f);
    bad = t;
    bad.ndim = -1;
    EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, "w1", &bad, y, HVD_SUM, 1.0, 1.0, &h),
                    HVD_ERR_INVALID_ARGUMENT, "ndim", "w1");
    bad.ndim = HVD_MAX_NDIM + 1;
    EXPECT_FAIL(hvd_allreduce_async(g_ctx, "w1", &bad, y, HVD_SUM, 1.0, 1.0, &h),
                HVD_ERR_INVALID_ARGUMENT);
    bad = t;
    bad.shape = NULL;
    EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, "w1", &bad, y, HVD_SUM, 1.0, 1.0, &h),
                    HVD_ERR_INVALID_ARGUMENT, "shape", "w1");
    bad = t;
    bad.ndim = 2;
    bad.shape = neg;
    EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, "w1", &bad, y, HVD_SUM, 1.0, 1.0, &h),
                    HVD_ERR_INVALID_ARGUMENT, "shape[1]", "-2");
    /* Shapes whose element or byte count passes 64 bits: refused, naming the
     * tensor, also where the product of the elements wraps to exactly 0
     * (2^32 x 2^32); a 0 dimension anywhere makes an empty tensor instead. */
    {
        int64_t huge[3] = {(int64_t)1 << 32, (int64_t)1 << 32, 3};
        int64_t bytes[2] = {(int64_t)1 << 31, (int64_t)1 << 31}; /* 2^62 x 4 bytes */
        int64_t empty[3] = {(int64_t)1 << 32, (int64_t)1 << 32, 0};
        bad = t;
        bad.ndim = 2;
        bad.shape = huge;
        EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, "w1", &bad, y, HVD_SUM, 1.0, 1.0, &h),
                        HVD_ERR_INVALID_ARGUMENT, "64 bits", "w1");
        bad.ndim = 3;
        EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, "w1", &bad, y, HVD_SUM, 1.0, 1.0, &h),
                        HVD_ERR_INVALID_ARGUMENT, "64 bits", "w1");
        bad.ndim = 2;
        bad.shape = bytes;
        EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, "w1", &bad, y, HVD_SUM, 1.0, 1.0, &h),
                        HVD_ERR_INVALID_ARGUMENT, "64 bits", "w1");
        bad.ndim = 3;
        bad.shape = empty;
        EXPECT_OK(hvd_allreduce(g_ctx, "w1", &bad, y, HVD_SUM));
    }
    bad = t;
    bad.data = NULL;
    EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, "w1", &bad, y, HVD_SUM, 1.0, 1.0, &h),
                    HVD_ERR_INVALID_ARGUMENT, "data", "w1");
    EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, "w1", &t, NULL, HVD_SUM, 1.0, 1.0, &h),
                    HVD_ERR_INVALID_ARGUMENT, "output", "w1");
    EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, "w1", &t, y, HVD_SUM, NAN, 1.0, &h),
                    HVD_ERR_INVALID_ARGUMENT, "prescale", "w1");
    EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, "w1", &t, y, HVD_SUM, 1.0, INFINITY, &h),
                    HVD_ERR_INVALID_ARGUMENT, "postscale", "w1");
    EXPECT_FAIL(hvd_allreduce_async(g_ctx, "w1", &t, y, HVD_SUM, -INFINITY, 1.0, &h),
                HVD_ERR_INVALID_ARGUMENT);
    bad = t;
    bad.device = 0;
    /* CUDA tensors need a CUDA runtime: none here (HVD_CUDA_RUNTIME names a
     * missing file, so that a GPU host answers alike). */
    setenv("HVD_CUDA_RUNTIME", "/nonexistent/libcudart.so", 1);
    EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, "w1", &bad, y, HVD_SUM, 1.0, 1.0, &h),
                    HVD_ERR_UNSUPPORTED, "no CUDA runtime could be loaded", "w1");
    bad.device = -2;
    EXPECT_FAIL(hvd_allreduce_async(g_ctx, "w1", &bad, y, HVD_SUM, 1.0, 1.0, &h),
                HVD_ERR_INVALID_ARGUMENT);
    /* Partial overlap of input and output. */
    EXPECT_FAIL(hvd_allreduce_async(g_ctx, "w1", &t, x + 1, HVD_SUM, 1.0, 1.0, &h),
                HVD_ERR_INVALID_ARGUMENT);
    /* AVERAGE is undefined on bool. */
    bad = capi_tensor_1d(flags, HVD_BOOL, shape);
    shape[0] = 2;
    EXPECT_FAIL_MSG(hvd_allreduce_async(g_ctx, "flags", &bad, flags, HVD_AVERAGE, 1.0, 1.0, &h),
                    HVD_ERR_UNSUPPORTED, "AVERAGE", "flags");
    assert_null(h);
    shape[0] = 4;

    /* Nothing above was queued: the name is free, and the data untouched. */
    memset(y, 0, sizeof(y));
    EXPECT_OK(hvd_allreduce_async(g_ctx, "w1", &t, y, HVD_SUM, 1.0, 1.0, &h));
    assert_non_null(h);
    assert_true(h != GARBAGE_HANDLE);
    EXPECT_OK(hvd_handle_wait(h, 30.0));
    EXPECT_OK(hvd_handle_release(h));
    assert_float_equal(y[0], 1.0f, 0.0f);
    assert_float_equal(y[3], 4.0f, 0.0f);
    assert_float_equal(x[0], 1.0f, 0.0f);

    /* Empty tensors may have NULL data; scalars have one element. */
    {
        int64_t zero[1] = {0};
        int32_t s = 5, r = 0;
        hvd_tensor_t empty = capi_tensor_1d(NULL, HVD_INT32, zero);
        hvd_tensor_t scalar = HVD_TENSOR_INIT;
        EXPECT_OK(hvd_allreduce(g_ctx, "empty", &empty, NULL, HVD_SUM));
        scalar.dtype = HVD_INT32;
        scalar.data = &s;
        EXPECT_OK(hvd_allreduce(g_ctx, "scalar", &scalar, &r, HVD_SUM));
        assert_int_equal(r, 5);
        scalar.data = NULL;
        EXPECT_FAIL(hvd_allreduce(g_ctx, "scalar", &scalar, &r, HVD_SUM),
                    HVD_ERR_INVALID_ARGUMENT);
    }
}

static void test_other_collectives_bad_arguments(void **state) {
    int32_t x[6] = {1, 2, 3, 4, 5, 6}, y[6];
    int64_t shape[2] = {3, 2};
    int64_t splits_neg[1] = {-1};
    int64_t splits_short[1] = {2};
    int64_t splits_long[1] = {4};
    hvd_tensor_t t = capi_tensor_1d(x, HVD_INT32, shape);
    hvd_tensor_t scalar = HVD_TENSOR_INIT;
    hvd_tensor_t bad;
    hvd_handle_t h = GARBAGE_HANDLE;
    (void)state;
    t.ndim = 2;
    scalar.data = x;
    scalar.dtype = HVD_INT32;

    /* broadcast */
    EXPECT_FAIL(hvd_broadcast_async(g_ctx, "b", &t, y, 0, NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_broadcast_async(g_ctx, NULL, &t, y, 0, &h), HVD_ERR_INVALID_ARGUMENT);
    assert_null(h);
    EXPECT_FAIL_MSG(hvd_broadcast_async(g_ctx, "b", NULL, y, 0, &h), HVD_ERR_INVALID_ARGUMENT,
                    "input", "'b'");
    EXPECT_FAIL_MSG(hvd_broadcast_async(g_ctx, "b", &t, y, 1, &h), HVD_ERR_INVALID_ARGUMENT,
                    "root", "'b'");
    EXPECT_FAIL(hvd_broadcast_async(g_ctx, "b", &t, y, -1, &h), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_broadcast(g_ctx, "b", &t, y, 1), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_broadcast(g_ctx, "b", &t, NULL, 0), HVD_ERR_INVALID_ARGUMENT);
    bad = t;
    bad.dtype = (hvd_dtype_t)99;
    EXPECT_FAIL(hvd_broadcast(g_ctx, "b", &bad, y, 0), HVD_ERR_INVALID_ARGUMENT);

    /* allgather: needs a first dimension */
    EXPECT_FAIL(hvd_allgather_async(g_ctx, "g", &t, NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_allgather_async(g_ctx, "", &t, &h), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL_MSG(hvd_allgather_async(g_ctx, "g", &scalar, &h), HVD_ERR_INVALID_ARGUMENT,
                    "ndim", "'g'");
    bad = t;
    bad.dtype = (hvd_dtype_t)99;
    EXPECT_FAIL(hvd_allgather_async(g_ctx, "g", &bad, &h), HVD_ERR_INVALID_ARGUMENT);
    bad = t;
    bad.device = 3;
    setenv("HVD_CUDA_RUNTIME", "/nonexistent/libcudart.so", 1);
    EXPECT_FAIL_MSG(hvd_allgather_async(g_ctx, "g", &bad, &h), HVD_ERR_UNSUPPORTED,
                    "CUDA tensor on device 3", "'g'");

    /* alltoall: splits are size (1) entries, non-negative, summing to rows */
    EXPECT_FAIL(hvd_alltoall_async(g_ctx, "a", &t, NULL, NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL_MSG(hvd_alltoall_async(g_ctx, "a", &scalar, NULL, &h), HVD_ERR_INVALID_ARGUMENT,
                    "ndim", "'a'");
    EXPECT_FAIL_MSG(hvd_alltoall_async(g_ctx, "a", &t, splits_neg, &h), HVD_ERR_INVALID_ARGUMENT,
                    "splits[0]", "'a'");
    EXPECT_FAIL_MSG(hvd_alltoall_async(g_ctx, "a", &t, splits_short, &h),
                    HVD_ERR_INVALID_ARGUMENT, "splits", "'a'");
    EXPECT_FAIL(hvd_alltoall_async(g_ctx, "a", &t, splits_long, &h), HVD_ERR_INVALID_ARGUMENT);
    assert_null(h);

    /* reducescatter */
    EXPECT_FAIL(hvd_reducescatter_async(g_ctx, "r", &t, HVD_SUM, 1.0, 1.0, NULL),
                HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_reducescatter_async(g_ctx, "r", &scalar, HVD_SUM, 1.0, 1.0, &h),
                HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL_MSG(hvd_reducescatter_async(g_ctx, "r", &t, HVD_ADASUM, 1.0, 1.0, &h),
                    HVD_ERR_INVALID_ARGUMENT, "HVD_ADASUM", "allreduce");
    EXPECT_FAIL_MSG(hvd_reducescatter_async(g_ctx, "r", &t, (hvd_reduce_op_t)42, 1.0, 1.0, &h),
                    HVD_ERR_INVALID_ARGUMENT, "op", "'r'");
    EXPECT_FAIL(hvd_reducescatter_async(g_ctx, "r", &t, HVD_SUM, NAN, 1.0, &h),
                HVD_ERR_INVALID_ARGUMENT);
    bad = t;
    bad.dtype = HVD_BOOL;
    EXPECT_FAIL(hvd_reducescatter_async(g_ctx, "r", &bad, HVD_AVERAGE, 1.0, 1.0, &h),
                HVD_ERR_UNSUPPORTED);
    bad = t;
    bad.shape = NULL;
    EXPECT_FAIL(hvd_reducescatter_async(g_ctx, "r", &bad, HVD_SUM, 1.0, 1.0, &h),
                HVD_ERR_INVALID_ARGUMENT);

    /* barrier, join */
    EXPECT_FAIL(hvd_barrier_async(g_ctx, NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_join_async(g_ctx, NULL), HVD_ERR_INVALID_ARGUMENT);
    assert_null(h);
}

static void test_grouped_bad_arguments(void **state) {
    float a[2] = {1, 2}, b[2] = {3, 4}, ya[2], yb[2];
    double c[2] = {5, 6};
    int64_t shape[1] = {2};
    hvd_tensor_t in[2];
    const char *names[2] = {"ga", "gb"};
    const char *dup[2] = {"ga", "ga"};
    const char *null_name[2] = {"ga", NULL};
    void *outs[2];
    void *null_out[2];
    hvd_handle_t h = GARBAGE_HANDLE;
    (void)state;
    in[0] = capi_tensor_1d(a, HVD_FLOAT32, shape);
    in[1] = capi_tensor_1d(b, HVD_FLOAT32, shape);
    outs[0] = ya;
    outs[1] = yb;
    null_out[0] = ya;
    null_out[1] = NULL;

    EXPECT_FAIL(hvd_grouped_allreduce_async(g_ctx, 2, names, in, outs, HVD_SUM, 1, 1, NULL),
                HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL_MSG(hvd_grouped_allreduce_async(g_ctx, 0, names, in, outs, HVD_SUM, 1, 1, &h),
                    HVD_ERR_INVALID_ARGUMENT, "count", "0");
    assert_null(h);
    EXPECT_FAIL(hvd_grouped_allreduce_async(g_ctx, -3, names, in, outs, HVD_SUM, 1, 1, &h),
                HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_grouped_allreduce_async(g_ctx, 2, NULL, in, outs, HVD_SUM, 1, 1, &h),
                HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_grouped_allreduce_async(g_ctx, 2, names, NULL, outs, HVD_SUM, 1, 1, &h),
                HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_grouped_allreduce_async(g_ctx, 2, names, in, NULL, HVD_SUM, 1, 1, &h),
                HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL_MSG(hvd_grouped_allreduce_async(g_ctx, 2, null_name, in, outs, HVD_SUM, 1, 1, &h),
                    HVD_ERR_INVALID_ARGUMENT, "names[1]", "NULL");
    EXPECT_FAIL_MSG(hvd_grouped_allreduce_async(g_ctx, 2, dup, in, outs, HVD_SUM, 1, 1, &h),
                    HVD_ERR_INVALID_ARGUMENT, "names[1]", "'ga'");
    EXPECT_FAIL_MSG(hvd_grouped_allreduce_async(g_ctx, 2, names, in, null_out, HVD_SUM, 1, 1, &h),
                    HVD_ERR_INVALID_ARGUMENT, "outputs[1]", "'gb'");
    EXPECT_FAIL(hvd_grouped_allreduce_async(g_ctx, 2, names, in, outs, (hvd_reduce_op_t)9, 1, 1, &h),
                HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_grouped_allreduce_async(g_ctx, 2, names, in, outs, HVD_SUM, 1, NAN, &h),
                HVD_ERR_INVALID_ARGUMENT);
    in[1] = capi_tensor_1d(c, HVD_FLOAT64, shape);
    EXPECT_FAIL_MSG(hvd_grouped_allreduce_async(g_ctx, 2, names, in, outs, HVD_SUM, 1, 1, &h),
                    HVD_ERR_INVALID_ARGUMENT, "inputs[1]", "'gb'");
    in[1] = capi_tensor_1d(b, HVD_FLOAT32, shape);
    in[1].dtype = (hvd_dtype_t)99;
    EXPECT_FAIL_MSG(hvd_grouped_allreduce_async(g_ctx, 2, names, in, outs, HVD_SUM, 1, 1, &h),
                    HVD_ERR_INVALID_ARGUMENT, "inputs[1]", "'gb'");
    in[1] = capi_tensor_1d(b, HVD_FLOAT32, shape);
    in[1].device = 1;
    EXPECT_FAIL(hvd_grouped_allreduce_async(g_ctx, 2, names, in, outs, HVD_SUM, 1, 1, &h),
                HVD_ERR_INVALID_ARGUMENT); /* devices differ within the group */
    in[0].device = 1;
    setenv("HVD_CUDA_RUNTIME", "/nonexistent/libcudart.so", 1);
    EXPECT_FAIL(hvd_grouped_allreduce_async(g_ctx, 2, names, in, outs, HVD_SUM, 1, 1, &h),
                HVD_ERR_UNSUPPORTED); /* same device, but no CUDA runtime */
    assert_null(h);

    /* Valid: both names are free (nothing above was queued). */
    in[0] = capi_tensor_1d(a, HVD_FLOAT32, shape);
    in[1] = capi_tensor_1d(b, HVD_FLOAT32, shape);
    EXPECT_OK(hvd_grouped_allreduce_async(g_ctx, 2, names, in, outs, HVD_SUM, 1, 1, &h));
    EXPECT_OK(hvd_handle_wait(h, 30.0));
    EXPECT_OK(hvd_handle_release(h));
    assert_float_equal(ya[1], 2.0f, 0.0f);
    assert_float_equal(yb[0], 3.0f, 0.0f);
}

static void test_handle_bad_arguments(void **state) {
    uint64_t foreign[8];
    hvd_handle_t bogus = (hvd_handle_t)(void *)foreign;
    float x[2] = {1, 2}, y[2];
    int64_t shape[1] = {2};
    int64_t dims[4];
    int64_t splits[4];
    int32_t nd = -1;
    const void *data = (const void *)foreign;
    size_t bytes = 99;
    int32_t device = 0;
    hvd_tensor_t t = capi_tensor_1d(x, HVD_FLOAT32, shape);
    hvd_handle_t ar = NULL, ag = NULL, a2a = NULL;
    (void)state;
    memset(foreign, 0, sizeof(foreign));

    EXPECT_FAIL(hvd_handle_wait(NULL, 1.0), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_handle_poll(NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_handle_release(NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_handle_output(NULL, &data, &bytes), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_handle_output_device(NULL, &data, &bytes, &device), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_handle_output_shape(NULL, dims, 4, &nd), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_handle_recv_splits(NULL, splits, 4), HVD_ERR_INVALID_ARGUMENT);
    {
        void *ev = (void *)foreign;
        EXPECT_FAIL(hvd_handle_cuda_event(NULL, &ev), HVD_ERR_INVALID_ARGUMENT);
        assert_null(ev);
        EXPECT_FAIL(hvd_handle_stream_wait(NULL, NULL), HVD_ERR_INVALID_ARGUMENT);
        EXPECT_FAIL(hvd_handle_cuda_event(bogus, &ev), HVD_ERR_INVALID_ARGUMENT);
        EXPECT_FAIL(hvd_handle_stream_wait(bogus, NULL), HVD_ERR_INVALID_ARGUMENT);
    }
    EXPECT_FAIL(hvd_handle_wait(bogus, 1.0), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_handle_poll(bogus), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_handle_release(bogus), HVD_ERR_INVALID_ARGUMENT);

    EXPECT_OK(hvd_allreduce_async(g_ctx, "h.ar", &t, y, HVD_SUM, 1.0, 1.0, &ar));
    EXPECT_OK(hvd_allgather_async(g_ctx, "h.ag", &t, &ag));
    EXPECT_OK(hvd_alltoall_async(g_ctx, "h.a2a", &t, NULL, &a2a));
    EXPECT_OK(hvd_handle_wait(ar, 30.0));
    EXPECT_OK(hvd_handle_wait(ag, 30.0));
    EXPECT_OK(hvd_handle_wait(a2a, 30.0));
    EXPECT_FAIL(hvd_handle_wait(ar, NAN), HVD_ERR_INVALID_ARGUMENT);

    /* Host tensors: nothing for a stream to wait for. */
    {
        void *ev = (void *)foreign;
        EXPECT_FAIL_MSG(hvd_handle_cuda_event(ar, NULL), HVD_ERR_INVALID_ARGUMENT, "event",
                        "NULL");
        EXPECT_OK(hvd_handle_cuda_event(ar, &ev));
        assert_null(ev);
        EXPECT_OK(hvd_handle_stream_wait(ar, NULL));
    }
    /* The allreduce wrote into y: the handle owns no result. */
    EXPECT_FAIL_MSG(hvd_handle_output(ar, &data, &bytes), HVD_ERR_INVALID_ARGUMENT, "allreduce",
                    "h.ar");
    EXPECT_FAIL_MSG(hvd_handle_output_device(ar, &data, &bytes, &device), HVD_ERR_INVALID_ARGUMENT,
                    "allreduce", "h.ar");
    EXPECT_FAIL(hvd_handle_output_shape(ar, dims, 4, &nd), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_handle_recv_splits(ar, splits, 4), HVD_ERR_INVALID_ARGUMENT);
    /* recv_splits is for alltoall only, and needs n >= size. */
    EXPECT_FAIL(hvd_handle_recv_splits(ag, splits, 4), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL_MSG(hvd_handle_recv_splits(a2a, splits, 0), HVD_ERR_INVALID_ARGUMENT, "n", "size");
    EXPECT_FAIL(hvd_handle_recv_splits(a2a, NULL, 4), HVD_ERR_INVALID_ARGUMENT);
    /* NULL out-pointers. */
    EXPECT_FAIL(hvd_handle_output(ag, NULL, &bytes), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_handle_output(ag, &data, NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL_MSG(hvd_handle_output_device(ag, NULL, &bytes, &device), HVD_ERR_INVALID_ARGUMENT,
                    "data", "NULL");
    EXPECT_FAIL_MSG(hvd_handle_output_device(ag, &data, NULL, &device), HVD_ERR_INVALID_ARGUMENT,
                    "bytes", "NULL");
    EXPECT_FAIL_MSG(hvd_handle_output_device(ag, &data, &bytes, NULL), HVD_ERR_INVALID_ARGUMENT,
                    "device", "NULL");
    /* A host result: where hvd_handle_output says, on no device. */
    {
        const void *host = NULL;
        size_t host_bytes = 0;
        device = 5;
        EXPECT_OK(hvd_handle_output_device(ag, &data, &bytes, &device));
        EXPECT_OK(hvd_handle_output(ag, &host, &host_bytes));
        assert_int_equal(device, HVD_DEVICE_CPU);
        assert_ptr_equal(data, host);
        assert_int_equal(bytes, host_bytes);
    }
    EXPECT_FAIL(hvd_handle_output_shape(ag, dims, 4, NULL), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_handle_output_shape(ag, NULL, 4, &nd), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_FAIL(hvd_handle_output_shape(ag, dims, -1, &nd), HVD_ERR_INVALID_ARGUMENT);
    /* max_ndim 0 with NULL shape asks for ndim only. */
    EXPECT_OK(hvd_handle_output_shape(ag, NULL, 0, &nd));
    assert_int_equal(nd, 1);
    splits[0] = -1;
    splits[1] = -1;
    EXPECT_OK(hvd_handle_recv_splits(a2a, splits, 2));
    assert_int_equal(splits[0], 2);
    assert_int_equal(splits[1], 0);

    EXPECT_OK(hvd_handle_release(ar));
    EXPECT_OK(hvd_handle_release(ag));
    EXPECT_OK(hvd_handle_release(a2a));
}

int main(void) {
    const struct CMUnitTest no_context[] = {
        cmocka_unit_test(test_params_init_macro),
        cmocka_unit_test(test_tensor_init_macro),
        cmocka_unit_test(test_frozen_numbers_and_layout),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_dtype_size),
        cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_last_error_lifecycle),
        cmocka_unit_test(test_last_error_is_per_thread),
        cmocka_unit_test(test_calls_before_init),
        cmocka_unit_test(test_params_null_and_default),
        cmocka_unit_test(test_params_older_client),
        cmocka_unit_test(test_params_unknown_mask_bits),
        cmocka_unit_test(test_params_struct_too_small),
        cmocka_unit_test(test_params_autotune),
        cmocka_unit_test(test_params_transport_path),
    };
    const struct CMUnitTest with_context[] = {
        cmocka_unit_test(test_context_bad_arguments),
        cmocka_unit_test(test_allreduce_bad_arguments),
        cmocka_unit_test(test_other_collectives_bad_arguments),
        cmocka_unit_test(test_grouped_bad_arguments),
        cmocka_unit_test(test_handle_bad_arguments),
    };
    int failed;
    capi_clear_launcher_env();
    failed = cmocka_run_group_tests_name("capi.api_args.no_context", no_context, NULL, NULL);
    failed += cmocka_run_group_tests_name("capi.api_args.world_of_one", with_context, group_setup,
                                          group_teardown);
    return failed == 0 ? 0 : 1;
}
