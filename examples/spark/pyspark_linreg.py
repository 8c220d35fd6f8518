"""Data-parallel linear regression with hvd.spark.run (PySpark).

Each Spark barrier task is one hvd rank; every rank generates its own shard of
a synthetic data set (y = w_true . x + b_true + noise), runs minibatch SGD and
averages the gradients with hvd.allreduce. The executors need no setup for hvd:
hvd.spark.run ships the driver's package and tells the tasks where its
libhvd.so is. The driver needs hvd importable (the wheel installed, or
PYTHONPATH=bindings/python in a checkout with a build):

    PYTHONPATH=$PWD/bindings/python spark-submit --master "local[2]" \
        examples/spark/pyspark_linreg.py --ranks 2 --epochs 20

Prints each rank's final loss and weights and "weights identical on all N
ranks: True"; exits 1 otherwise.
"""

import argparse
import sys
import time

import numpy as np
from pyspark.sql import SparkSession

import hvd
import hvd.spark

FEATURES = 8
SAMPLES_PER_RANK = 2048
BATCH = 64


def true_weights():
    return np.random.default_rng(12345).standard_normal(FEATURES + 1)  # weights, then the bias


def train(epochs, lr):
    """One rank's training; runs on a Spark executor with hvd initialised."""
    w_true = true_weights()
    rng = np.random.default_rng(1000 + 7919 * hvd.rank())  # this rank's shard
    x = rng.standard_normal((SAMPLES_PER_RANK, FEATURES))
    y = x @ w_true[:FEATURES] + w_true[FEATURES] + 0.1 * rng.standard_normal(SAMPLES_PER_RANK)

    w = np.random.default_rng(99 + hvd.rank()).standard_normal(FEATURES + 1)
    w = hvd.broadcast(w, root_rank=0, name="init_weights")  # rank 0's start wins
    loss = float("nan")
    for _ in range(epochs):
        sse = 0.0
        for s in range(0, SAMPLES_PER_RANK, BATCH):
            xb, yb = x[s:s + BATCH], y[s:s + BATCH]
            err = xb @ w[:FEATURES] + w[FEATURES] - yb
            sse += float(err @ err)
            grad = np.append(2 * xb.T @ err / BATCH, 2 * err.mean())
            grad = hvd.allreduce(grad, name="grad")  # op left out: Average over the ranks
            w -= lr * grad
        loss = float(hvd.allreduce(np.array([sse / SAMPLES_PER_RANK]), name="loss")[0])
    return {"rank": hvd.rank(), "loss": loss, "weights": w.tolist()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--lr", type=float, default=0.05)
    a = p.parse_args()

    spark = SparkSession.builder.appName("hvd-pyspark-linear-regression").getOrCreate()
    t0 = time.time()
    # Raises hvd.spark.InsufficientSlotsError at once when the cluster has
    # fewer task slots than ranks, and a task's own exception when it fails.
    results = hvd.spark.run(train, args=(a.epochs, a.lr), num_proc=a.ranks)
    print(f"trained {a.epochs} epochs on {a.ranks} ranks in {time.time() - t0:.1f} s")

    w_true = true_weights()
    for r in results:
        err = np.abs(np.array(r["weights"]) - w_true).max()
        print(f"rank {r['rank']}: final loss {r['loss']:.6f}, max |w - w_true| {err:.4f}, "
              f"weights {hash(tuple(r['weights'])) & 0xffffffff:08x}")
    identical = all(r["weights"] == results[0]["weights"] for r in results)
    print(f"weights identical on all {len(results)} ranks: {identical}")
    spark.stop()
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
