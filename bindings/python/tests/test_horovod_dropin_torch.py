"""Behaviours of Horovod's torch API that scripts and Horovod's own tests rely
on (issue 40, items 1-4), under hvdrun at 2 ranks
(workers/horovod_dropin_torch.py): zero gradients left by
broadcast_optimizer_state, DistributedOptimizer on a rank outside its process
set, _parameter_names, and Horovod's words in the warning of step() after
synchronize()."""

import os

import pytest

import harness

torch = pytest.importorskip("torch", reason="torch is not installed (requirements-test.txt)")

from workers import horovod_dropin_torch  # noqa: E402

WORKER = os.path.join(harness.WORKERS, "horovod_dropin_torch.py")
_jobs = {}


def _job(tmp_path_factory):
    if "np2" not in _jobs:
        _jobs["np2"] = harness.run_job(2, WORKER, launcher="hvdrun",
                                       tmp_path=tmp_path_factory.mktemp("dropintorch"))
    return _jobs["np2"]


@pytest.mark.parametrize("check", horovod_dropin_torch.CHECKS)
def test_horovod_dropin_torch(check, hvdrun, tmp_path_factory):
    harness.assert_check(_job(tmp_path_factory), 2, check)


def test_horovod_dropin_torch_job_exit(hvdrun, tmp_path_factory):
    job = _job(tmp_path_factory)
    assert job.ok(), job.describe()
