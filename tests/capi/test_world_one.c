/*
 * A world of one through the default context: hvd_init(NULL) with no
 * launcher variables is rank 0 of 1, hvd_init/hvd_shutdown are reference
 * counted, and every collective gives exact results (with one rank, a
 * reduction is the scaled input, a gather the input, and so on).
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "capi_test_util.h"
#include "hvd.h"

#define EXPECT_OK(call)                                                                 \
    do {                                                                                \
        hvd_status_t st_ = (call);                                                      \
        if (st_ != HVD_OK) fail_msg("%s = %d (%s)", #call, (int)st_, hvd_last_error()); \
    } while (0)

#define EXPECT_FAIL(call, code)                                                   \
    do {                                                                          \
        hvd_clear_last_error();                                                   \
        assert_int_equal((call), (code));                                         \
        if (hvd_last_error()[0] == '\0') fail_msg("%s: empty last error", #call); \
    } while (0)

/* ---------------------------------------------------------------------- */
/* Lifecycle (no setup: runs before and around hvd_init).                  */
/* ---------------------------------------------------------------------- */

static void test_before_init(void **state) {
    int v = 5;
    int32_t x = 1;
    hvd_tensor_t t = HVD_TENSOR_INIT;
    (void)state;
    t.dtype = HVD_INT32;
    t.data = &x;
    EXPECT_OK(hvd_is_initialized(&v));
    assert_int_equal(v, 0);
    EXPECT_FAIL(hvd_rank(&v), HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_size(&v), HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_shutdown(), HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_allreduce(NULL, "x", &t, &x, HVD_SUM), HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_barrier(NULL), HVD_ERR_NOT_INITIALIZED);
}

static void test_init_shutdown_refcount(void **state) {
    int v = -1;
    hvd_context_t dflt = NULL, again = NULL;
    const char *transport = NULL;
    (void)state;
    EXPECT_OK(hvd_init(NULL));
    EXPECT_OK(hvd_is_initialized(&v));
    assert_int_equal(v, 1);
    EXPECT_OK(hvd_rank(&v));
    assert_int_equal(v, 0);
    EXPECT_OK(hvd_size(&v));
    assert_int_equal(v, 1);
    EXPECT_OK(hvd_local_rank(&v));
    assert_int_equal(v, 0);
    EXPECT_OK(hvd_local_size(&v));
    assert_int_equal(v, 1);
    EXPECT_OK(hvd_cross_rank(&v));
    assert_int_equal(v, 0);
    EXPECT_OK(hvd_cross_size(&v));
    assert_int_equal(v, 1);
    EXPECT_OK(hvd_default_context(&dflt));
    assert_non_null(dflt);
    EXPECT_OK(hvd_context_rank(dflt, &v));
    assert_int_equal(v, 0);
    EXPECT_OK(hvd_context_transport(NULL, &transport));
    assert_non_null(transport);
    assert_string_not_equal(transport, "");
    /* The default context is not destroyed through hvd_context_destroy. */
    EXPECT_FAIL(hvd_context_destroy(dflt), HVD_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(hvd_last_error(), "hvd_shutdown"));

    /* A second init counts; the same context stays. */
    EXPECT_OK(hvd_init(NULL));
    EXPECT_OK(hvd_default_context(&again));
    assert_ptr_equal(again, dflt);
    EXPECT_OK(hvd_shutdown());
    EXPECT_OK(hvd_is_initialized(&v));
    assert_int_equal(v, 1);
    EXPECT_OK(hvd_size(&v));
    assert_int_equal(v, 1);
    /* The last shutdown destroys it. */
    EXPECT_OK(hvd_shutdown());
    EXPECT_OK(hvd_is_initialized(&v));
    assert_int_equal(v, 0);
    EXPECT_FAIL(hvd_rank(&v), HVD_ERR_NOT_INITIALIZED);
    EXPECT_FAIL(hvd_default_context(&again), HVD_ERR_NOT_INITIALIZED);
    assert_null(again);
    /* One shutdown too many. */
    EXPECT_FAIL(hvd_shutdown(), HVD_ERR_NOT_INITIALIZED);
    /* A fresh init after a full shutdown works, with params this time. */
    {
        hvd_params_t p = HVD_PARAMS_INIT;
        p.mask = HVD_PARAM_RANK | HVD_PARAM_SIZE;
        p.rank = 0;
        p.size = 1;
        EXPECT_OK(hvd_init(&p));
        EXPECT_OK(hvd_size(&v));
        assert_int_equal(v, 1);
        EXPECT_OK(hvd_shutdown());
    }
    /* Failing init leaves nothing behind. */
    {
        hvd_params_t p = HVD_PARAMS_INIT;
        p.mask = 1ULL << 40;
        EXPECT_FAIL(hvd_init(&p), HVD_ERR_UNSUPPORTED);
        EXPECT_OK(hvd_is_initialized(&v));
        assert_int_equal(v, 0);
        EXPECT_FAIL(hvd_shutdown(), HVD_ERR_NOT_INITIALIZED);
    }
}

