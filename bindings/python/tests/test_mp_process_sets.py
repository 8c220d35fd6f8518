"""Process sets through the numpy API (hvd.ProcessSet, hvd.init(process_sets=...),
add/remove_process_set, process_set= on every collective) on 2 and 4 ranks
launched with hvdrun: overlapping and disjoint sets, exact results, the same
names in several sets at once, and bad input raising the same error on every
rank (see workers/process_sets_np.py). One job per world size; each check is
reported as its own test."""

import os

import pytest

import harness
from workers import process_sets_np

WORKER = os.path.join(harness.WORKERS, "process_sets_np.py")
SIZES = (2, 4)
_jobs = {}


def _job(size, tmp_path_factory):
    if size not in _jobs:
        _jobs[size] = harness.run_job(size, WORKER, args=(size,), launcher="hvdrun",
                                      tmp_path=tmp_path_factory.mktemp(f"ps{size}"),
                                      timeout=180)
    return _jobs[size]


@pytest.mark.parametrize("size,check", [pytest.param(s, n, id=f"np{s}-{n}")
                                        for s in SIZES for n in process_sets_np.check_names(s)])
def test_process_sets(size, check, hvdrun, tmp_path_factory):
    harness.assert_check(_job(size, tmp_path_factory), size, check)


@pytest.mark.parametrize("size", SIZES)
def test_job_exit(size, hvdrun, tmp_path_factory):
    job = _job(size, tmp_path_factory)
    assert job.ok(), job.describe()
