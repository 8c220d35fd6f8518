"""hvd.Adasum on 2 and 3 ranks launched with hvdrun (numpy, and torch when
installed; see workers/adasum_ops.py): results against a float64 reference
of the documented tree, the same bits on every rank, per-tensor combination
in grouped allreduces, scaling, refused dtypes and operations, and
torch DistributedOptimizer(op=hvd.Adasum) against a simulation of every rank."""

import os

import pytest

import harness
from workers import adasum_ops

WORKER = os.path.join(harness.WORKERS, "adasum_ops.py")
SIZES = (2, 3)
_jobs = {}


def _job(size, hvdrun, tmp_path_factory):
    if size not in _jobs:
        _jobs[size] = harness.run_job(size, WORKER, launcher="hvdrun",
                                      tmp_path=tmp_path_factory.mktemp(f"adasum{size}"))
    return _jobs[size]


@pytest.mark.parametrize("size,check", [pytest.param(s, n, id=f"np{s}-{n}")
                                        for s in SIZES for n in adasum_ops.check_names(s)])
def test_adasum(size, check, hvdrun, tmp_path_factory):
    job = _job(size, hvdrun, tmp_path_factory)
    harness.assert_check(job, size, check)


@pytest.mark.parametrize("size", SIZES)
def test_job_exit(size, hvdrun, tmp_path_factory):
    job = _job(size, hvdrun, tmp_path_factory)
    assert job.ok(), job.describe()
