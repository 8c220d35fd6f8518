"""Horovod torch scripts on hvd.torch, run under hvdrun on 2 and 3 ranks
(workers/horovod_torch_ops.py): the gradients of every collective as Horovod
defines them, grouped_allgather / grouped_reducescatter (also in the numpy
API), float32 prescale / postscale / Average bit for bit as Horovod,
broadcast_optimizer_state initializing a fresh optimizer's state first, and
sparse gradients (sparse_allreduce_async, DistributedOptimizer with and
without sparse_as_dense). Every check compares exact values."""

import os

import pytest

import harness

torch = pytest.importorskip("torch", reason="torch is not installed (requirements-test.txt)")

from workers import horovod_torch_ops  # noqa: E402

WORKER = os.path.join(harness.WORKERS, "horovod_torch_ops.py")
SIZES = (2, 3)
_jobs = {}


def _job(size, tmp_path_factory):
    if size not in _jobs:
        _jobs[size] = harness.run_job(size, WORKER, launcher="hvdrun",
                                      tmp_path=tmp_path_factory.mktemp(f"hvdtorch{size}"))
    return _jobs[size]


@pytest.mark.parametrize("size,check", [pytest.param(s, c, id=f"np{s}-{c}")
                                        for s in SIZES for c in horovod_torch_ops.CHECKS])
def test_horovod_torch(size, check, hvdrun, tmp_path_factory):
    job = _job(size, tmp_path_factory)
    harness.assert_check(job, size, check)


@pytest.mark.parametrize("size", SIZES)
def test_horovod_torch_job_exit(size, hvdrun, tmp_path_factory):
    job = _job(size, tmp_path_factory)
    assert job.ok(), job.describe()
