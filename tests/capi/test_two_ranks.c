/*
 * Two explicit contexts as ranks 0 and 1 in two threads of one process,
 * bootstrapped through the out-of-band allgather callback (HVD_PARAM_OOB),
 * on the "gloo" transport: exact collective results, mismatches reported on
 * both ranks with the context still usable afterwards, pending-handle
 * semantics, and matching by name rather than by call order; the
 * transport's name outlives the context and its plugin (libhvd owns it).
 *
 * Each test runs one function per rank on its own thread; rank threads
 * record failures (capi_record) and the test thread reports them.
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
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

#define NRANKS 2

typedef struct rank_state {
    int rank;
    hvd_context_t ctx;
    capi_oob_rank oob;
    capi_record rec;
} rank_state;

static capi_oob_world g_world;
static rank_state g_ranks[NRANKS];
static pthread_barrier_t g_sync; /* rank threads' own rendezvous inside tests */

typedef void (*rank_fn)(rank_state *me);

typedef struct thread_arg {
    rank_fn fn;
    rank_state *me;
} thread_arg;

static void *thread_main(void *p) {
    thread_arg *a = (thread_arg *)p;
    a->fn(a->me);
    return NULL;
}

/* Runs fn on every rank concurrently; fails the test with the first
 * recorded failure of any rank. */
static void run_ranks(rank_fn fn) {
    pthread_t t[NRANKS];
    thread_arg args[NRANKS];
    int r;
    for (r = 0; r < NRANKS; ++r) {
        memset(&g_ranks[r].rec, 0, sizeof(g_ranks[r].rec));
        args[r].fn = fn;
        args[r].me = &g_ranks[r];
        assert_int_equal(pthread_create(&t[r], NULL, thread_main, &args[r]), 0);
    }
    for (r = 0; r < NRANKS; ++r) pthread_join(t[r], NULL);
    for (r = 0; r < NRANKS; ++r) {
        if (g_ranks[r].rec.failures) {
            fail_msg("rank %d: %d failure(s); first: %s", r, g_ranks[r].rec.failures,
                     g_ranks[r].rec.first);
        }
    }
}

#define OK(me, call) REC_EQ_INT(&(me)->rec, (call), HVD_OK)

/* ---------------------------------------------------------------------- */
/* Setup: create both contexts (collective), teardown: destroy both.      */
/* ---------------------------------------------------------------------- */

static void create_rank(rank_state *me) {
    hvd_params_t p = capi_oob_params(&me->oob, "gloo");
    me->ctx = NULL;
    OK(me, hvd_context_create(&p, &me->ctx));
}

static void destroy_rank(rank_state *me) {
    if (me->ctx != NULL) OK(me, hvd_context_destroy(me->ctx));
    me->ctx = NULL;
}

static int group_setup(void **state) {
    pthread_t t[NRANKS];
    thread_arg args[NRANKS];
    int r, failures = 0;
    (void)state;
    capi_oob_world_init(&g_world, NRANKS);
    pthread_barrier_init(&g_sync, NULL, NRANKS);
    for (r = 0; r < NRANKS; ++r) {
        memset(&g_ranks[r], 0, sizeof(g_ranks[r]));
        g_ranks[r].rank = r;
        g_ranks[r].oob.world = &g_world;
        g_ranks[r].oob.rank = r;
        args[r].fn = create_rank;
        args[r].me = &g_ranks[r];
        pthread_create(&t[r], NULL, thread_main, &args[r]);
    }
    for (r = 0; r < NRANKS; ++r) pthread_join(t[r], NULL);
    for (r = 0; r < NRANKS; ++r) {
        if (g_ranks[r].rec.failures) {
            fprintf(stderr, "setup, rank %d: %s\n", r, g_ranks[r].rec.first);
            failures++;
        }
    }
    if (g_world.calls < 1) {
        fprintf(stderr, "setup: the OOB allgather was never called\n");
        failures++;
    }
    return failures == 0 ? 0 : -1;
}

