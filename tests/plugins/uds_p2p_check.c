/*
 * uds_p2p_check.c: drives a transport plugin's table directly,
 * without libhvd: dlopens the .so, forks one process per rank, and gives
 * them a key-value store made of files in a temporary folder.
 *
 *   uds_p2p_check <path/to/libhvd_transport_uds.so>
 *
 * Scenarios (each a fresh set of processes; exit status 0 only when every
 * check of every process passed):
 *   world     2, 3 and 4 ranks: messages to every peer with distinct and
 *             shared tags, sizes 0, 1, 7 and 1 MiB + 3, receives posted
 *             before the data and after it (held frames), order within a
 *             tag, test/progress, argument errors, timeouts naming the
 *             ranks (explicit, env.timeout_s, set_timeout), abort from
 *             another thread, requests left pending at finalize.
 *   missing   3 ranks, rank 1 never starts: ranks 0 and 2 fail init within
 *             the start timeout, each naming rank 1.
 *   lost      3 ranks, rank 2 exits without finalize: ranks 0 and 1 see
 *             HVD_ERR_TRANSPORT naming rank 2 and async_error, and still
 *             talk to each other.
 *   leave     3 ranks, rank 2 finalizes cleanly: the others' receives from
 *             it fail naming it, but async_error stays HVD_OK.
 *   elsewhere 2 ranks, the host table puts rank 1 on another host: both
 *             refuse at init (HVD_ERR_UNSUPPORTED) naming that host, at
 *             once (nothing connects).
 *   single    1 rank, no key-value store.
 * Every env carries a host table (env.hosts) naming this host for every
 * rank, as the core passes it.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hvd_transport.h"

#define BIG ((size_t)1 << 20) + 3
#define MAXREQ 512

static const hvd_transport_t *T;
static int g_rank = -1, g_failures = 0;
static const char *g_scenario = "";

static void check(int ok, const char *fmt, ...) {
    va_list ap;
    if (ok) return;
    ++g_failures;
    fprintf(stderr, "FAIL [%s rank %d]: ", g_scenario, g_rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s) {
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}

/* ---- a key-value store of files: key "a/b" is file <dir>/a_b ------------- */

typedef struct { char dir[200]; } file_kv;

static void kv_path(const file_kv *kv, const char *key, char *out, size_t len) {
    size_t n = (size_t)snprintf(out, len, "%s/", kv->dir), i;
    for (i = 0; key[i] != '\0' && n + 1 < len; ++i) out[n++] = key[i] == '/' ? '_' : key[i];
    out[n] = '\0';
}

static int kv_set(void *kv, const char *key, const void *value, size_t len) {
    char path[300], tmp[320];
    FILE *f;
    kv_path((file_kv *)kv, key, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp%ld", path, (long)getpid());
    f = fopen(tmp, "wb");
    if (f == NULL) return HVD_ERR_RENDEZVOUS;
    if (len > 0 && fwrite(value, 1, len, f) != len) { fclose(f); return HVD_ERR_RENDEZVOUS; }
    if (fclose(f) != 0 || rename(tmp, path) != 0) return HVD_ERR_RENDEZVOUS;
    return HVD_OK;
}

static int kv_get(void *kv, const char *key, void **value, size_t *len, double timeout_s) {
    char path[300];
    double end = now_s() + timeout_s;
    kv_path((file_kv *)kv, key, path, sizeof(path));
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f != NULL) {
            char *buf = (char *)malloc(4096);
            size_t n = buf != NULL ? fread(buf, 1, 4096, f) : 0;
            fclose(f);
            if (buf == NULL) return HVD_ERR_NO_MEMORY;
            *value = buf;
            *len = n;
            return HVD_OK;
        }
        if (now_s() >= end) return HVD_ERR_TIMEOUT;
        sleep_s(0.005);
    }
}

static void kv_free(void *value) { free(value); }

/* Every rank sets <name>/<rank>, then reads every other rank's key. */
static void kv_barrier(file_kv *kv, int rank, int size, const char *name) {
    char key[64];
    int r;
    snprintf(key, sizeof(key), "%s/%d", name, rank);
    kv_set(kv, key, "", 0);
    for (r = 0; r < size; ++r) {
        void *v = NULL;
        size_t n = 0;
        snprintf(key, sizeof(key), "%s/%d", name, r);
        if (kv_get(kv, key, &v, &n, 30.0) == HVD_OK) free(v);
    }
}

