"""hvd.torch with process sets on 4 ranks (hvdrun): every op with
process_set=, gradients within a set, DistributedOptimizer(process_set=) with
two groups training different models, broadcast_parameters and
broadcast_optimizer_state within a set, errors (workers/process_sets_torch.py)."""

import os

import pytest

import harness

torch = pytest.importorskip("torch", reason="torch is not installed (requirements-test.txt)")

from workers import process_sets_torch  # noqa: E402

WORKER = os.path.join(harness.WORKERS, "process_sets_torch.py")
SIZE = process_sets_torch.SIZE
_job = []


def job(tmp_path_factory):
    if not _job:
        _job.append(harness.run_job(SIZE, WORKER, launcher="hvdrun", timeout=240,
                                    tmp_path=tmp_path_factory.mktemp("ps_torch")))
    return _job[0]


@pytest.mark.parametrize("check", process_sets_torch.check_names())
def test_process_sets_torch(check, hvdrun, tmp_path_factory):
    harness.assert_check(job(tmp_path_factory), SIZE, check)


def test_job_exit(hvdrun, tmp_path_factory):
    j = job(tmp_path_factory)
    assert j.ok(), j.describe()
