/*
 * collective_suite.c: every collective of hvd.h with exact checks, run by
 * hvdrun at any number of ranks over any transport. Built from the installed
 * hvd.h and libhvd alone.
 *
 *   hvdrun -np 3 collective_suite <expected transport name>
 *
 * Checks: hvd_context_transport names the expected transport; allreduce
 * (SUM, MIN, MAX, PRODUCT, AVERAGE) over int32, int64, uint8, float32 and
 * float64 at 0, 1, 7, 13, 1009 and 300007 elements (1.2 MiB of int32);
 * allgather with equal and with different first dimensions (rank 0 giving
 * none); broadcast from every root at 1, 1009 and 262147 elements;
 * alltoall even and with uneven splits (some 0); reducescatter (SUM, MAX)
 * with a first dimension that does not divide evenly; barrier. Integers must
 * match exactly. Floats: every input is a multiple of 1/4 below 2^10, so
 * sums, minima, maxima and products of up to 4 ranks are exact in both
 * float types; only AVERAGE divides, and is held to a relative error of
 * 1e-6 (float32) or 1e-12 (float64).
 *
 * Prints "rank R/S: N checks passed" and exits 0, or names each failure and
 * exits 1.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hvd.h"

#define WAIT_S 120.0

static int g_rank, g_size, g_fail, g_checks;

static void ok_or_die(hvd_status_t s, const char *what) {
    if (s != HVD_OK) {
        fprintf(stderr, "rank %d: %s failed: %s (%s)\n", g_rank, what, hvd_status_string(s),
                hvd_last_error());
        exit(1);
    }
}

static void expect(int ok, const char *what, long long i, double got, double want) {
    ++g_checks;
    if (ok) return;
    if (g_fail++ < 20) {
        fprintf(stderr, "rank %d: %s [%lld]: got %.17g, want %.17g\n", g_rank, what, i, got, want);
    }
}

/* Rank r's input element i for op (small, exact in every dtype used). */
static double input(int r, long long i, hvd_reduce_op_t op, hvd_dtype_t dt) {
    if (op == HVD_PRODUCT) return 1 + (double)((i + r) % 3);
    if (op == HVD_MIN || op == HVD_MAX) return (double)((i * 7 + r * 13) % 101) - (dt == HVD_UINT8 ? 0 : 50);
    if (dt == HVD_FLOAT32 || dt == HVD_FLOAT64) return (r + 1) * 0.5 + (double)(i % 13) * 0.25;
    return (double)((r + 1) * (i % 17 + 1)) - (dt == HVD_UINT8 ? 0 : 20);
}

static double get(const void *p, hvd_dtype_t dt, long long i) {
    switch (dt) {
    case HVD_INT32: return ((const int32_t *)p)[i];
    case HVD_INT64: return (double)((const int64_t *)p)[i];
    case HVD_UINT8: return ((const uint8_t *)p)[i];
    case HVD_FLOAT32: return ((const float *)p)[i];
    default: return ((const double *)p)[i];
    }
}

static void put(void *p, hvd_dtype_t dt, long long i, double v) {
    switch (dt) {
    case HVD_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case HVD_INT64: ((int64_t *)p)[i] = (int64_t)v; break;
    case HVD_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case HVD_FLOAT32: ((float *)p)[i] = (float)v; break;
    default: ((double *)p)[i] = v; break;
    }
}

static size_t dsize(hvd_dtype_t dt) {
    size_t s = 0;
    ok_or_die(hvd_dtype_size(dt, &s), "hvd_dtype_size");
    return s;
}

static double reduce_want(long long i, hvd_reduce_op_t op, hvd_dtype_t dt) {
    double acc = input(0, i, op, dt);
    int r;
    for (r = 1; r < g_size; ++r) {
        double v = input(r, i, op, dt);
        if (op == HVD_SUM || op == HVD_AVERAGE) acc += v;
        if (op == HVD_PRODUCT) acc *= v;
        if (op == HVD_MIN && v < acc) acc = v;
        if (op == HVD_MAX && v > acc) acc = v;
    }
    if (op == HVD_AVERAGE) {
        acc /= g_size;
        if (dt != HVD_FLOAT32 && dt != HVD_FLOAT64) acc = acc < 0 ? ceil(acc) : floor(acc);
    }
    return acc;
}