/* ---------------------------------------------------------------------- */
/* Collectives on the default context (group setup: hvd_init).            */
/* ---------------------------------------------------------------------- */

static int init_setup(void **state) {
    (void)state;
    if (hvd_init(NULL) != HVD_OK) {
        fprintf(stderr, "hvd_init: %s\n", hvd_last_error());
        return -1;
    }
    return 0;
}

static int init_teardown(void **state) {
    (void)state;
    return hvd_shutdown() == HVD_OK ? 0 : -1;
}

/* Submit, wait, release; returns the op's status. */
static hvd_status_t allreduce_scaled(const char *name, const hvd_tensor_t *in, void *out,
                                     hvd_reduce_op_t op, double pre, double post) {
    hvd_handle_t h = NULL;
    hvd_status_t st = hvd_allreduce_async(NULL, name, in, out, op, pre, post, &h);
    hvd_status_t rel;
    if (st != HVD_OK) return st;
    st = hvd_handle_wait(h, 60.0);
    rel = hvd_handle_release(h);
    return st != HVD_OK ? st : rel;
}

static void test_allreduce_int32(void **state) {
    static const hvd_reduce_op_t ops[] = {HVD_SUM, HVD_AVERAGE, HVD_MIN, HVD_MAX, HVD_PRODUCT};
    const int32_t in[5] = {7, -7, 0, 123456, -2147483647};
    int64_t shape[1] = {5};
    size_t i, k;
    (void)state;
    for (i = 0; i < sizeof(ops) / sizeof(ops[0]); ++i) {
        int32_t x[5], y[5];
        hvd_tensor_t t = capi_tensor_1d(x, HVD_INT32, shape);
        char name[32];
        memcpy(x, in, sizeof(x));
        memset(y, 0x55, sizeof(y));
        snprintf(name, sizeof(name), "i32.op%d", (int)ops[i]);
        /* Out of place: one rank, so every op is the identity. */
        EXPECT_OK(hvd_allreduce(NULL, name, &t, y, ops[i]));
        for (k = 0; k < 5; ++k) assert_int_equal(y[k], in[k]);
        assert_memory_equal(x, in, sizeof(x)); /* input untouched */
        /* In place, same name reused after completion. */
        EXPECT_OK(hvd_allreduce(NULL, name, &t, x, ops[i]));
        for (k = 0; k < 5; ++k) assert_int_equal(x[k], in[k]);
    }
    /* Scaling on integers: exact multiples. */
    {
        int32_t x[3] = {1, -2, 3}, y[3] = {0, 0, 0};
        hvd_tensor_t t = capi_tensor_1d(x, HVD_INT32, shape);
        shape[0] = 3;
        EXPECT_OK(allreduce_scaled("i32.scaled", &t, y, HVD_SUM, 2.0, 3.0));
        assert_int_equal(y[0], 6);
        assert_int_equal(y[1], -12);
        assert_int_equal(y[2], 18);
        EXPECT_OK(allreduce_scaled("i32.scaled", &t, x, HVD_AVERAGE, 1.0, -1.0));
        assert_int_equal(x[0], -1);
        assert_int_equal(x[1], 2);
        assert_int_equal(x[2], -3);
    }
}