static int group_teardown(void **state) {
    pthread_t t[NRANKS];
    thread_arg args[NRANKS];
    int r, failures = 0;
    (void)state;
    for (r = 0; r < NRANKS; ++r) {
        args[r].fn = destroy_rank;
        args[r].me = &g_ranks[r];
        pthread_create(&t[r], NULL, thread_main, &args[r]);
    }
    for (r = 0; r < NRANKS; ++r) pthread_join(t[r], NULL);
    for (r = 0; r < NRANKS; ++r) failures += g_ranks[r].rec.failures;
    pthread_barrier_destroy(&g_sync);
    capi_oob_world_destroy(&g_world);
    return failures == 0 ? 0 : -1;
}

/* ---------------------------------------------------------------------- */
/* Tests.                                                                 */
/* ---------------------------------------------------------------------- */

static void topology_rank(rank_state *me) {
    int v = -1;
    const char *transport = NULL;
    OK(me, hvd_context_rank(me->ctx, &v));
    REC_EQ_INT(&me->rec, v, me->rank);
    OK(me, hvd_context_size(me->ctx, &v));
    REC_EQ_INT(&me->rec, v, NRANKS);
    /* Both threads are on one host. */
    OK(me, hvd_context_local_rank(me->ctx, &v));
    REC_EQ_INT(&me->rec, v, me->rank);
    OK(me, hvd_context_local_size(me->ctx, &v));
    REC_EQ_INT(&me->rec, v, NRANKS);
    OK(me, hvd_context_cross_rank(me->ctx, &v));
    REC_EQ_INT(&me->rec, v, 0);
    OK(me, hvd_context_cross_size(me->ctx, &v));
    REC_EQ_INT(&me->rec, v, 1);
    OK(me, hvd_context_transport(me->ctx, &transport));
    REC_STR_EQ(&me->rec, transport, "gloo");
}
static void test_topology(void **state) {
    (void)state;
    run_ranks(topology_rank);
}

/* rank 0 holds {7, -7, 3, 100}, rank 1 holds {8, -8, -4, 2}. */
static void allreduce_int32_rank(rank_state *me) {
    static const int32_t in[2][4] = {{7, -7, 3, 100}, {8, -8, -4, 2}};
    static const struct { hvd_reduce_op_t op; int32_t want[4]; } cases[] = {
        {HVD_SUM, {15, -15, -1, 102}},
        {HVD_AVERAGE, {7, -7, 0, 51}}, /* 7.5 -> 7, -7.5 -> -7, -0.5 -> 0 */
        {HVD_MIN, {7, -8, -4, 2}},
        {HVD_MAX, {8, -7, 3, 100}},
        {HVD_PRODUCT, {56, 56, -12, 200}},
    };
    int64_t shape[1] = {4};
    size_t c;
    int k;
    for (c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
        int32_t x[4], y[4];
        hvd_tensor_t t = capi_tensor_1d(x, HVD_INT32, shape);
        memcpy(x, in[me->rank], sizeof(x));
        memset(y, 0, sizeof(y));
        OK(me, hvd_allreduce(me->ctx, "ar.i32", &t, y, cases[c].op));
        for (k = 0; k < 4; ++k) REC_EQ_INT(&me->rec, y[k], cases[c].want[k]);
        OK(me, hvd_allreduce(me->ctx, "ar.i32.inplace", &t, x, cases[c].op));
        for (k = 0; k < 4; ++k) REC_EQ_INT(&me->rec, x[k], cases[c].want[k]);
    }
    /* prescale 2, postscale 3: 3 * (2*a + 2*b). */
    {
        int32_t x[4], y[4];
        hvd_tensor_t t = capi_tensor_1d(x, HVD_INT32, shape);
        hvd_handle_t h = NULL;
        memcpy(x, in[me->rank], sizeof(x));
        OK(me, hvd_allreduce_async(me->ctx, "ar.i32.scaled", &t, y, HVD_SUM, 2.0, 3.0, &h));
        OK(me, hvd_handle_wait(h, 60.0));
        OK(me, hvd_handle_release(h));
        REC_EQ_INT(&me->rec, y[0], 90);
        REC_EQ_INT(&me->rec, y[1], -90);
        REC_EQ_INT(&me->rec, y[2], -6);
        REC_EQ_INT(&me->rec, y[3], 612);
    }
}
static void test_allreduce_int32(void **state) {
    (void)state;
    run_ranks(allreduce_int32_rank);
}

