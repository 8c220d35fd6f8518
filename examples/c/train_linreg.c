/*
 * Data-parallel linear regression in plain C on the hvd C API.
 *
 * The single-process program plus five hvd lines: init, broadcast the
 * initial weights from rank 0, average gradients with allreduce, save the
 * checkpoint on rank 0 only, shutdown. Runs alone (`./train_linreg`) or as N
 * ranks (`hvdrun -np 2 ./train_linreg`); each rank trains on its own shard of
 * a synthetic data set.
 *
 * Usage: train_linreg [epochs] [checkpoint-path]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hvd.h"

#define FEATURES 16
#define SAMPLES_PER_RANK 4096
#define BATCH 64

static int check(hvd_status_t s, const char *what) {
    if (s != HVD_OK) {
        fprintf(stderr, "%s failed: %s (%s)\n", what, hvd_status_string(s), hvd_last_error());
        exit(1);
    }
    return 0;
}

/* A small deterministic generator (xorshift), so every run is reproducible. */
static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}
static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) / 9007199254740992.0; }
static double rng_normal(uint64_t *s) {
    double u = rng_uniform(s) + 1e-12, v = rng_uniform(s);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

int main(int argc, char **argv) {
    int epochs = argc > 1 ? atoi(argv[1]) : 20;
    const char *ckpt = argc > 2 ? argv[2] : "linreg_checkpoint.bin";
    int rank, size;

    check(hvd_init(NULL), "hvd_init");                       /* hvd line 1 */
    check(hvd_rank(&rank), "hvd_rank");
    check(hvd_size(&size), "hvd_size");

    /* The true model, the same on every rank; the data differ per rank. */
    double w_true[FEATURES + 1];
    uint64_t seed = 12345;
    for (int j = 0; j <= FEATURES; ++j) w_true[j] = rng_normal(&seed);

    static double x[SAMPLES_PER_RANK][FEATURES], y[SAMPLES_PER_RANK];
    uint64_t data_seed = 1000 + (uint64_t)rank * 7919;
    for (int i = 0; i < SAMPLES_PER_RANK; ++i) {
        double t = w_true[FEATURES];
        for (int j = 0; j < FEATURES; ++j) {
            x[i][j] = rng_normal(&data_seed);
            t += w_true[j] * x[i][j];
        }
        y[i] = t + 0.1 * rng_normal(&data_seed);
    }

    /* Each rank starts from different random weights; rank 0's win. */
    double w[FEATURES + 1];
    uint64_t init_seed = 99 + (uint64_t)rank;
    for (int j = 0; j <= FEATURES; ++j) w[j] = rng_normal(&init_seed);
    int64_t wshape[1] = {FEATURES + 1};
    hvd_tensor_t wt = {w, HVD_FLOAT64, 1, wshape, HVD_DEVICE_CPU, NULL};
    check(hvd_broadcast(NULL, "init_weights", &wt, w, 0), "broadcast");  /* hvd line 2 */

    const double lr = 0.006;
    const int steps = SAMPLES_PER_RANK / BATCH;
    for (int epoch = 0; epoch < epochs; ++epoch) {
        double loss_sum = 0;
        for (int s = 0; s < steps; ++s) {
            double grad[FEATURES + 1] = {0};
            for (int i = s * BATCH; i < (s + 1) * BATCH; ++i) {
                double pred = w[FEATURES];
                for (int j = 0; j < FEATURES; ++j) pred += w[j] * x[i][j];
                double err = pred - y[i];
                loss_sum += err * err;
                for (int j = 0; j < FEATURES; ++j) grad[j] += 2.0 * err * x[i][j] / BATCH;
                grad[FEATURES] += 2.0 * err / BATCH;
            }
            hvd_tensor_t gt = {grad, HVD_FLOAT64, 1, wshape, HVD_DEVICE_CPU, NULL};
            check(hvd_allreduce(NULL, "grad", &gt, grad, HVD_AVERAGE), "allreduce"); /* hvd line 3 */
            for (int j = 0; j <= FEATURES; ++j) w[j] -= lr * grad[j];
        }
        /* The loss averaged over all ranks' data, for reporting. */
        double loss = loss_sum / SAMPLES_PER_RANK;
        int64_t one[1] = {1};
        hvd_tensor_t lt = {&loss, HVD_FLOAT64, 1, one, HVD_DEVICE_CPU, NULL};
        check(hvd_allreduce(NULL, "loss", &lt, &loss, HVD_AVERAGE), "allreduce loss");
        if (rank == 0) printf("epoch %2d  loss %.6f\n", epoch + 1, loss);
    }

    /* Every rank must hold the same weights: compare the max and min over ranks. */
    double wmax[FEATURES + 1], wmin[FEATURES + 1];
    check(hvd_allreduce(NULL, "w_max", &wt, wmax, HVD_MAX), "allreduce max");
    check(hvd_allreduce(NULL, "w_min", &wt, wmin, HVD_MIN), "allreduce min");
    int identical = memcmp(wmax, wmin, sizeof(wmax)) == 0;
    double err = 0;
    for (int j = 0; j <= FEATURES; ++j) err = fmax(err, fabs(w[j] - w_true[j]));

    if (rank == 0) {                                            /* hvd line 4 */
        FILE *f = fopen(ckpt, "wb");
        if (f != NULL) {
            fwrite(w, sizeof(double), FEATURES + 1, f);
            fclose(f);
        }
        printf("ranks: %d  weights identical on all ranks: %s  max |w - w_true|: %.4f\n", size,
               identical ? "yes" : "NO", err);
        printf("checkpoint written by rank 0: %s\n", ckpt);
    }
    check(hvd_shutdown(), "hvd_shutdown");                     /* hvd line 5 */
    return identical && err < 0.05 ? 0 : 1;
}