static void test_allreduce_float32(void **state) {
    static const hvd_reduce_op_t ops[] = {HVD_SUM, HVD_AVERAGE, HVD_MIN, HVD_MAX, HVD_PRODUCT};
    const float in[4] = {1.5f, -2.25f, 0.0f, 1e30f};
    int64_t shape[2] = {2, 2};
    size_t i, k;
    (void)state;
    for (i = 0; i < sizeof(ops) / sizeof(ops[0]); ++i) {
        float x[4], y[4];
        hvd_tensor_t t = capi_tensor_1d(x, HVD_FLOAT32, shape);
        char name[32];
        t.ndim = 2;
        memcpy(x, in, sizeof(x));
        snprintf(name, sizeof(name), "f32.op%d", (int)ops[i]);
        EXPECT_OK(allreduce_scaled(name, &t, y, ops[i], 1.0, 1.0));
        for (k = 0; k < 4; ++k) assert_true(y[k] == in[k]);
        /* pre 0.5, post 4: exact in binary floating point. */
        EXPECT_OK(allreduce_scaled(name, &t, x, ops[i], 0.5, 4.0));
        for (k = 0; k < 4; ++k) {
            if (x[k] != in[k] * 2.0f)
                fail_msg("%s in place, pre 0.5 post 4: x[%zu] = %g, expected %g", name, k,
                         (double)x[k], (double)(in[k] * 2.0f));
        }
    }
}

/* Many tensors in flight at once (fused into one batch): each is its own
 * input scaled, whatever the op, dtype, scaling or placement, and a
 * negative zero stays negative (no reduction with a zero runs). */
static void test_fused_batch_is_identity(void **state) {
    enum { N = 96, L = 5 };
    static const hvd_reduce_op_t ops[] = {HVD_SUM, HVD_AVERAGE, HVD_MIN, HVD_MAX, HVD_PRODUCT};
    float fin[N][L], fout[N][L];
    int32_t iin[N][L], iout[N][L];
    hvd_handle_t h[N];
    int64_t shape[1] = {L};
    int i, k;
    (void)state;
    for (i = 0; i < N; ++i) {
        hvd_tensor_t t;
        char name[32];
        const hvd_reduce_op_t op = ops[i % 5];
        const int in_place = (i / 5) % 2;
        for (k = 0; k < L; ++k) {
            fin[i][k] = k == 0 ? -0.0f : (float)(i * L + k) * (k % 2 ? -0.75f : 1.5f);
            iin[i][k] = (i * L + k) * (k % 2 ? -3 : 7);
        }
        snprintf(name, sizeof(name), "fused.%d", i);
        if (i % 2 == 0) {
            t = capi_tensor_1d(fin[i], HVD_FLOAT32, shape);
            EXPECT_OK(hvd_allreduce_async(NULL, name, &t, in_place ? (void *)fin[i] : fout[i], op,
                                          0.5, 4.0, &h[i]));
        } else {
            t = capi_tensor_1d(iin[i], HVD_INT32, shape);
            EXPECT_OK(hvd_allreduce_async(NULL, name, &t, in_place ? (void *)iin[i] : iout[i], op,
                                          i % 3 ? 1.0 : 2.0, i % 3 ? 1.0 : 3.0, &h[i]));
        }
    }
    for (i = N - 1; i >= 0; --i) { /* waited in the other order */
        EXPECT_OK(hvd_handle_wait(h[i], 60.0));
        EXPECT_OK(hvd_handle_release(h[i]));
    }
    for (i = 0; i < N; ++i) {
        const int in_place = (i / 5) % 2;
        for (k = 0; k < L; ++k) {
            if (i % 2 == 0) {
                const float want = k == 0 ? -0.0f : (float)(i * L + k) * (k % 2 ? -0.75f : 1.5f) * 2.0f;
                const float got = in_place ? fin[i][k] : fout[i][k];
                if (got != want || signbit(got) != signbit(want))
                    fail_msg("fused.%d[%d] (float32, op %d): %g, expected %g", i, k, (int)ops[i % 5],
                             (double)got, (double)want);
            } else {
                const int32_t want = (i * L + k) * (k % 2 ? -3 : 7) * (i % 3 ? 1 : 6);
                const int32_t got = in_place ? iin[i][k] : iout[i][k];
                if (got != want)
                    fail_msg("fused.%d[%d] (int32, op %d): %d, expected %d", i, k, (int)ops[i % 5],
                             (int)got, (int)want);
            }
        }
    }
}

