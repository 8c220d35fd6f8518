"""The UCX transport from Python: hvd.init(transport="ucx") in 2-rank jobs
(hvdrun) whose processes also hold torch, TensorFlow or mpi4py (each loaded
before hvd, one per job: torch and TensorFlow never share a process). UCX
intercepts mmap/brk once loaded; the frameworks' allocators must keep
working and the results stay exact (workers/ucx_frameworks.py). Skipped
where the UCX plugin is not built."""

import importlib.util
import os

import pytest

import harness

WORKER = os.path.join(harness.WORKERS, "ucx_frameworks.py")
CHECKS = ("transport", "allreduce_churn", "allgather_ints", "join")
FRAMEWORKS = ("torch", "tensorflow", "mpi4py")


def _ucx_built():
    return os.path.isfile(os.path.join(harness.library_dir(), "libhvd_transport_ucx.so"))


pytestmark = pytest.mark.skipif(not _ucx_built(), reason="the UCX transport plugin is not built "
                                "(libucx-dev missing when the library was configured)")
_jobs = {}


def _job(which, tmp_path_factory):
    if which not in _jobs:
        _jobs[which] = harness.run_job(2, WORKER, args=(which,), launcher="hvdrun",
                                       tmp_path=tmp_path_factory.mktemp(f"ucx-{which}"),
                                       env={"HVD_SHM": "0"})
    return _jobs[which]


@pytest.mark.parametrize("which", FRAMEWORKS)
@pytest.mark.parametrize("check", CHECKS)
def test_ucx_with_framework(which, check, hvdrun, tmp_path_factory):
    # Found, not imported: the frameworks load only in the job's processes.
    if importlib.util.find_spec(which) is None:
        pytest.skip(f"{which} is not installed")
    job = _job(which, tmp_path_factory)
    harness.assert_check(job, 2, check)


@pytest.mark.parametrize("which", FRAMEWORKS)
def test_ucx_job_exit(which, hvdrun, tmp_path_factory):
    if importlib.util.find_spec(which) is None:
        pytest.skip(f"{which} is not installed")
    job = _job(which, tmp_path_factory)
    assert job.ok(), job.describe()