static void plugin_log(void *logger, int level, const char *msg) {
    (void)logger;
    if (level <= HVD_LOG_WARNING && getenv("UDS_CHECK_QUIET") == NULL) {
        fprintf(stderr, "[plugin rank %d] %s\n", g_rank, msg);
    }
}

/* The host table: this host's name for every rank (at most 8). */
static char g_host[64];
static hvd_transport_host_t g_hosts[8];

static hvd_transport_env_t make_env(file_kv *kv, int rank, int size, double start_timeout) {
    hvd_transport_env_t e;
    int r;
    if (g_host[0] == '\0' && gethostname(g_host, sizeof(g_host) - 1) != 0) strcpy(g_host, "?");
    for (r = 0; r < 8; ++r) g_hosts[r].name = g_host;
    memset(&e, 0, sizeof(e));
    e.hosts = g_hosts;
    e.struct_size = sizeof(e);
    e.rank = rank;
    e.size = size;
    e.local_rank = rank;
    e.local_size = size;
    e.cross_rank = 0;
    e.cross_size = 1;
    if (kv != NULL) {
        e.kv = kv;
        e.kv_set = kv_set;
        e.kv_get = kv_get;
        e.kv_free = kv_free;
    }
    e.log = plugin_log;
    e.timeout_s = 2.0;
    e.start_timeout_s = start_timeout;
    return e;
}

static void *do_init(hvd_transport_env_t *env, int *status, char *err, size_t err_len) {
    hvd_transport_info_t info;
    void *comm = (void *)&info; /* must be set to NULL on failure */
    memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    err[0] = '\0';
    *status = T->init(env, &info, &comm, err, err_len);
    if (*status != HVD_OK) {
        check(comm == NULL, "a failed init left *comm set");
        return NULL;
    }
    check(info.max_tag >= 32767, "info.max_tag %u < 32767", (unsigned)info.max_tag);
    check(info.mpi_thread_level == -1, "info.mpi_thread_level %d", (int)info.mpi_thread_level);
    {
        int i;
        for (i = 0; i < HVD_TRANSPORT_COLLECTIVES; ++i) {
            check(info.native_max_bytes[i] == 0, "native_max_bytes[%d] != 0", i);
        }
    }
    return comm;
}

/* ---- messages ------------------------------------------------------------ */

static unsigned char pattern(int src, int dst, unsigned tag, int seq, size_t i) {
    return (unsigned char)((src * 131 + dst * 31 + (int)tag * 7 + seq * 3 + (int)(i % 251)) ^
                           (int)(i >> 9));
}

typedef struct {
    hvd_transport_request_t *req;
    unsigned char *buf;
    size_t bytes;
    int peer, seq, recv;
    unsigned tag;
} op_t;

static op_t g_ops[MAXREQ];
static int g_nops;

static void post(void *comm, int recv, int peer, unsigned tag, int seq, size_t bytes) {
    op_t *o = &g_ops[g_nops++];
    hvd_transport_buffer_t b;
    size_t i;
    int s;
    memset(o, 0, sizeof(*o));
    o->buf = bytes > 0 ? (unsigned char *)malloc(bytes) : NULL;
    o->bytes = bytes;
    o->peer = peer;
    o->seq = seq;
    o->recv = recv;
    o->tag = tag;
    for (i = 0; i < bytes; ++i) o->buf[i] = recv ? 0xEE : pattern(g_rank, peer, tag, seq, i);
    memset(&b, 0, sizeof(b));
    b.data = o->buf; /* NULL for zero bytes */
    b.bytes = bytes;
    b.memory_type = HVD_MEMORY_HOST;
    b.device = HVD_DEVICE_CPU;
    s = recv ? T->irecv(comm, peer, tag, &b, &o->req) : T->isend(comm, peer, tag, &b, &o->req);
    check(s == HVD_OK && o->req != NULL, "%s peer %d tag %u: status %d (%s)",
          recv ? "irecv" : "isend", peer, tag, s, T->last_error(comm));
}

/* Waits for the ops posted since from, in an order given by stride (prime
 * to their count or 1), and checks the data received. */
