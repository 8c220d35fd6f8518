"""hvd.torch on 2 and 3 ranks (hvdrun): ops x dtypes, DistributedOptimizer vs a
single-process reference, fp16 compression, backward_passes_per_step,
broadcast_parameters / broadcast_optimizer_state. Tolerances: workers/torch_ops.py."""

import os

import pytest

import harness

torch = pytest.importorskip("torch", reason="torch is not installed (requirements-test.txt)")

from workers import torch_ops  # noqa: E402

WORKER = os.path.join(harness.WORKERS, "torch_ops.py")
SIZES = (2, 3)
_jobs = {}


def _job(size, tmp_path_factory):
    if size not in _jobs:
        _jobs[size] = harness.run_job(size, WORKER, launcher="hvdrun",
                                      tmp_path=tmp_path_factory.mktemp(f"torch{size}"))
    return _jobs[size]


def _params():
    out = []
    for size in SIZES:
        for name in torch_ops.check_names(size):
            out.append(pytest.param(size, name, id=f"np{size}-{name}"))
    return out


@pytest.mark.parametrize("size,check", _params())
def test_torch(size, check, hvdrun, tmp_path_factory):
    job = _job(size, tmp_path_factory)
    harness.assert_check(job, size, check)


@pytest.mark.parametrize("size", SIZES)
def test_torch_job_exit(size, hvdrun, tmp_path_factory):
    job = _job(size, tmp_path_factory)
    assert job.ok(), job.describe()