static void test_allreduce_other_dtypes(void **state) {
    int64_t shape[1] = {3};
    (void)state;
    {
        double x[3] = {0.1, -1e300, 3.0}, y[3];
        hvd_tensor_t t = capi_tensor_1d(x, HVD_FLOAT64, shape);
        EXPECT_OK(hvd_allreduce(NULL, "f64", &t, y, HVD_SUM));
        assert_true(y[0] == 0.1 && y[1] == -1e300 && y[2] == 3.0);
    }
    {
        int64_t x[3] = {INT64_MAX, INT64_MIN, -5}, y[3];
        hvd_tensor_t t = capi_tensor_1d(x, HVD_INT64, shape);
        EXPECT_OK(hvd_allreduce(NULL, "i64", &t, y, HVD_MAX));
        assert_true(y[0] == INT64_MAX && y[1] == INT64_MIN && y[2] == -5);
    }
    {
        uint8_t x[3] = {1, 0, 1}, y[3] = {9, 9, 9};
        hvd_tensor_t t = capi_tensor_1d(x, HVD_BOOL, shape);
        EXPECT_OK(hvd_allreduce(NULL, "bool", &t, y, HVD_MIN));
        assert_int_equal(y[0], 1);
        assert_int_equal(y[1], 0);
        assert_int_equal(y[2], 1);
    }
    {
        /* float16 1.0, -2.0, 0.5 */
        uint16_t x[3] = {0x3C00, 0xC000, 0x3800}, y[3];
        hvd_tensor_t t = capi_tensor_1d(x, HVD_FLOAT16, shape);
        EXPECT_OK(allreduce_scaled("f16", &t, y, HVD_SUM, 2.0, 1.0));
        assert_int_equal(y[0], 0x4000); /* 2.0 */
        assert_int_equal(y[1], 0xC400); /* -4.0 */
        assert_int_equal(y[2], 0x3C00); /* 1.0 */
    }
}

static void test_allgather(void **state) {
    int32_t x[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3};
    int64_t dims[4] = {-1, -1, -1, -1};
    int32_t nd = -1;
    const void *data = NULL;
    size_t bytes = 0;
    hvd_tensor_t t = capi_tensor_1d(x, HVD_INT32, shape);
    hvd_handle_t h = NULL;
    (void)state;
    t.ndim = 2;
    EXPECT_OK(hvd_allgather_async(NULL, "gather", &t, &h));
    EXPECT_OK(hvd_handle_wait(h, 60.0));
    EXPECT_OK(hvd_handle_poll(h));
    EXPECT_OK(hvd_handle_output(h, &data, &bytes));
    assert_int_equal(bytes, sizeof(x));
    assert_non_null(data);
    assert_memory_equal(data, x, sizeof(x));
    EXPECT_OK(hvd_handle_output_shape(h, dims, 4, &nd));
    assert_int_equal(nd, 2);
    assert_int_equal(dims[0], 2);
    assert_int_equal(dims[1], 3);
    assert_int_equal(dims[2], -1); /* untouched past ndim */
    /* A short shape buffer still reports the true ndim. */
    dims[0] = -1;
    dims[1] = -1;
    EXPECT_OK(hvd_handle_output_shape(h, dims, 1, &nd));
    assert_int_equal(nd, 2);
    assert_int_equal(dims[0], 2);
    assert_int_equal(dims[1], -1);
    EXPECT_OK(hvd_handle_release(h));
}