static void wait_from(void *comm, int from, int stride) {
    int k, i, n = g_nops - from;
    for (k = 0; k < n; ++k) {
        op_t *o = &g_ops[from + (n % stride == 0 ? k : (k * stride) % n)];
        int s = o->req != NULL ? T->wait(comm, o->req, 30.0) : HVD_ERR_INTERNAL;
        check(s == HVD_OK, "wait %s peer %d tag %u seq %d: %d (%s)", o->recv ? "recv" : "send",
              o->peer, o->tag, o->seq, s, T->last_error(comm));
        if (o->recv && s == HVD_OK) {
            size_t bad = 0;
            for (i = 0; (size_t)i < o->bytes; ++i) {
                if (o->buf[i] != pattern(o->peer, g_rank, o->tag, o->seq, (size_t)i)) ++bad;
            }
            check(bad == 0, "recv from %d tag %u seq %d (%zu bytes): %zu bytes wrong", o->peer,
                  o->tag, o->seq, o->bytes, bad);
        }
        free(o->buf);
        o->buf = NULL;
    }
    g_nops = from;
}

static void wait_all(void *comm, int stride) { wait_from(comm, 0, stride); }

static void barrier(void *comm, int size, unsigned tag) { /* waits for its own ops only */
    int p, from = g_nops;
    for (p = 0; p < size; ++p) {
        if (p == g_rank) continue;
        post(comm, 1, p, tag, 0, 0);
        post(comm, 0, p, tag, 0, 0);
    }
    wait_from(comm, from, 1);
}

static const size_t k_sizes[] = {0, 1, 7, BIG};
/* Same tag 7: sizes in the order sent (receives must match in that order). */
static const size_t k_seq[] = {5, 0, BIG, 1, 7};

static void exchange(void *comm, int size, int recv_first) {
    int p, k;
    for (k = 0; k < 2; ++k) {
        int posting_recvs = recv_first ? k == 0 : k == 1;
        if (k == 1 && !recv_first) barrier(comm, size, 30000); /* frames now held */
        for (p = 0; p < size; ++p) {
            size_t i;
            if (p == g_rank) continue;
            if (posting_recvs) { /* reversed tag order: matching is by tag, not by arrival */
                for (i = 4; i-- > 0;) post(comm, 1, p, 100 + (unsigned)i, 0, k_sizes[i]);
            } else {
                for (i = 0; i < 4; ++i) post(comm, 0, p, 100 + (unsigned)i, 0, k_sizes[i]);
            }
            for (i = 0; i < 5; ++i) post(comm, !posting_recvs, p, 7, (int)i, k_seq[i]);
        }
        if (k == 0 && recv_first) barrier(comm, size, 30001); /* receives now posted */
    }
    wait_all(comm, recv_first ? 7 : 1);
}

static int contains(const char *s, const char *what) { return s != NULL && strstr(s, what) != NULL; }

typedef struct { void *comm; double delay; } abort_arg;

static void *abort_thread(void *p) {
    abort_arg *a = (abort_arg *)p;
    sleep_s(a->delay);
    T->abort(a->comm, HVD_ERR_ABORTED, "check abort from another thread");
    return NULL;
}

static void expect_timeout(void *comm, int peer, unsigned tag, double timeout, double lo,
                           double hi, const char *extra) {
    hvd_transport_request_t *r = NULL;
    hvd_transport_buffer_t b;
    char me[32], them[32];
    double t0;
    int s;
    unsigned char x[3];
    memset(&b, 0, sizeof(b));
    b.data = x;
    b.bytes = sizeof(x);
    b.device = HVD_DEVICE_CPU;
    check(T->irecv(comm, peer, tag, &b, &r) == HVD_OK, "irecv for the timeout");
    t0 = now_s();
    s = T->wait(comm, r, timeout);
    t0 = now_s() - t0;
    snprintf(me, sizeof(me), "rank %d", g_rank);
    snprintf(them, sizeof(them), "rank %d", peer);
    check(s == HVD_ERR_TIMEOUT, "wait(%g) gave %d, not HVD_ERR_TIMEOUT", timeout, s);
    check(t0 >= lo && t0 <= hi, "wait(%g) took %.2f s, not in [%g, %g]", timeout, t0, lo, hi);
    check(contains(T->last_error(comm), me) && contains(T->last_error(comm), them) &&
              (extra == NULL || contains(T->last_error(comm), extra)),
          "timeout message names neither %s nor %s (or lacks '%s'): %s", me, them,
          extra ? extra : "", T->last_error(comm));
}