static void allreduce_float32_rank(rank_state *me) {
    static const float in[2][3] = {{1.5f, -2.0f, 0.25f}, {2.5f, 4.0f, -8.0f}};
    static const struct { hvd_reduce_op_t op; double pre, post; float want[3]; } cases[] = {
        {HVD_SUM, 1.0, 1.0, {4.0f, 2.0f, -7.75f}},
        {HVD_AVERAGE, 1.0, 1.0, {2.0f, 1.0f, -3.875f}},
        {HVD_MIN, 1.0, 1.0, {1.5f, -2.0f, -8.0f}},
        {HVD_MAX, 1.0, 1.0, {2.5f, 4.0f, 0.25f}},
        {HVD_PRODUCT, 1.0, 1.0, {3.75f, -8.0f, -2.0f}},
        {HVD_SUM, 0.5, 4.0, {8.0f, 4.0f, -15.5f}},
        {HVD_AVERAGE, 2.0, 0.5, {2.0f, 1.0f, -3.875f}},
        {HVD_PRODUCT, 2.0, 1.0, {15.0f, -32.0f, -8.0f}},
    };
    int64_t shape[1] = {3};
    size_t c;
    int k;
    for (c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
        float x[3];
        hvd_tensor_t t = capi_tensor_1d(x, HVD_FLOAT32, shape);
        hvd_handle_t h = NULL;
        memcpy(x, in[me->rank], sizeof(x));
        OK(me, hvd_allreduce_async(me->ctx, "ar.f32", &t, x, cases[c].op, cases[c].pre,
                                   cases[c].post, &h));
        OK(me, hvd_handle_wait(h, 60.0));
        OK(me, hvd_handle_release(h));
        for (k = 0; k < 3; ++k) REC_EQ_DBL(&me->rec, x[k], cases[c].want[k]);
    }
}
static void test_allreduce_float32(void **state) {
    (void)state;
    run_ranks(allreduce_float32_rank);
}

/* Shapes differ: HVD_ERR_MISMATCH on both ranks; then the context works. */
static void mismatch_rank(rank_state *me) {
    float x[5] = {1, 2, 3, 4, 5}, y[5];
    int64_t shape[1];
    hvd_tensor_t t = capi_tensor_1d(x, HVD_FLOAT32, shape);
    hvd_handle_t h = NULL;
    hvd_status_t st;
    shape[0] = me->rank == 0 ? 4 : 5;
    hvd_clear_last_error();
    st = hvd_allreduce(me->ctx, "mm.shape", &t, y, HVD_SUM);
    REC_EQ_INT(&me->rec, st, HVD_ERR_MISMATCH);
    REC_TRUE(&me->rec, strstr(hvd_last_error(), "mm.shape") != NULL); /* names the tensor */
    /* Through a handle too, with a dtype mismatch this time. */
    shape[0] = 2;
    t.dtype = me->rank == 0 ? HVD_FLOAT32 : HVD_INT32;
    OK(me, hvd_allreduce_async(me->ctx, "mm.dtype", &t, y, HVD_SUM, 1.0, 1.0, &h));
    hvd_clear_last_error();
    REC_EQ_INT(&me->rec, hvd_handle_wait(h, 60.0), HVD_ERR_MISMATCH);
    REC_TRUE(&me->rec, hvd_last_error()[0] != '\0');
    REC_EQ_INT(&me->rec, hvd_handle_poll(h), HVD_ERR_MISMATCH);
    OK(me, hvd_handle_release(h));
    /* Still usable, same name included. */
    t.dtype = HVD_FLOAT32;
    shape[0] = 5;
    OK(me, hvd_allreduce(me->ctx, "mm.shape", &t, y, HVD_SUM));
    REC_EQ_DBL(&me->rec, y[0], 2.0);
    REC_EQ_DBL(&me->rec, y[4], 10.0);
    OK(me, hvd_barrier(me->ctx));
}
static void test_mismatch_then_usable(void **state) {
    (void)state;
    run_ranks(mismatch_rank);
}