static void test_broadcast(void **state) {
    float x[3] = {1.0f, 2.0f, 3.0f}, y[3] = {0, 0, 0};
    int64_t shape[1] = {3};
    hvd_tensor_t t = capi_tensor_1d(x, HVD_FLOAT32, shape);
    hvd_handle_t h = NULL;
    (void)state;
    EXPECT_OK(hvd_broadcast(NULL, "bcast", &t, y, 0));
    assert_memory_equal(x, y, sizeof(x));
    EXPECT_OK(hvd_broadcast(NULL, "bcast", &t, x, 0)); /* in place */
    assert_true(x[0] == 1.0f && x[1] == 2.0f && x[2] == 3.0f);
    memset(y, 0, sizeof(y));
    EXPECT_OK(hvd_broadcast_async(NULL, "bcast", &t, y, 0, &h));
    EXPECT_OK(hvd_handle_wait(h, -1.0));
    EXPECT_OK(hvd_handle_release(h));
    assert_memory_equal(x, y, sizeof(x));
}

static void test_alltoall(void **state) {
    int32_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int64_t shape[2] = {4, 2};
    int64_t splits[1] = {4};
    int64_t recv[3] = {-1, -1, -1};
    int64_t dims[2] = {0, 0};
    int32_t nd = 0;
    const void *data = NULL;
    size_t bytes = 0;
    hvd_tensor_t t = capi_tensor_1d(x, HVD_INT32, shape);
    hvd_handle_t h = NULL;
    int pass;
    (void)state;
    t.ndim = 2;
    for (pass = 0; pass < 2; ++pass) {
        EXPECT_OK(hvd_alltoall_async(NULL, "a2a", &t, pass == 0 ? splits : NULL, &h));
        EXPECT_OK(hvd_handle_wait(h, 60.0));
        EXPECT_OK(hvd_handle_output(h, &data, &bytes));
        assert_int_equal(bytes, sizeof(x));
        assert_memory_equal(data, x, sizeof(x));
        EXPECT_OK(hvd_handle_output_shape(h, dims, 2, &nd));
        assert_int_equal(nd, 2);
        assert_int_equal(dims[0], 4);
        assert_int_equal(dims[1], 2);
        EXPECT_OK(hvd_handle_recv_splits(h, recv, 1));
        assert_int_equal(recv[0], 4);
        assert_int_equal(recv[1], -1);
        EXPECT_OK(hvd_handle_release(h));
    }
}

