/* One worker of an elastic job, for test_elastic: it speaks to the test's
 * fake launcher through libhvd only (hvd.h). Prints what it saw, one line per
 * event, and exits 0 when every step behaved as its scenario expects.
 *
 *   elastic_worker <value> stay   join; allreduce <value>; then wait for a peer
 *                                 to leave (MEMBERSHIP_CHANGED), reset, print the
 *                                 membership, allreduce again, reset once more
 *                                 (the launcher ends the job) and print why
 *   elastic_worker <value> leave  join; allreduce <value>; leave the job
 *   elastic_worker <value> join   join only; print the status of the creation
 *   elastic_worker <steps> churn  repeated failures: <steps> allreduces of 1,
 *                                 each checked against the size, resetting on
 *                                 every membership change. The worker on slot s
 *                                 (HVD_ELASTIC_WORKER host:s:serial), 1 <= s <= 4,
 *                                 kills itself at step 2 of epoch s - 1; slot 5
 *                                 leaves at step 2 of epoch 4 by resetting on a
 *                                 thread and exits while that reset waits or
 *                                 forms (a failure during a reset). Prints
 *                                 "done epoch=E size=S resets=R".
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hvd.h"

static hvd_status_t AllreduceOne(hvd_context_t ctx, const char* name, long long* v) {
    hvd_tensor_t t = HVD_TENSOR_INIT;
    t.data = v;
    t.dtype = HVD_INT64;
    t.ndim = 0;
    return hvd_allreduce(ctx, name, &t, v, HVD_SUM);
}

static int Sum(hvd_context_t ctx, const char* name, long long value, long long* out) {
    long long v = value;
    hvd_status_t st = AllreduceOne(ctx, name, &v);
    if (st != HVD_OK) {
        printf("%s: status %d: %s\n", name, (int)st, hvd_last_error());
        return (int)st;
    }
    *out = v;
    return 0;
}

static void Joined(hvd_context_t ctx) {
    int rank = -1, size = -1;
    hvd_membership_t m;
    memset(&m, 0, sizeof(m));
    m.struct_size = sizeof(m);
    hvd_context_rank(ctx, &rank);
    hvd_context_size(ctx, &size);
    if (hvd_context_membership(ctx, &m) != HVD_OK) {
        printf("membership failed: %s\n", hvd_last_error());
        return;
    }
    printf("joined epoch=%lld rank=%d size=%d elastic=%d hosts_updated=%d\n", (long long)m.epoch,
           rank, size, m.elastic, m.hosts_updated);
}

static void* ResetThread(void* ctx) {
    hvd_context_reset((hvd_context_t)ctx);
    return NULL;
}

static int Epoch(hvd_context_t ctx) {
    hvd_membership_t m;
    memset(&m, 0, sizeof(m));
    m.struct_size = sizeof(m);
    return hvd_context_membership(ctx, &m) == HVD_OK ? (int)m.epoch : -1;
}

static int Churn(int steps) {
    const char* id = getenv("HVD_ELASTIC_WORKER");
    const char* colon = id ? strchr(id, ':') : NULL;
    int slot = colon ? atoi(colon + 1) : -1;
    hvd_context_t ctx = NULL;
    hvd_status_t st = hvd_context_create(NULL, &ctx);
    if (st != HVD_OK) {
        printf("create: status %d: %s\n", (int)st, hvd_last_error());
        return 1;
    }
    int resets = 0, size = 0;
    for (int step = 0; step < steps;) {
        hvd_context_size(ctx, &size);
        const int epoch = Epoch(ctx);
        if (step == 2 && slot >= 1 && slot <= 4 && epoch == slot - 1) raise(SIGKILL);
        if (step == 2 && slot == 5 && epoch == 4) {
            pthread_t t;
            pthread_create(&t, NULL, ResetThread, ctx);
            usleep((useconds_t)(getpid() % 50) * 1000);
            _exit(5);
        }
        char name[32];
        snprintf(name, sizeof(name), "churn.%d", step);
        long long v = 1;
        st = AllreduceOne(ctx, name, &v);
        if (st == HVD_OK) {
            if (v != size) {
                printf("step %d of epoch %d: sum %lld, not the size %d\n", step, epoch, v, size);
                return 1;
            }
            ++step;
            continue;
        }
        if (st != HVD_ERR_MEMBERSHIP_CHANGED) {
            printf("step %d: status %d: %s\n", step, (int)st, hvd_last_error());
            return 1;
        }
        /* Reset until an epoch forms (a peer may fail while it forms). */
        for (int tries = 0;; ++tries) {
            ++resets;
            st = hvd_context_reset(ctx);
            if (st == HVD_OK) break;
            if (st != HVD_ERR_MEMBERSHIP_CHANGED || tries == 10) {
                printf("reset: status %d: %s\n", (int)st, hvd_last_error());
                return 1;
            }
        }
    }
    hvd_context_size(ctx, &size);
    printf("done epoch=%d size=%d resets=%d\n", Epoch(ctx), size, resets);
    hvd_context_destroy(ctx);
    return 0;
}

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    long long value = atoll(argv[1]);
    const char* mode = argv[2];
    if (strcmp(mode, "churn") == 0) return Churn((int)value);
    hvd_context_t ctx = NULL;
    hvd_status_t st = hvd_context_create(NULL, &ctx);
    if (st != HVD_OK) {
        printf("create: status %d: %s\n", (int)st, hvd_last_error());
        return strcmp(mode, "join") == 0 ? 0 : 1;
    }
    Joined(ctx);
    if (strcmp(mode, "join") == 0) {
        hvd_context_destroy(ctx);
        return 0;
    }
    long long sum = 0;
    if (Sum(ctx, "first", value, &sum) != 0) return 1;
    printf("sum=%lld\n", sum);
    if (strcmp(mode, "leave") == 0) {
        hvd_context_destroy(ctx);
        return 0;
    }
    /* Until the peer's leaving reaches this rank (bounded: 30 s). */
    time_t until = time(NULL) + 30;
    int lost = 0;
    for (int i = 0; !lost && time(NULL) < until; ++i) {
        char name[32];
        snprintf(name, sizeof(name), "probe.%d", i);
        long long v = value;
        st = AllreduceOne(ctx, name, &v);
        if (st == HVD_ERR_MEMBERSHIP_CHANGED) {
            lost = 1;
        } else if (st != HVD_OK) {
            printf("probe: unexpected status %d: %s\n", (int)st, hvd_last_error());
            return 1;
        }
    }
    if (!lost) {
        printf("no membership change seen in 30 s\n");
        return 1;
    }
    printf("lost a peer\n");
    st = hvd_context_reset(ctx);
    if (st != HVD_OK) {
        printf("reset: status %d: %s\n", (int)st, hvd_last_error());
        return 1;
    }
    Joined(ctx);
    if (Sum(ctx, "second", value, &sum) != 0) return 1;
    printf("sum=%lld\n", sum);
    st = hvd_context_reset(ctx);
    printf("last reset: status %d: %s\n", (int)st, st == HVD_OK ? "" : hvd_last_error());
    /* The context stays usable as an object: operations fail cleanly. */
    long long v = 0;
    st = AllreduceOne(ctx, "after", &v);
    printf("after: status %d\n", (int)st);
    hvd_context_destroy(ctx);
    return 0;
}