/* Rank 0 submits while rank 1 is held back: the op stays pending. */
static void pending_rank(rank_state *me) {
    int32_t x[2] = {1, 2}, y[2] = {0, 0};
    int64_t shape[1] = {2};
    hvd_tensor_t t = capi_tensor_1d(x, HVD_INT32, shape);
    hvd_handle_t h = NULL, dup = NULL, gather = NULL;
    const void *data = NULL;
    size_t bytes = 0;
    int64_t dims[1];
    int32_t nd;
    if (me->rank == 0) {
        OK(me, hvd_allreduce_async(me->ctx, "pending", &t, y, HVD_SUM, 1.0, 1.0, &h));
        OK(me, hvd_allgather_async(me->ctx, "pending.gather", &t, &gather));
        REC_EQ_INT(&me->rec, hvd_handle_poll(h), HVD_IN_PROGRESS);
        hvd_clear_last_error();
        REC_EQ_INT(&me->rec, hvd_handle_wait(h, 0.05), HVD_ERR_TIMEOUT);
        REC_TRUE(&me->rec, hvd_last_error()[0] != '\0');
        REC_EQ_INT(&me->rec, hvd_handle_output(gather, &data, &bytes), HVD_IN_PROGRESS);
        REC_EQ_INT(&me->rec, hvd_handle_output_shape(gather, dims, 1, &nd), HVD_IN_PROGRESS);
        /* The same name while in flight. */
        REC_EQ_INT(&me->rec,
                   hvd_allreduce_async(me->ctx, "pending", &t, y, HVD_SUM, 1.0, 1.0, &dup),
                   HVD_ERR_DUPLICATE_NAME);
        REC_TRUE(&me->rec, dup == NULL);
        REC_EQ_INT(&me->rec, y[0], 0); /* nothing ran yet */
        pthread_barrier_wait(&g_sync);
    } else {
        pthread_barrier_wait(&g_sync);
        OK(me, hvd_allgather_async(me->ctx, "pending.gather", &t, &gather));
        OK(me, hvd_allreduce_async(me->ctx, "pending", &t, y, HVD_SUM, 1.0, 1.0, &h));
    }
    /* The handle stayed valid after the timeout. */
    OK(me, hvd_handle_wait(h, 60.0));
    REC_EQ_INT(&me->rec, y[0], 2);
    REC_EQ_INT(&me->rec, y[1], 4);
    OK(me, hvd_handle_release(h));
    OK(me, hvd_handle_wait(gather, 60.0));
    OK(me, hvd_handle_output(gather, &data, &bytes));
    REC_EQ_INT(&me->rec, bytes, 4 * sizeof(int32_t));
    if (bytes == 4 * sizeof(int32_t)) {
        const int32_t *g = (const int32_t *)data;
        REC_EQ_INT(&me->rec, g[0], 1);
        REC_EQ_INT(&me->rec, g[1], 2);
        REC_EQ_INT(&me->rec, g[2], 1);
        REC_EQ_INT(&me->rec, g[3], 2);
    }
    OK(me, hvd_handle_release(gather));
}
static void test_pending_semantics(void **state) {
    (void)state;
    run_ranks(pending_rank);
}

