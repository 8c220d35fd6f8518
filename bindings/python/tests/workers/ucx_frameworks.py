"""A job over the UCX transport in a process that also holds a framework with
allocators of its own: argv[1] is "torch", "tensorflow" or "mpi4py" (loaded
before hvd, as a training script does). UCX's memory hooks (mmap/brk
interception, loaded with libucm) must not disturb the framework's
allocations, nor the framework hvd's: every check allocates and frees
through the framework between collectives and compares results exactly."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import Checks, run_checks  # noqa: E402

which = sys.argv[1]
if which == "torch":
    import torch
elif which == "tensorflow":
    import tensorflow as tf
elif which == "mpi4py":
    import mpi4py
    mpi4py.rc.initialize = False  # loaded (with its own UCX), not started
    from mpi4py import MPI  # noqa: F401
else:
    raise SystemExit(f"unknown framework {which}")

import numpy as np  # noqa: E402

import hvd  # noqa: E402

hvd.init(transport="ucx")
rank, size = hvd.rank(), hvd.size()
checks = Checks()


@checks.add("transport")
def _transport():
    assert hvd.transport() == "ucx", hvd.transport()


@checks.add("allreduce_churn")
def _churn():
    # Large tensors made and dropped between collectives: allocator traffic
    # (mmap/munmap of big blocks) while UCX's hooks are installed.
    for step in range(20):
        n = (1 << 20) + step * 4099
        if which == "torch":
            t = torch.full((n,), float(rank + 1), dtype=torch.float64)
            out = hvd.allreduce(t.numpy(), op=hvd.Sum, name=f"churn.{step}")
            junk = [torch.empty(1 << 18) for _ in range(8)]
            del junk
        elif which == "tensorflow":
            t = tf.fill([n], float(rank + 1))
            out = hvd.allreduce(t.numpy().astype(np.float64), op=hvd.Sum, name=f"churn.{step}")
            junk = [tf.zeros([1 << 18]) for _ in range(8)]
            del junk
        else:
            out = hvd.allreduce(np.full(n, float(rank + 1)), op=hvd.Sum, name=f"churn.{step}")
        want = size * (size + 1) / 2
        assert out.shape == (n,) and np.all(out == want), (step, out[:4])


@checks.add("allgather_ints")
def _allgather():
    x = np.arange(rank * 10, rank * 10 + rank + 3, dtype=np.int64)
    out = hvd.allgather(x, name="ag")
    want = np.concatenate([np.arange(r * 10, r * 10 + r + 3, dtype=np.int64) for r in range(size)])
    assert np.array_equal(out, want), out


@checks.add("join")
def _join():
    # Uneven inputs over UCX: rank r runs 2 (r + 1) steps, then joins; a
    # joined rank takes part in the others' allreduces with zeros.
    steps = 2 * (rank + 1)
    for i in range(steps):
        out = hvd.allreduce(np.ones(5, dtype=np.int32), op=hvd.Sum, name=f"join.{i}")
        active = sum(1 for r in range(size) if i < 2 * (r + 1))
        assert np.array_equal(out, np.full(5, active, dtype=np.int32)), (i, out)
    last = hvd.join()
    assert last == size - 1, last


run_checks(checks, rank, extra={"framework": which})
hvd.shutdown()