static void scenario_world(file_kv *kv, int rank, int size) {
    hvd_transport_env_t env = make_env(kv, rank, size, 20.0);
    char err[512];
    int s, next = (rank + 1) % size, prev = (rank + size - 1) % size;
    void *comm = do_init(&env, &s, err, sizeof(err));
    if (comm == NULL) { check(0, "init: %d %s", s, err); return; }
    exchange(comm, size, 1);
    exchange(comm, size, 0);
    { /* test + progress drive a big transfer around the ring */
        int done_r = 0, done_s = 0;
        size_t i;
        double end = now_s() + 20;
        post(comm, 1, prev, 500, 9, BIG);
        post(comm, 0, next, 500, 9, BIG);
        while ((!done_r || !done_s) && now_s() < end) {
            check(T->progress(comm) == HVD_OK, "progress");
            if (!done_r) {
                s = T->test(comm, g_ops[0].req, &done_r);
                check(s == HVD_OK, "test recv: %d", s);
            }
            if (!done_s) {
                s = T->test(comm, g_ops[1].req, &done_s);
                check(s == HVD_OK, "test send: %d", s);
            }
        }
        check(done_r && done_s, "test never completed the ring transfer");
        for (i = 0; i < BIG && done_r; ++i) {
            if (g_ops[0].buf[i] != pattern(prev, rank, 500, 9, i)) {
                check(0, "ring data wrong at %zu", i);
                break;
            }
        }
        free(g_ops[0].buf);
        free(g_ops[1].buf);
        g_nops = 0;
    }
    { /* argument errors: no request comes back */
        hvd_transport_request_t *r = (hvd_transport_request_t *)&env;
        hvd_transport_buffer_t b;
        unsigned char x = 0;
        memset(&b, 0, sizeof(b));
        b.data = &x;
        b.bytes = 1;
        b.device = HVD_DEVICE_CPU;
        check(T->isend(comm, rank, 1, &b, &r) == HVD_ERR_INVALID_ARGUMENT && r == NULL, "self");
        check(T->isend(comm, size, 1, &b, &r) == HVD_ERR_INVALID_ARGUMENT && r == NULL, "size");
        check(T->irecv(comm, next, 0xffffffffu, &b, &r) == HVD_ERR_INVALID_ARGUMENT, "max tag");
        b.memory_type = HVD_MEMORY_CUDA;
        b.device = 0;
        check(T->isend(comm, next, 1, &b, &r) == HVD_ERR_UNSUPPORTED && r == NULL, "cuda");
    }
    barrier(comm, size, 30002);
    /* Timeouts: explicit, env.timeout_s (2 s), set_timeout PEER then TRANSFER. */
    expect_timeout(comm, next, 900, 0.5, 0.45, 1.8, "tag 900");
    expect_timeout(comm, prev, 901, -1.0, 1.95, 3.5, "transport timeout");
    check(T->set_timeout(comm, 0.7, HVD_TRANSPORT_LIMIT_PEER) == HVD_OK, "set_timeout");
    expect_timeout(comm, next, 902, -1.0, 0.65, 2.0, "peer timeout");
    check(T->set_timeout(comm, 2.0, HVD_TRANSPORT_LIMIT_TRANSFER) == HVD_OK, "set_timeout");
    barrier(comm, size, 30003); /* still in step after the timeouts */
    exchange(comm, size, 1);
    check(T->async_error(comm) == HVD_OK, "async_error %d while healthy", T->async_error(comm));
    barrier(comm, size, 30004);
    { /* abort from a thread ends a blocked wait; later calls fail with it */
        pthread_t th;
        abort_arg a;
        double t0;
        hvd_transport_request_t *r = NULL;
        hvd_transport_buffer_t b;
        unsigned char x[4];
        memset(&b, 0, sizeof(b));
        b.data = x;
        b.bytes = sizeof(x);
        b.device = HVD_DEVICE_CPU;
        post(comm, 1, next, 950, 0, BIG); /* left pending: finalize frees it */
        g_ops[0].req = NULL;               /* (so a leak checker sees a leak) */
        g_nops = 0;
        check(T->irecv(comm, prev, 951, &b, &r) == HVD_OK, "irecv before abort");
        a.comm = comm;
        a.delay = 0.3;
        pthread_create(&th, NULL, abort_thread, &a);
        t0 = now_s();
        s = T->wait(comm, r, 30.0);
        t0 = now_s() - t0;
        pthread_join(th, NULL);
        check(s == HVD_ERR_ABORTED, "wait during abort gave %d", s);
        check(t0 > 0.25 && t0 < 1.5, "abort ended the wait after %.2f s", t0);
        check(contains(T->last_error(comm), "check abort"), "last_error: %s", T->last_error(comm));
        check(T->async_error(comm) == HVD_ERR_ABORTED, "async_error after abort");
        check(T->isend(comm, next, 1, &b, &r) == HVD_ERR_ABORTED, "isend after abort");
        check(T->abort(comm, HVD_ERR_TRANSPORT, "again") == HVD_OK, "second abort");
        check(T->async_error(comm) == HVD_ERR_ABORTED, "a second abort changed the status");
    }
    kv_barrier(kv, rank, size, "aborted"); /* no rank leaves while another checks its abort */
    T->finalize(comm);
    free(g_ops[0].buf); /* the receive finalize released */
}