/* Ranks submit in opposite orders; names match the operations. */
static void order_rank(rank_state *me) {
    int32_t a[1], b[1], ya[1] = {0}, yb[1] = {0};
    int64_t shape[1] = {1};
    hvd_tensor_t ta = capi_tensor_1d(a, HVD_INT32, shape);
    hvd_tensor_t tb = capi_tensor_1d(b, HVD_INT32, shape);
    hvd_handle_t ha = NULL, hb = NULL;
    a[0] = 1 + me->rank;    /* 1, 2 */
    b[0] = 10 * (1 + me->rank); /* 10, 20 */
    if (me->rank == 0) {
        OK(me, hvd_allreduce_async(me->ctx, "order.a", &ta, ya, HVD_SUM, 1.0, 1.0, &ha));
        OK(me, hvd_allreduce_async(me->ctx, "order.b", &tb, yb, HVD_SUM, 1.0, 1.0, &hb));
    } else {
        OK(me, hvd_allreduce_async(me->ctx, "order.b", &tb, yb, HVD_SUM, 1.0, 1.0, &hb));
        OK(me, hvd_allreduce_async(me->ctx, "order.a", &ta, ya, HVD_SUM, 1.0, 1.0, &ha));
    }
    OK(me, hvd_handle_wait(ha, 60.0));
    OK(me, hvd_handle_wait(hb, 60.0));
    REC_EQ_INT(&me->rec, ya[0], 3);
    REC_EQ_INT(&me->rec, yb[0], 30);
    OK(me, hvd_handle_release(ha));
    OK(me, hvd_handle_release(hb));
}
static void test_name_matching_order(void **state) {
    (void)state;
    run_ranks(order_rank);
}

/* Rank 0 contributes 1 row, rank 1 two rows, of 2 columns. */
static void allgather_rank(rank_state *me) {
    int32_t x[4];
    int64_t shape[2];
    int64_t dims[2] = {0, 0};
    int32_t nd = 0;
    const void *data = NULL;
    size_t bytes = 0;
    hvd_tensor_t t = capi_tensor_1d(x, HVD_INT32, shape);
    hvd_handle_t h = NULL;
    static const int32_t want[6] = {0, 1, 10, 11, 12, 13};
    int k;
    t.ndim = 2;
    shape[0] = me->rank + 1;
    shape[1] = 2;
    for (k = 0; k < 4; ++k) x[k] = me->rank * 10 + k;
    OK(me, hvd_allgather_async(me->ctx, "gather", &t, &h));
    OK(me, hvd_handle_wait(h, 60.0));
    OK(me, hvd_handle_output(h, &data, &bytes));
    OK(me, hvd_handle_output_shape(h, dims, 2, &nd));
    REC_EQ_INT(&me->rec, nd, 2);
    REC_EQ_INT(&me->rec, dims[0], 3);
    REC_EQ_INT(&me->rec, dims[1], 2);
    REC_EQ_INT(&me->rec, bytes, sizeof(want));
    if (bytes == sizeof(want)) {
        for (k = 0; k < 6; ++k) REC_EQ_INT(&me->rec, ((const int32_t *)data)[k], want[k]);
    }
    OK(me, hvd_handle_release(h));
}
static void test_allgather(void **state) {
    (void)state;
    run_ranks(allgather_rank);
}