static int close_enough(double got, double want, hvd_reduce_op_t op, hvd_dtype_t dt) {
    double tol;
    if (op != HVD_AVERAGE || (dt != HVD_FLOAT32 && dt != HVD_FLOAT64)) return got == want;
    tol = (dt == HVD_FLOAT32 ? 1e-6 : 1e-12) * (fabs(want) > 1 ? fabs(want) : 1);
    return fabs(got - want) <= tol;
}

static void test_allreduce(void) {
    static const hvd_dtype_t dts[] = {HVD_INT32, HVD_INT64, HVD_UINT8, HVD_FLOAT32, HVD_FLOAT64};
    static const hvd_reduce_op_t ops[] = {HVD_SUM, HVD_MIN, HVD_MAX, HVD_PRODUCT, HVD_AVERAGE};
    static const char *const opn[] = {"sum", "average", "min", "max", "product"};
    static const long long counts[] = {0, 1, 7, 13, 1009, 300007};
    size_t d, o, c;
    for (d = 0; d < sizeof(dts) / sizeof(dts[0]); ++d) {
        for (o = 0; o < sizeof(ops) / sizeof(ops[0]); ++o) {
            for (c = 0; c < sizeof(counts) / sizeof(counts[0]); ++c) {
                hvd_dtype_t dt = dts[d];
                hvd_reduce_op_t op = ops[o];
                long long n = counts[c], i;
                int64_t shape[1];
                char name[64], what[96];
                void *in, *out;
                hvd_tensor_t t = HVD_TENSOR_INIT;
                /* uint8 sums of big counts would wrap: small counts only */
                if (dt == HVD_UINT8 && (op == HVD_SUM || op == HVD_AVERAGE) && g_size > 4) continue;
                shape[0] = n;
                in = malloc((size_t)(n > 0 ? n : 1) * dsize(dt));
                out = malloc((size_t)(n > 0 ? n : 1) * dsize(dt));
                if (in == NULL || out == NULL) ok_or_die(HVD_ERR_NO_MEMORY, "malloc");
                for (i = 0; i < n; ++i) put(in, dt, i, input(g_rank, i, op, dt));
                t.data = n > 0 ? in : NULL;
                t.dtype = dt;
                t.ndim = 1;
                t.shape = shape;
                snprintf(name, sizeof(name), "ar.%d.%s.%lld", (int)dt, opn[op], n);
                snprintf(what, sizeof(what), "allreduce %s dtype %d n %lld", opn[op], (int)dt, n);
                ok_or_die(hvd_allreduce(NULL, name, &t, n > 0 ? out : NULL, op), what);
                for (i = 0; i < n; ++i) {
                    double want = reduce_want(i, op, dt), got = get(out, dt, i);
                    expect(close_enough(got, want, op, dt), what, i, got, want);
                }
                if (n == 0) ++g_checks;
                free(in);
                free(out);
            }
        }
    }
}

/* Waits for a handle whose result it owns; copies the output out. */
static void *wait_output(hvd_handle_t h, const char *what, size_t *bytes, int64_t *rows) {
    const void *data = NULL;
    int64_t shape[4];
    int32_t nd = 0;
    void *copy;
    ok_or_die(hvd_handle_wait(h, WAIT_S), what);
    ok_or_die(hvd_handle_output(h, &data, bytes), what);
    ok_or_die(hvd_handle_output_shape(h, shape, 4, &nd), what);
    *rows = nd > 0 ? shape[0] : -1;
    copy = malloc(*bytes > 0 ? *bytes : 1);
    if (copy == NULL) ok_or_die(HVD_ERR_NO_MEMORY, "malloc");
    if (*bytes > 0) memcpy(copy, data, *bytes);
    return copy;
}

static int32_t cell(int r, long long row, int col) { return (int32_t)(r * 100000 + row * 10 + col); }