static void scenario_missing(file_kv *kv, int rank, int size) {
    hvd_transport_env_t env = make_env(kv, rank, size, 1.5);
    char err[512];
    int s;
    double t0 = now_s();
    void *comm;
    if (rank == 1) return; /* never starts */
    comm = do_init(&env, &s, err, sizeof(err));
    t0 = now_s() - t0;
    check(comm == NULL && s != HVD_OK, "init succeeded without rank 1");
    if (comm != NULL) T->finalize(comm);
    check(t0 >= 1.4 && t0 < 5.0, "init failed after %.2f s (start timeout 1.5 s)", t0);
    check(contains(err, rank == 0 ? "rank(s) 1 did not connect" : "rank 1 never published"),
          "init's message does not name rank 1: %s", err);
}

static void scenario_elsewhere(file_kv *kv, int rank, int size) {
    hvd_transport_env_t env = make_env(kv, rank, size, 20.0);
    char err[512];
    int s;
    double t0 = now_s();
    void *comm;
    g_hosts[1].name = "elsewhere-host";
    comm = do_init(&env, &s, err, sizeof(err));
    t0 = now_s() - t0;
    check(comm == NULL && s == HVD_ERR_UNSUPPORTED, "init across hosts: %d %s", s, err);
    if (comm != NULL) T->finalize(comm);
    check(t0 < 5.0, "init refused only after %.2f s", t0);
    check(contains(err, "rank 1 is on host elsewhere-host") || contains(err, "on host elsewhere-host:"),
          "init's message does not name the other host: %s", err);
}

static void scenario_lost(file_kv *kv, int rank, int size, int clean) {
    hvd_transport_env_t env = make_env(kv, rank, size, 20.0);
    char err[512];
    int s;
    void *comm = do_init(&env, &s, err, sizeof(err));
    hvd_transport_request_t *r = NULL;
    hvd_transport_buffer_t b;
    unsigned char x[8];
    double t0;
    if (comm == NULL) { check(0, "init: %d %s", s, err); return; }
    barrier(comm, size, 1);
    if (rank == 2) {
        if (clean) T->finalize(comm);
        _exit(g_failures ? 1 : 0); /* unclean: no finalize, no goodbye */
    }
    memset(&b, 0, sizeof(b));
    b.data = x;
    b.bytes = sizeof(x);
    b.device = HVD_DEVICE_CPU;
    t0 = now_s();
    s = T->irecv(comm, 2, 5, &b, &r); /* fails at once if the loss was seen already */
    if (s == HVD_OK) s = T->wait(comm, r, 10.0);
    t0 = now_s() - t0;
    check(s == HVD_ERR_TRANSPORT && t0 < 3.0, "wait on the lost rank: %d after %.2f s", s, t0);
    check(contains(T->last_error(comm), "rank 2"), "does not name rank 2: %s", T->last_error(comm));
    check(contains(T->last_error(comm), clean ? "finalized" : "without a goodbye"),
          "wrong reason: %s", T->last_error(comm));
    s = T->async_error(comm);
    check(clean ? s == HVD_OK : s == HVD_ERR_TRANSPORT, "async_error %d", s);
    check(T->isend(comm, 2, 5, &b, &r) == HVD_ERR_TRANSPORT, "isend to the lost rank");
    post(comm, 1, 1 - rank, 6, 0, 1000); /* ranks 0 and 1 still talk */
    post(comm, 0, 1 - rank, 6, 0, 1000);
    wait_all(comm, 1);
    T->finalize(comm);
}