static void broadcast_rank(rank_state *me) {
    double x[3], y[3] = {0, 0, 0};
    int64_t shape[1] = {3};
    hvd_tensor_t t = capi_tensor_1d(x, HVD_FLOAT64, shape);
    int k;
    for (k = 0; k < 3; ++k) x[k] = 100.0 * me->rank + k;
    OK(me, hvd_broadcast(me->ctx, "bcast", &t, y, 1));
    for (k = 0; k < 3; ++k) REC_EQ_DBL(&me->rec, y[k], 100.0 + k);
    OK(me, hvd_broadcast(me->ctx, "bcast.inplace", &t, x, 0));
    for (k = 0; k < 3; ++k) REC_EQ_DBL(&me->rec, x[k], (double)k);
    /* root out of range for a world of 2. */
    REC_EQ_INT(&me->rec, hvd_broadcast(me->ctx, "bcast.bad", &t, x, 2), HVD_ERR_INVALID_ARGUMENT);
}
static void test_broadcast(void **state) {
    (void)state;
    run_ranks(broadcast_rank);
}

/* rank 0 sends rows {0} to itself and {1, 2} to rank 1; rank 1 sends
 * {10, 11} to rank 0 and {12} to itself. */
static void alltoall_rank(rank_state *me) {
    static const int64_t splits[2][2] = {{1, 2}, {2, 1}};
    static const int32_t want[2][3] = {{0, 10, 11}, {1, 2, 12}};
    static const int64_t want_recv[2][2] = {{1, 2}, {2, 1}};
    int32_t x[3];
    int64_t shape[1] = {3};
    int64_t recv[2] = {-1, -1};
    int64_t dims[1] = {0};
    int32_t nd = 0;
    const void *data = NULL;
    size_t bytes = 0;
    hvd_tensor_t t = capi_tensor_1d(x, HVD_INT32, shape);
    hvd_handle_t h = NULL;
    int k;
    for (k = 0; k < 3; ++k) x[k] = me->rank * 10 + k;
    OK(me, hvd_alltoall_async(me->ctx, "a2a", &t, splits[me->rank], &h));
    OK(me, hvd_handle_wait(h, 60.0));
    OK(me, hvd_handle_output(h, &data, &bytes));
    REC_EQ_INT(&me->rec, bytes, 3 * sizeof(int32_t));
    if (bytes == 3 * sizeof(int32_t)) {
        for (k = 0; k < 3; ++k) REC_EQ_INT(&me->rec, ((const int32_t *)data)[k], want[me->rank][k]);
    }
    OK(me, hvd_handle_output_shape(h, dims, 1, &nd));
    REC_EQ_INT(&me->rec, nd, 1);
    REC_EQ_INT(&me->rec, dims[0], 3);
    REC_EQ_INT(&me->rec, hvd_handle_recv_splits(h, recv, 1), HVD_ERR_INVALID_ARGUMENT);
    OK(me, hvd_handle_recv_splits(h, recv, 2));
    REC_EQ_INT(&me->rec, recv[0], want_recv[me->rank][0]);
    REC_EQ_INT(&me->rec, recv[1], want_recv[me->rank][1]);
    OK(me, hvd_handle_release(h));
    /* Splits must be size entries summing to rows; NULL needs rows % size == 0. */
    h = NULL;
    REC_EQ_INT(&me->rec, hvd_alltoall_async(me->ctx, "a2a.bad", &t, NULL, &h),
               HVD_ERR_INVALID_ARGUMENT);
    {
        const int64_t bad[2] = {3, 1};
        REC_EQ_INT(&me->rec, hvd_alltoall_async(me->ctx, "a2a.bad", &t, bad, &h),
                   HVD_ERR_INVALID_ARGUMENT);
    }
    {
        const int64_t bad[2] = {4, -1};
        REC_EQ_INT(&me->rec, hvd_alltoall_async(me->ctx, "a2a.bad", &t, bad, &h),
                   HVD_ERR_INVALID_ARGUMENT);
    }
    REC_TRUE(&me->rec, h == NULL);
    /* Even split of 2 rows. */
    shape[0] = 2;
    OK(me, hvd_alltoall_async(me->ctx, "a2a.even", &t, NULL, &h));
    OK(me, hvd_handle_wait(h, 60.0));
    OK(me, hvd_handle_output(h, &data, &bytes));
    REC_EQ_INT(&me->rec, bytes, 2 * sizeof(int32_t));
    if (bytes == 2 * sizeof(int32_t)) {
        REC_EQ_INT(&me->rec, ((const int32_t *)data)[0], me->rank);
        REC_EQ_INT(&me->rec, ((const int32_t *)data)[1], 10 + me->rank);
    }
    OK(me, hvd_handle_release(h));
}
static void test_alltoall(void **state) {
    (void)state;
    run_ranks(alltoall_rank);
}