static void test_reducescatter(void **state) {
    float x[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {3, 2};
    int64_t dims[2] = {0, 0};
    int32_t nd = 0;
    const void *data = NULL;
    size_t bytes = 0;
    hvd_tensor_t t = capi_tensor_1d(x, HVD_FLOAT32, shape);
    hvd_handle_t h = NULL;
    const float *out;
    int k;
    (void)state;
    t.ndim = 2;
    EXPECT_OK(hvd_reducescatter_async(NULL, "rs", &t, HVD_SUM, 1.0, 2.0, &h));
    EXPECT_OK(hvd_handle_wait(h, 60.0));
    EXPECT_OK(hvd_handle_output(h, &data, &bytes));
    assert_int_equal(bytes, sizeof(x));
    out = (const float *)data;
    for (k = 0; k < 6; ++k) {
        if (out[k] != x[k] * 2.0f) fail_msg("rs[%d] = %g, expected %g", k, (double)out[k],
                                            (double)(x[k] * 2.0f));
    }
    EXPECT_OK(hvd_handle_output_shape(h, dims, 2, &nd));
    assert_int_equal(nd, 2);
    assert_int_equal(dims[0], 3);
    assert_int_equal(dims[1], 2);
    EXPECT_OK(hvd_handle_release(h));
}

static void test_barrier(void **state) {
    hvd_handle_t h = NULL;
    int i;
    (void)state;
    for (i = 0; i < 3; ++i) EXPECT_OK(hvd_barrier(NULL));
    EXPECT_OK(hvd_barrier_async(NULL, &h));
    assert_non_null(h);
    EXPECT_OK(hvd_handle_wait(h, 60.0));
    EXPECT_OK(hvd_handle_release(h));
}

static void test_grouped_allreduce(void **state) {
    float a[2] = {1, 2}, b[3] = {3, 4, 5}, c[1] = {6};
    float ya[2], yb[3];
    int64_t sa[1] = {2}, sb[1] = {3}, sc[1] = {1};
    hvd_tensor_t in[3];
    const char *names[3] = {"grp.a", "grp.b", "grp.c"};
    void *outs[3];
    hvd_handle_t h = NULL;
    (void)state;
    in[0] = capi_tensor_1d(a, HVD_FLOAT32, sa);
    in[1] = capi_tensor_1d(b, HVD_FLOAT32, sb);
    in[2] = capi_tensor_1d(c, HVD_FLOAT32, sc);
    outs[0] = ya;
    outs[1] = yb;
    outs[2] = c; /* in place */
    EXPECT_OK(hvd_grouped_allreduce_async(NULL, 3, names, in, outs, HVD_SUM, 2.0, 0.25, &h));
    EXPECT_OK(hvd_handle_wait(h, 60.0));
    EXPECT_OK(hvd_handle_release(h));
    assert_true(ya[0] == 0.5f && ya[1] == 1.0f);
    assert_true(yb[0] == 1.5f && yb[1] == 2.0f && yb[2] == 2.5f);
    assert_true(c[0] == 3.0f);
}

/* The default context also works when passed explicitly, next to an
 * explicit context of its own. */
static void test_explicit_contexts_alongside(void **state) {
    hvd_context_t dflt = NULL, other = NULL;
    hvd_params_t p = HVD_PARAMS_INIT;
    int32_t x[2] = {4, 5}, y[2] = {0, 0};
    int64_t shape[1] = {2};
    hvd_tensor_t t = capi_tensor_1d(x, HVD_INT32, shape);
    int v = -1;
    (void)state;
    EXPECT_OK(hvd_default_context(&dflt));
    EXPECT_OK(hvd_allreduce(dflt, "explicit", &t, y, HVD_SUM));
    assert_int_equal(y[1], 5);
    p.mask = HVD_PARAM_RANK | HVD_PARAM_SIZE;
    p.rank = 0;
    p.size = 1;
    EXPECT_OK(hvd_context_create(&p, &other));
    assert_ptr_not_equal(other, dflt);
    EXPECT_OK(hvd_context_size(other, &v));
    assert_int_equal(v, 1);
    y[0] = y[1] = 0;
    EXPECT_OK(hvd_allreduce(other, "explicit", &t, y, HVD_PRODUCT));
    assert_int_equal(y[0], 4);
    assert_int_equal(y[1], 5);
    EXPECT_OK(hvd_context_destroy(other));
    EXPECT_OK(hvd_rank(&v)); /* the default is unaffected */
    assert_int_equal(v, 0);
}

int main(void) {
    const struct CMUnitTest lifecycle[] = {
        cmocka_unit_test(test_before_init),
        cmocka_unit_test(test_init_shutdown_refcount),
    };
    const struct CMUnitTest collectives[] = {
        cmocka_unit_test(test_allreduce_int32),
        cmocka_unit_test(test_allreduce_float32),
        cmocka_unit_test(test_allreduce_other_dtypes),
        cmocka_unit_test(test_fused_batch_is_identity),
        cmocka_unit_test(test_allgather),
        cmocka_unit_test(test_broadcast),
        cmocka_unit_test(test_alltoall),
        cmocka_unit_test(test_reducescatter),
        cmocka_unit_test(test_barrier),
        cmocka_unit_test(test_grouped_allreduce),
        cmocka_unit_test(test_explicit_contexts_alongside),
    };
    int failed;
    capi_clear_launcher_env();
    failed = cmocka_run_group_tests_name("capi.world_one.lifecycle", lifecycle, NULL, NULL);
    failed += cmocka_run_group_tests_name("capi.world_one.collectives", collectives, init_setup,
                                          init_teardown);
    return failed == 0 ? 0 : 1;
}
