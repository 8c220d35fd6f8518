/*
 * A user program of an installed hvd: built outside the hvd build tree from
 * the installed header and library only (pkg-config, find_package or the
 * static archive), then run under the installed hvdrun.
 *
 * Each rank allreduces (sum) N int32 values v[i] = (rank + 1) * (i + 1) and
 * receives 16 int64 values broadcast from rank 0 (1000 + 7 * i; the other
 * ranks start from -1). It checks every element itself and prints one line:
 *
 *   rank R/S transport=T allreduce first=F last=L total=X broadcast first=F last=L total=X
 *
 * Exit status: 0 when every element is right, 1 otherwise.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "hvd.h"

#define N 1000
#define NB 16

static void check(hvd_status_t s, const char *what) {
    if (s != HVD_OK) {
        fprintf(stderr, "%s failed: %s (%s)\n", what, hvd_status_string(s), hvd_last_error());
        exit(1);
    }
}

int main(void) {
    int rank = -1, size = 0;
    check(hvd_init(NULL), "hvd_init");
    check(hvd_rank(&rank), "hvd_rank");
    check(hvd_size(&size), "hvd_size");
    hvd_context_t ctx = NULL;
    const char *transport = NULL;
    check(hvd_default_context(&ctx), "hvd_default_context");
    check(hvd_context_transport(ctx, &transport), "hvd_context_transport");

    static int32_t v[N], sum[N];
    for (int i = 0; i < N; ++i) v[i] = (rank + 1) * (i + 1);
    int64_t shape[1] = {N};
    hvd_tensor_t t = {v, HVD_INT32, 1, shape, HVD_DEVICE_CPU, NULL};
    check(hvd_allreduce(NULL, "install.allreduce", &t, sum, HVD_SUM), "allreduce");
    int bad = 0;
    int64_t total = 0;
    const int32_t ranks_sum = size * (size + 1) / 2;  /* sum of rank + 1 */
    for (int i = 0; i < N; ++i) {
        if (sum[i] != ranks_sum * (i + 1)) {
            if (bad++ < 5) fprintf(stderr, "rank %d: allreduce[%d] = %" PRId32 ", want %" PRId32 "\n",
                                   rank, i, sum[i], ranks_sum * (i + 1));
        }
        total += sum[i];
    }

    int64_t b[NB];
    for (int i = 0; i < NB; ++i) b[i] = rank == 0 ? 1000 + 7 * i : -1;
    int64_t bshape[1] = {NB};
    hvd_tensor_t bt = {b, HVD_INT64, 1, bshape, HVD_DEVICE_CPU, NULL};
    check(hvd_broadcast(NULL, "install.broadcast", &bt, b, 0), "broadcast");
    int64_t btotal = 0;
    for (int i = 0; i < NB; ++i) {
        if (b[i] != 1000 + 7 * i) {
            if (bad++ < 10) fprintf(stderr, "rank %d: broadcast[%d] = %" PRId64 ", want %d\n",
                                    rank, i, b[i], 1000 + 7 * i);
        }
        btotal += b[i];
    }

    printf("rank %d/%d transport=%s allreduce first=%" PRId32 " last=%" PRId32 " total=%" PRId64
           " broadcast first=%" PRId64 " last=%" PRId64 " total=%" PRId64 "\n",
           rank, size, transport, sum[0], sum[N - 1], total, b[0], b[NB - 1], btotal);
    fflush(stdout);
    check(hvd_shutdown(), "hvd_shutdown");
    return bad == 0 ? 0 : 1;
}