/* 3 rows of 1 over 2 ranks: rank 0 keeps rows 0-1, rank 1 row 2. */
static void reducescatter_rank(rank_state *me) {
    float x[3];
    int64_t shape[2] = {3, 1};
    int64_t dims[2] = {0, 0};
    int32_t nd = 0;
    const void *data = NULL;
    size_t bytes = 0;
    hvd_tensor_t t = capi_tensor_1d(x, HVD_FLOAT32, shape);
    hvd_handle_t h = NULL;
    int k;
    t.ndim = 2;
    for (k = 0; k < 3; ++k) x[k] = (float)(k + 1) * (me->rank == 0 ? 1.0f : 10.0f);
    /* sums: 11, 22, 33; average with postscale 2 -> 11, 22, 33 */
    OK(me, hvd_reducescatter_async(me->ctx, "rs", &t, HVD_AVERAGE, 1.0, 2.0, &h));
    OK(me, hvd_handle_wait(h, 60.0));
    OK(me, hvd_handle_output(h, &data, &bytes));
    OK(me, hvd_handle_output_shape(h, dims, 2, &nd));
    REC_EQ_INT(&me->rec, nd, 2);
    REC_EQ_INT(&me->rec, dims[0], me->rank == 0 ? 2 : 1);
    REC_EQ_INT(&me->rec, dims[1], 1);
    if (me->rank == 0) {
        REC_EQ_INT(&me->rec, bytes, 2 * sizeof(float));
        if (bytes == 2 * sizeof(float)) {
            REC_EQ_DBL(&me->rec, ((const float *)data)[0], 11.0);
            REC_EQ_DBL(&me->rec, ((const float *)data)[1], 22.0);
        }
    } else {
        REC_EQ_INT(&me->rec, bytes, sizeof(float));
        if (bytes == sizeof(float)) REC_EQ_DBL(&me->rec, ((const float *)data)[0], 33.0);
    }
    OK(me, hvd_handle_release(h));
}
static void test_reducescatter(void **state) {
    (void)state;
    run_ranks(reducescatter_rank);
}

static void grouped_rank(rank_state *me) {
    int32_t a[2], b[3], ya[2] = {0, 0};
    int64_t sa[1] = {2}, sb[1] = {3};
    hvd_tensor_t in[2];
    const char *names[2] = {"grp.a", "grp.b"};
    void *outs[2];
    hvd_handle_t h = NULL;
    int k;
    for (k = 0; k < 2; ++k) a[k] = (me->rank + 1) * (k + 1); /* r0: 1 2, r1: 2 4 */
    for (k = 0; k < 3; ++k) b[k] = me->rank == 0 ? k : -k;   /* r0: 0 1 2, r1: 0 -1 -2 */
    in[0] = capi_tensor_1d(a, HVD_INT32, sa);
    in[1] = capi_tensor_1d(b, HVD_INT32, sb);
    outs[0] = ya;
    outs[1] = b; /* in place */
    OK(me, hvd_grouped_allreduce_async(me->ctx, 2, names, in, outs, HVD_MAX, 1.0, 1.0, &h));
    OK(me, hvd_handle_wait(h, 60.0));
    OK(me, hvd_handle_release(h));
    REC_EQ_INT(&me->rec, ya[0], 2);
    REC_EQ_INT(&me->rec, ya[1], 4);
    REC_EQ_INT(&me->rec, b[0], 0);
    REC_EQ_INT(&me->rec, b[1], 1);
    REC_EQ_INT(&me->rec, b[2], 2);
}
static void test_grouped_allreduce(void **state) {
    (void)state;
    run_ranks(grouped_rank);
}