static void test_allgather(void) {
    int variable;
    for (variable = 0; variable < 2; ++variable) {
        /* rows per rank: 4 each, or rank r gives r rows (rank 0 none) */
        int64_t rows = variable ? g_rank : 4, got_rows = 0, shape[2];
        int32_t *in = (int32_t *)malloc((size_t)(rows > 0 ? rows : 1) * 3 * sizeof(int32_t));
        hvd_tensor_t t = HVD_TENSOR_INIT;
        hvd_handle_t h = NULL;
        size_t bytes = 0;
        long long i, total = 0, off = 0;
        int r, c;
        int32_t *out;
        for (i = 0; i < rows; ++i) {
            for (c = 0; c < 3; ++c) in[i * 3 + c] = cell(g_rank, i, c);
        }
        shape[0] = rows;
        shape[1] = 3;
        t.data = rows > 0 ? in : NULL;
        t.dtype = HVD_INT32;
        t.ndim = 2;
        t.shape = shape;
        ok_or_die(hvd_allgather_async(NULL, variable ? "ag.v" : "ag.even", &t, &h), "allgather");
        out = (int32_t *)wait_output(h, "allgather", &bytes, &got_rows);
        ok_or_die(hvd_handle_release(h), "release");
        for (r = 0; r < g_size; ++r) total += variable ? r : 4;
        expect(got_rows == total && bytes == (size_t)total * 12, "allgather rows", 0,
               (double)got_rows, (double)total);
        for (r = 0; r < g_size && got_rows == total; ++r) {
            for (i = 0; i < (variable ? r : 4); ++i, ++off) {
                for (c = 0; c < 3; ++c) {
                    expect(out[off * 3 + c] == cell(r, i, c), variable ? "allgatherv" : "allgather",
                           off * 3 + c, out[off * 3 + c], cell(r, i, c));
                }
            }
        }
        free(in);
        free(out);
    }
}

static void test_broadcast(void) {
    static const long long counts[] = {1, 1009, 262147};
    size_t c;
    int root;
    for (root = 0; root < g_size; ++root) {
        for (c = 0; c < sizeof(counts) / sizeof(counts[0]); ++c) {
            long long n = counts[c], i;
            int64_t shape[1];
            int64_t *a = (int64_t *)malloc((size_t)n * sizeof(int64_t));
            float *b = (float *)malloc((size_t)n * sizeof(float));
            hvd_tensor_t t = HVD_TENSOR_INIT;
            char name[64];
            shape[0] = n;
            for (i = 0; i < n; ++i) {
                a[i] = g_rank == root ? (int64_t)root * 1000000007LL + i * 3 : -1;
                b[i] = g_rank == root ? (float)(root + 1) * 0.25f + (float)(i % 100) : -7.0f;
            }
            t.data = a;
            t.dtype = HVD_INT64;
            t.ndim = 1;
            t.shape = shape;
            snprintf(name, sizeof(name), "bc.i64.%d.%lld", root, n);
            ok_or_die(hvd_broadcast(NULL, name, &t, a, root), "broadcast int64");
            t.data = b;
            t.dtype = HVD_FLOAT32;
            snprintf(name, sizeof(name), "bc.f32.%d.%lld", root, n);
            ok_or_die(hvd_broadcast(NULL, name, &t, b, root), "broadcast float32");
            for (i = 0; i < n; ++i) {
                double wa = (double)root * 1000000007.0 + (double)i * 3;
                float wb = (float)(root + 1) * 0.25f + (float)(i % 100);
                expect((double)a[i] == wa, "broadcast int64", i, (double)a[i], wa);
                expect(b[i] == wb, "broadcast float32", i, b[i], wb);
            }
            free(a);
            free(b);
        }
    }
}

static void test_alltoall(void) {
    int uneven;
    for (uneven = 0; uneven < 2; ++uneven) {
        int64_t splits[64], recv_splits[64], shape[2], total = 0, got_rows = 0;
        int j, c;
        long long i, off = 0;
        int32_t *in, *out;
        hvd_tensor_t t = HVD_TENSOR_INIT;
        hvd_handle_t h = NULL;
        size_t bytes = 0;
        for (j = 0; j < g_size; ++j) {
            splits[j] = uneven ? (g_rank + j) % 3 : 2;
            total += splits[j];
        }
        in = (int32_t *)malloc((size_t)(total > 0 ? total : 1) * 2 * sizeof(int32_t));
        for (j = 0; j < g_size; ++j) { /* rows to j: cell(me, j * 1000 + k, col) */
            for (i = 0; i < splits[j]; ++i, ++off) {
                for (c = 0; c < 2; ++c) in[off * 2 + c] = cell(g_rank, j * 1000 + i, c);
            }
        }
        shape[0] = total;
        shape[1] = 2;
        t.data = total > 0 ? in : NULL;
        t.dtype = HVD_INT32;
        t.ndim = 2;
        t.shape = shape;
        ok_or_die(hvd_alltoall_async(NULL, uneven ? "a2a.v" : "a2a", &t, uneven ? splits : NULL, &h),
                  "alltoall");
        out = (int32_t *)wait_output(h, "alltoall", &bytes, &got_rows);
        ok_or_die(hvd_handle_recv_splits(h, recv_splits, 64), "recv_splits");
        ok_or_die(hvd_handle_release(h), "release");
        off = 0;
        for (j = 0; j < g_size; ++j) {
            int64_t want = uneven ? (j + g_rank) % 3 : 2;
            expect(recv_splits[j] == want, "alltoall recv_splits", j, (double)recv_splits[j],
                   (double)want);
            for (i = 0; i < want && recv_splits[j] == want; ++i, ++off) {
                for (c = 0; c < 2; ++c) {
                    int32_t w = cell(j, g_rank * 1000 + i, c);
                    expect(off < got_rows && out[off * 2 + c] == w, uneven ? "alltoallv" : "alltoall",
                           off * 2 + c, off < got_rows ? out[off * 2 + c] : -1, w);
                }
            }
        }
        free(in);
        free(out);
    }
}

