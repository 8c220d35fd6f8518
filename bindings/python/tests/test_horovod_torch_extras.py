"""Horovod torch scripts on hvd.torch under hvdrun at 2 ranks
(workers/horovod_torch_extras.py): DistributedOptimizer with groups= (an int
or lists of parameters) and the deprecated num_groups=, reduced as grouped
allreduces with exact gradients; hvd.SyncBatchNorm against torch's BatchNorm
on the concatenated batch of ranks with different batch sizes (forward,
input and parameter gradients, running statistics; tolerances in the
worker); is_homogeneous on one host, and on a 2 + 1 rank two-host topology;
Horovod's handle_average_backwards_compatibility (shared with hvd.tensorflow)."""

import os

import pytest

import harness

torch = pytest.importorskip("torch", reason="torch is not installed (requirements-test.txt)")

from workers import horovod_torch_extras  # noqa: E402

WORKER = os.path.join(harness.WORKERS, "horovod_torch_extras.py")
_jobs = {}


def _job(tmp_path_factory):
    if "np2" not in _jobs:
        _jobs["np2"] = harness.run_job(2, WORKER, launcher="hvdrun",
                                       tmp_path=tmp_path_factory.mktemp("torchextras"))
    return _jobs["np2"]


@pytest.mark.parametrize("check", horovod_torch_extras.CHECKS)
def test_horovod_torch_extras(check, hvdrun, tmp_path_factory):
    job = _job(tmp_path_factory)
    assert set(job.results) == {0, 1}, "not every rank reported:\n" + job.describe()
    for r in (0, 1):
        err = job.results[r]["checks"].get(check, "check did not run")
        assert err is None, f"rank {r}: {err}"


def test_horovod_torch_extras_job_exit(hvdrun, tmp_path_factory):
    job = _job(tmp_path_factory)
    assert job.ok(), job.describe()


def test_is_homogeneous_two_hosts_uneven(tmp_path):
    # ranks 0 and 1 on one host, rank 2 on another: not homogeneous, on every rank
    job = harness.run_job(3, WORKER, args=["hetero"], launcher="env", tmp_path=tmp_path,
                          timeout=120)
    assert job.ok(), job.describe()
    assert set(job.results) == {0, 1, 2}, job.describe()
    assert [job.results[r]["topology"] for r in range(3)] == [[2, 2], [2, 1], [1, 2]], \
        job.describe()
    assert [job.results[r]["homogeneous"] for r in range(3)] == [False, False, False]