static void barrier_rank(rank_state *me) {
    hvd_handle_t h = NULL;
    int i;
    for (i = 0; i < 3; ++i) OK(me, hvd_barrier(me->ctx));
    OK(me, hvd_barrier_async(me->ctx, &h));
    OK(me, hvd_handle_wait(h, 60.0));
    OK(me, hvd_handle_release(h));
}
static void test_barrier(void **state) {
    (void)state;
    run_ranks(barrier_rank);
}

/* Last: destroying the contexts completes rank 0's unmatched op with
 * HVD_ERR_ABORTED, and its handle stays usable until released. The
 * transport's name stays valid after the context (and its plugin) are gone:
 * hvd.h says libhvd owns it, so it must not point into the plugin. */
static void destroy_pending_rank(rank_state *me) {
    float x[2] = {1, 2};
    int64_t shape[1] = {2};
    hvd_tensor_t t = capi_tensor_1d(x, HVD_FLOAT32, shape);
    hvd_handle_t h = NULL;
    const char *transport = NULL;
    Dl_info info;
    OK(me, hvd_context_transport(me->ctx, &transport));
    if (me->rank == 0) {
        OK(me, hvd_allreduce_async(me->ctx, "orphan", &t, x, HVD_SUM, 1.0, 1.0, &h));
        REC_EQ_INT(&me->rec, hvd_handle_poll(h), HVD_IN_PROGRESS);
    }
    pthread_barrier_wait(&g_sync);
    OK(me, hvd_context_destroy(me->ctx));
    me->ctx = NULL;
    if (me->rank == 0) {
        hvd_clear_last_error();
        REC_EQ_INT(&me->rec, hvd_handle_wait(h, 60.0), HVD_ERR_ABORTED);
        REC_TRUE(&me->rec, hvd_last_error()[0] != '\0');
        REC_EQ_INT(&me->rec, hvd_handle_poll(h), HVD_ERR_ABORTED);
        OK(me, hvd_handle_release(h));
        REC_EQ_DBL(&me->rec, x[0], 1.0); /* never reduced */
    }
    pthread_barrier_wait(&g_sync); /* both contexts gone */
    REC_STR_EQ(&me->rec, transport, "gloo");
    memset(&info, 0, sizeof(info));
    REC_TRUE(&me->rec, transport != NULL && dladdr(transport, &info) != 0);
    if (info.dli_fname == NULL || strstr(info.dli_fname, "libhvd.so") == NULL ||
        strstr(info.dli_fname, "transport") != NULL) {
        capi_fail(&me->rec, __FILE__, __LINE__, "the transport name lies in %s, not in libhvd.so",
                  info.dli_fname != NULL ? info.dli_fname : "(no object)");
    }
}
static void test_destroy_aborts_pending(void **state) {
    (void)state;
    run_ranks(destroy_pending_rank);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topology),
        cmocka_unit_test(test_allreduce_int32),
        cmocka_unit_test(test_allreduce_float32),
        cmocka_unit_test(test_mismatch_then_usable),
        cmocka_unit_test(test_pending_semantics),
        cmocka_unit_test(test_name_matching_order),
        cmocka_unit_test(test_allgather),
        cmocka_unit_test(test_broadcast),
        cmocka_unit_test(test_alltoall),
        cmocka_unit_test(test_reducescatter),
        cmocka_unit_test(test_grouped_allreduce),
        cmocka_unit_test(test_barrier),
        cmocka_unit_test(test_destroy_aborts_pending), /* must stay last */
    };
    capi_clear_launcher_env();
    return cmocka_run_group_tests_name("capi.two_ranks.gloo", tests, group_setup, group_teardown)
               == 0 ? 0 : 1;
}
