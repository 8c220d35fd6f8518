/*
 * Linked statically against the core library (hvd_static, Gloo compiled in):
 * two ranks as threads, bootstrapped through the OOB callback, on "gloo",
 * with no plugin file reachable (ctest points HVD_TRANSPORT_PATH at an empty
 * folder, and the plugins do not sit next to this executable).
 */
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
    capi_oob_rank oob;
    capi_record rec;
} rank_state;

static capi_oob_world g_world;

static void *rank_main(void *p) {
    rank_state *me = (rank_state *)p;
    capi_record *rec = &me->rec;
    const int rank = me->oob.rank;
    hvd_params_t params = capi_oob_params(&me->oob, "gloo");
    hvd_context_t ctx = NULL;
    const char *transport = NULL;
    int v = -1;
    float x[4];
    int32_t n[3];
    int64_t shape4[1] = {4}, shape3[1] = {3};
    hvd_tensor_t tf = capi_tensor_1d(x, HVD_FLOAT32, shape4);
    hvd_tensor_t ti = capi_tensor_1d(n, HVD_INT32, shape3);
    int k;

    REC_EQ_INT(rec, hvd_context_create(&params, &ctx), HVD_OK);
    if (ctx == NULL) return NULL;
    REC_EQ_INT(rec, hvd_context_rank(ctx, &v), HVD_OK);
    REC_EQ_INT(rec, v, rank);
    REC_EQ_INT(rec, hvd_context_size(ctx, &v), HVD_OK);
    REC_EQ_INT(rec, v, NRANKS);
    REC_EQ_INT(rec, hvd_context_transport(ctx, &transport), HVD_OK);
    REC_STR_EQ(rec, transport, "gloo");

    /* rank 0: 0.5 1.5 2.5 3.5, rank 1: 10 20 30 40 */
    for (k = 0; k < 4; ++k) x[k] = rank == 0 ? (float)k + 0.5f : 10.0f * (float)(k + 1);
    REC_EQ_INT(rec, hvd_allreduce(ctx, "static.f32", &tf, x, HVD_SUM), HVD_OK);
    REC_EQ_DBL(rec, x[0], 10.5);
    REC_EQ_DBL(rec, x[1], 21.5);
    REC_EQ_DBL(rec, x[2], 32.5);
    REC_EQ_DBL(rec, x[3], 43.5);

    /* rank 0: 5 -3 7, rank 1: 2 4 -6 */
    n[0] = rank == 0 ? 5 : 2;
    n[1] = rank == 0 ? -3 : 4;
    n[2] = rank == 0 ? 7 : -6;
    REC_EQ_INT(rec, hvd_allreduce(ctx, "static.i32", &ti, n, HVD_PRODUCT), HVD_OK);
    REC_EQ_INT(rec, n[0], 10);
    REC_EQ_INT(rec, n[1], -12);
    REC_EQ_INT(rec, n[2], -42);

    REC_EQ_INT(rec, hvd_barrier(ctx), HVD_OK);
    REC_EQ_INT(rec, hvd_context_destroy(ctx), HVD_OK);
    return NULL;
}

static void test_static_gloo_allreduce(void **state) {
    pthread_t t[NRANKS];
    rank_state ranks[NRANKS];
    int r;
    (void)state;
    capi_oob_world_init(&g_world, NRANKS);
    memset(ranks, 0, sizeof(ranks));
    for (r = 0; r < NRANKS; ++r) {
        ranks[r].oob.world = &g_world;
        ranks[r].oob.rank = r;
        assert_int_equal(pthread_create(&t[r], NULL, rank_main, &ranks[r]), 0);
    }
    for (r = 0; r < NRANKS; ++r) pthread_join(t[r], NULL);
    capi_oob_world_destroy(&g_world);
    for (r = 0; r < NRANKS; ++r) {
        if (ranks[r].rec.failures) fail_msg("rank %d: %s", r, ranks[r].rec.first);
    }
    assert_true(g_world.calls >= 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_static_gloo_allreduce),
    };
    capi_clear_launcher_env();
    return cmocka_run_group_tests_name("capi.static_gloo", tests, NULL, NULL) == 0 ? 0 : 1;
}