static void test_reducescatter(void) {
    static const hvd_reduce_op_t ops[] = {HVD_SUM, HVD_MAX};
    size_t o;
    for (o = 0; o < 2; ++o) {
        long long rows = (long long)g_size * 5 + 2, i, first = 0, mine, k;
        int64_t shape[2], got_rows = 0;
        int32_t *in = (int32_t *)malloc((size_t)rows * 4 * sizeof(int32_t)), *out;
        hvd_tensor_t t = HVD_TENSOR_INIT;
        hvd_handle_t h = NULL;
        size_t bytes = 0;
        int r;
        for (i = 0; i < rows * 4; ++i) in[i] = (int32_t)input(g_rank, i, ops[o], HVD_INT32);
        shape[0] = rows;
        shape[1] = 4;
        t.data = in;
        t.dtype = HVD_INT32;
        t.ndim = 2;
        t.shape = shape;
        ok_or_die(hvd_reducescatter_async(NULL, o ? "rs.max" : "rs.sum", &t, ops[o], 1.0, 1.0, &h),
                  "reducescatter");
        out = (int32_t *)wait_output(h, "reducescatter", &bytes, &got_rows);
        ok_or_die(hvd_handle_release(h), "release");
        for (r = 0; r < g_rank; ++r) first += rows / g_size + (r < rows % g_size ? 1 : 0);
        mine = rows / g_size + (g_rank < rows % g_size ? 1 : 0);
        expect(got_rows == mine, "reducescatter rows", 0, (double)got_rows, (double)mine);
        for (k = 0; k < mine * 4 && got_rows == mine; ++k) {
            double want = reduce_want(first * 4 + k, ops[o], HVD_INT32);
            expect(out[k] == want, o ? "reducescatter max" : "reducescatter sum", k, out[k], want);
        }
        free(in);
        free(out);
    }
}

int main(int argc, char **argv) {
    hvd_context_t ctx = NULL;
    const char *transport = NULL;
    int k;
    ok_or_die(hvd_init(NULL), "hvd_init");
    ok_or_die(hvd_rank(&g_rank), "hvd_rank");
    ok_or_die(hvd_size(&g_size), "hvd_size");
    ok_or_die(hvd_default_context(&ctx), "hvd_default_context");
    ok_or_die(hvd_context_transport(ctx, &transport), "hvd_context_transport");
    ++g_checks;
    if (argc > 1 && strcmp(transport, argv[1]) != 0) {
        fprintf(stderr, "rank %d: transport is '%s', want '%s'\n", g_rank, transport, argv[1]);
        ++g_fail;
    }
    test_allreduce();
    test_allgather();
    test_broadcast();
    test_alltoall();
    test_reducescatter();
    for (k = 0; k < 3; ++k) ok_or_die(hvd_barrier(NULL), "barrier");
    g_checks += 3;
    ok_or_die(hvd_shutdown(), "hvd_shutdown");
    if (g_fail != 0) {
        fprintf(stderr, "rank %d/%d: %d of %d checks failed\n", g_rank, g_size, g_fail, g_checks);
        return 1;
    }
    printf("rank %d/%d transport=%s: %d checks passed\n", g_rank, g_size, transport, g_checks);
    return 0;
}
