/*
 * Helpers shared by the plain-C tests of the hvd ABI: a clean environment,
 * an out-of-band allgather for ranks that are threads of one process, and
 * checks that worker threads can record (CMocka's assertions must run on the
 * test's own thread, so rank threads record failures and the test thread
 * reports them).
 */
#ifndef HVD_CAPI_TEST_UTIL_H_
#define HVD_CAPI_TEST_UTIL_H_

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hvd.h"

extern char **environ;

/* Removes every variable a launcher could have set (hvdrun, torchrun, Open
 * MPI, PMI/PMIx, Slurm) so hvd_init(NULL) sees a world of one. Keeps
 * HVD_TRANSPORT_PATH and HVD_LOG_LEVEL, which the tests' ctest entries set. */
static inline void capi_clear_launcher_env(void) {
    static const char *const prefixes[] = {"HVD_", "OMPI_COMM_WORLD_", "PMI_", "PMIX_",
                                           "SLURM_", "TORCHELASTIC_"};
    static const char *const names[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                        "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"};
    static const char *const keep[] = {"HVD_TRANSPORT_PATH", "HVD_LOG_LEVEL"};
    int again = 1;
    while (again) {
        char **e;
        again = 0;
        for (e = environ; e != NULL && *e != NULL; ++e) {
            char name[256];
            const char *eq = strchr(*e, '=');
            size_t len = eq != NULL ? (size_t)(eq - *e) : strlen(*e);
            size_t i;
            int drop = 0;
            if (len == 0 || len >= sizeof(name)) continue;
            memcpy(name, *e, len);
            name[len] = '\0';
            for (i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); ++i) {
                if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0) drop = 1;
            }
            for (i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
                if (strcmp(name, names[i]) == 0) drop = 1;
            }
            for (i = 0; i < sizeof(keep) / sizeof(keep[0]); ++i) {
                if (strcmp(name, keep[i]) == 0) drop = 0;
            }
            if (drop) {
                unsetenv(name);
                again = 1; /* environ changed under us: rescan */
                break;
            }
        }
    }
}

/* ---------------------------------------------------------------------- */
/* Out-of-band allgather between threads: each rank publishes its send     */
/* pointer, all wait, each copies every rank's block, all wait again       */
/* (so no rank returns, and reuses its send buffer, while another reads). */
/* ---------------------------------------------------------------------- */
#define CAPI_MAX_RANKS 8

typedef struct capi_oob_world {
    int size;
    pthread_barrier_t barrier;
    const void *send[CAPI_MAX_RANKS];
    size_t bytes[CAPI_MAX_RANKS];
    int calls; /* how many allgathers rank 0 saw */
} capi_oob_world;

typedef struct capi_oob_rank {
    capi_oob_world *world;
    int rank;
} capi_oob_rank;

static inline void capi_oob_world_init(capi_oob_world *w, int size) {
    memset(w, 0, sizeof(*w));
    w->size = size;
    pthread_barrier_init(&w->barrier, NULL, (unsigned)size);
}

static inline void capi_oob_world_destroy(capi_oob_world *w) { pthread_barrier_destroy(&w->barrier); }

static inline int capi_oob_allgather(const void *send, void *recv, size_t bytes, void *user) {
    capi_oob_rank *me = (capi_oob_rank *)user;
    capi_oob_world *w = me->world;
    int r;
    int ok = 1;
    w->send[me->rank] = send;
    w->bytes[me->rank] = bytes;
    pthread_barrier_wait(&w->barrier);
    for (r = 0; r < w->size; ++r) {
        if (w->bytes[r] != bytes) ok = 0; /* ranks must agree on the size */
    }
    if (ok) {
        for (r = 0; r < w->size; ++r) {
            memcpy((char *)recv + (size_t)r * bytes, w->send[r], bytes);
        }
    }
    if (me->rank == 0) w->calls++;
    pthread_barrier_wait(&w->barrier);
    return ok ? 0 : 1;
}

/* Params for rank `rank` of a thread world bootstrapped through the OOB
 * callback, on the named transport. */
static inline hvd_params_t capi_oob_params(capi_oob_rank *me, const char *transport) {
    hvd_params_t p = HVD_PARAMS_INIT;
    p.mask = HVD_PARAM_RANK | HVD_PARAM_SIZE | HVD_PARAM_OOB | HVD_PARAM_TRANSPORT |
             HVD_PARAM_START_TIMEOUT;
    p.rank = me->rank;
    p.size = me->world->size;
    p.oob_allgather = capi_oob_allgather;
    p.oob_user = me;
    p.transport = transport;
    p.start_timeout_s = 30.0;
    return p;
}

/* ---------------------------------------------------------------------- */
/* Failure records for rank threads.                                      */
/* ---------------------------------------------------------------------- */
typedef struct capi_record {
    int failures;
    char first[1024];
} capi_record;

static inline void capi_fail(capi_record *rec, const char *file, int line, const char *fmt, ...) {
    if (rec->failures++ == 0) {
        va_list ap;
        int n = snprintf(rec->first, sizeof(rec->first), "%s:%d: ", file, line);
        va_start(ap, fmt);
        if (n > 0 && (size_t)n < sizeof(rec->first)) {
            vsnprintf(rec->first + n, sizeof(rec->first) - (size_t)n, fmt, ap);
        }
        va_end(ap);
    }
}

/* Checks inside rank threads: record, never abort. */
#define REC_EQ_INT(rec, got, want)                                                          \
    do {                                                                                    \
        long long capi_g_ = (long long)(got), capi_w_ = (long long)(want);                  \
        if (capi_g_ != capi_w_)                                                             \
            capi_fail((rec), __FILE__, __LINE__, "%s = %lld, expected %lld (last error: %s)", \
                      #got, capi_g_, capi_w_, hvd_last_error());                            \
    } while (0)

#define REC_EQ_DBL(rec, got, want)                                                         \
    do {                                                                                   \
        double capi_g_ = (double)(got), capi_w_ = (double)(want);                          \
        if (capi_g_ != capi_w_)                                                            \
            capi_fail((rec), __FILE__, __LINE__, "%s = %.9g, expected %.9g", #got, capi_g_, \
                      capi_w_);                                                            \
    } while (0)

#define REC_STR_EQ(rec, got, want)                                                          \
    do {                                                                                    \
        const char *capi_g_ = (got), *capi_w_ = (want);                                     \
        if (capi_g_ == NULL || strcmp(capi_g_, capi_w_) != 0)                               \
            capi_fail((rec), __FILE__, __LINE__, "%s = \"%s\", expected \"%s\"", #got,      \
                      capi_g_ != NULL ? capi_g_ : "(null)", capi_w_);                       \
    } while (0)

#define REC_TRUE(rec, cond)                                                                 \
    do {                                                                                    \
        if (!(cond)) capi_fail((rec), __FILE__, __LINE__, "expected %s (last error: %s)", #cond, \
                               hvd_last_error());                                           \
    } while (0)

/* A one-dimensional host tensor. */
static inline hvd_tensor_t capi_tensor_1d(void *data, hvd_dtype_t dtype, const int64_t *shape) {
    hvd_tensor_t t = HVD_TENSOR_INIT;
    t.data = data;
    t.dtype = dtype;
    t.ndim = 1;
    t.shape = shape;
    return t;
}

#endif /* HVD_CAPI_TEST_UTIL_H_ */
