"""numpy collectives on 2 and 3 ranks launched with hvdrun: every op x dtype,
async handles, in-place variants, objects, submission orders, errors.
One job per world size runs every check; each check is reported as its own test."""

import os

import pytest

import harness
from workers import np_ops

WORKER = os.path.join(harness.WORKERS, "np_ops.py")
SIZES = (2, 3)
_jobs = {}


def _job(size, hvdrun, tmp_path_factory):
    if size not in _jobs:
        _jobs[size] = harness.run_job(size, WORKER, launcher="hvdrun",
                                      tmp_path=tmp_path_factory.mktemp(f"np{size}"))
    return _jobs[size]


def _params():
    out = []
    for size in SIZES:
        for name in np_ops.check_names(size):
            out.append(pytest.param(size, name, id=f"np{size}-{name}"))
    return out


@pytest.mark.parametrize("size,check", _params())
def test_numpy_op(size, check, hvdrun, tmp_path_factory):
    job = _job(size, hvdrun, tmp_path_factory)
    harness.assert_check(job, size, check)


@pytest.mark.parametrize("size", SIZES)
def test_job_exit_and_topology(size, hvdrun, tmp_path_factory):
    job = _job(size, hvdrun, tmp_path_factory)
    assert job.ok(), job.describe()
    for r in range(size):
        info = job.results[r]["info"]
        assert (info["rank"], info["size"]) == (r, size)
        assert (info["local_rank"], info["local_size"]) == (r, size)  # one host
        assert (info["cross_rank"], info["cross_size"]) == (0, 1)
        assert info["transport"] == "gloo"