static void scenario_single(void) {
    hvd_transport_env_t env = make_env(NULL, 0, 1, 5.0);
    char err[256];
    int s;
    void *comm = do_init(&env, &s, err, sizeof(err));
    check(comm != NULL, "single-rank init: %d %s", s, err);
    if (comm != NULL) T->finalize(comm);
}

/* Runs fn in size processes; 0 when all of them passed. */
static int run(const char *name, const char *base, int size, int which) {
    pid_t pids[8];
    file_kv kv;
    int r, bad = 0;
    double end = now_s() + 90;
    snprintf(kv.dir, sizeof(kv.dir), "%s/%s-%d", base, name, size);
    mkdir(kv.dir, 0700);
    g_scenario = name;
    for (r = 0; r < size; ++r) {
        pids[r] = fork();
        if (pids[r] == 0) {
            g_rank = r;
            alarm(80);
            if (which == 0) scenario_world(&kv, r, size);
            if (which == 1) scenario_missing(&kv, r, size);
            if (which == 2 || which == 3) scenario_lost(&kv, r, size, which == 3);
            if (which == 4) scenario_elsewhere(&kv, r, size);
            exit(g_failures ? 1 : 0); /* exit, not _exit: a leak checker runs at exit */
        }
    }
    for (r = 0; r < size; ++r) {
        int st = 0;
        pid_t got;
        while ((got = waitpid(pids[r], &st, WNOHANG)) == 0 && now_s() < end) sleep_s(0.02);
        if (got == 0) {
            kill(pids[r], SIGKILL);
            waitpid(pids[r], &st, 0);
            fprintf(stderr, "FAIL [%s]: rank %d still running after 90 s\n", name, r);
        }
        if (got == 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "FAIL [%s np %d]: rank %d ended with status 0x%x\n", name, size, r, st);
            bad = 1;
        }
    }
    printf("%s %s np %d\n", bad ? "FAIL" : "ok:", name, size);
    fflush(stdout);
    return bad;
}

int main(int argc, char **argv) {
    void *dl;
    hvd_transport_plugin_fn fn;
    char base[] = "/tmp/uds-p2p-check.XXXXXX";
    int bad = 0;
    if (argc != 2) {
        fprintf(stderr, "usage: %s <libhvd_transport_uds.so>\n", argv[0]);
        return 2;
    }
    dl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) { fprintf(stderr, "FAIL: dlopen: %s\n", dlerror()); return 1; }
    *(void **)&fn = dlsym(dl, HVD_TRANSPORT_PLUGIN_SYMBOL);
    T = fn != NULL ? fn() : NULL;
    if (T == NULL || T->abi_version != HVD_TRANSPORT_ABI ||
        T->struct_size != sizeof(hvd_transport_t) || T->name == NULL ||
        strcmp(T->name, "uds") != 0) {
        fprintf(stderr, "FAIL: no table named uds\n");
        return 1;
    }
    if (dlsym(dl, "hvd_transport_plugin_v1") != NULL) fprintf(stderr, "FAIL: exports v1\n"), bad = 1;
    check(T->caps == (HVD_TRANSPORT_CAP_P2P | HVD_TRANSPORT_CAP_P2P_TEST | HVD_TRANSPORT_CAP_ABORT |
                      HVD_TRANSPORT_CAP_PEER_TIMEOUT), "caps 0x%llx", (unsigned long long)T->caps);
    check(T->init && T->finalize && T->last_error && T->isend && T->irecv && T->wait && T->test &&
              T->progress && T->abort && T->async_error && T->set_timeout,
          "an entry the caps promise is NULL");
    check(!T->allreduce && !T->allgatherv && !T->broadcast && !T->alltoallv &&
              !T->reducescatter && !T->barrier && !T->register_memory,
          "native collectives or memory registration present");
    g_scenario = "table";
    if (g_failures) return 1;
    if (mkdtemp(base) == NULL) { perror("mkdtemp"); return 1; }
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_scenario = "single";
    scenario_single();
    printf("%s single np 1\n", g_failures ? "FAIL" : "ok:");
    bad |= g_failures != 0;
    bad |= run("world", base, 2, 0);
    bad |= run("world", base, 3, 0);
    bad |= run("world", base, 4, 0);
    bad |= run("missing", base, 3, 1);
    bad |= run("lost", base, 3, 2);
    bad |= run("leave", base, 3, 3);
    bad |= run("elsewhere", base, 2, 4);
    {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", base);
    }
    printf("%s\n", bad ? "FAILED" : "all passed");
    return bad ? 1 : 0;
}
