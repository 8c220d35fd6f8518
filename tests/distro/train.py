"""What a user on a machine with only Python runs after
`pip install hvd-*.whl numpy`: exact collectives, then data-parallel logistic
regression in plain numpy on a synthetic, linearly separable data set.

    hvdrun -np 2 python train.py

Every rank checks the collectives' results exactly and that all ranks end
with bit-identical weights; rank 0 prints one line per stage and the test
accuracy. Exits non-zero on any mismatch.
"""

import sys
import time

import numpy as np

import hvd  # noqa: E402

hvd.init()
rank, size = hvd.rank(), hvd.size()


def check(what, got, want):
    if not np.array_equal(np.asarray(got), np.asarray(want)):
        print(f"rank {rank}: {what}: got {got!r}, expected {want!r}", flush=True)
        sys.exit(1)


# Exact collectives: integers and floats whose sums are exact in binary.
t0 = time.monotonic()
first = hvd.allreduce(np.array([rank + 1.0]), op=hvd.Sum, name="first")
first_s = time.monotonic() - t0
first_at = time.time()
check("allreduce sum", first, [size * (size + 1) / 2])
check("allreduce int64", hvd.allreduce(np.arange(5, dtype=np.int64) * (rank + 1), op=hvd.Sum,
                                       name="ints"),
      np.arange(5, dtype=np.int64) * (size * (size + 1) // 2))
check("allreduce max", hvd.allreduce(np.array([rank], dtype=np.int32), op=hvd.Max, name="max"),
      [size - 1])
check("allgather", hvd.allgather(np.full((rank + 1, 2), rank, dtype=np.float32), name="ag"),
      np.concatenate([np.full((r + 1, 2), r, dtype=np.float32) for r in range(size)]))
check("broadcast", hvd.broadcast(np.array([7.5 if rank == 0 else -1.0]), root_rank=0,
                                 name="bc"), [7.5])
check("alltoall", hvd.alltoall(np.array([rank * 10 + r for r in range(size)], dtype=np.int32),
                               name="a2a"),
      np.array([r * 10 + rank for r in range(size)], dtype=np.int32))
if rank == 0:
    print(f"collectives exact: allreduce, allgather, broadcast, alltoall over {size} rank(s) "
          f"({hvd.transport()}); first allreduce {first_s * 1000:.0f} ms after hvd.init",
          flush=True)
    print(f"first allreduce done at {first_at:.3f}", flush=True)

# Data-parallel logistic regression: a fixed data set, sharded by rank.
rng = np.random.default_rng(0)
n, d = 2000, 10
true_w = rng.normal(size=d)
x = rng.normal(size=(n, d))
y = (x @ true_w > 0).astype(np.float64)
x_train, y_train, x_test, y_test = x[:1600], y[:1600], x[1600:], y[1600:]
shard = slice(rank, None, size)
xs, ys = x_train[shard], y_train[shard]
w = hvd.broadcast(rng.normal(size=d) * (rank + 1), root_rank=0, name="w0")
for step in range(200):
    p = 1.0 / (1.0 + np.exp(-(xs @ w)))
    grad = xs.T @ (p - ys) / len(ys)
    w -= 0.5 * hvd.allreduce(grad, op=hvd.Average, name="grad")
gathered = hvd.allgather(w[None, :], name="final_w")
for r in range(size):
    check(f"rank {r}'s weights", gathered[r], w)
acc = float(((x_test @ w > 0) == (y_test > 0.5)).mean())
if rank == 0:
    print(f"test accuracy: {acc:.4f} ({size} rank(s))", flush=True)
hvd.shutdown()
sys.exit(0 if acc >= 0.9 else 1)
