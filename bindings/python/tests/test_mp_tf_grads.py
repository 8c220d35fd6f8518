"""Gradients of hvd.tensorflow's collectives (allgather, grouped_allgather,
reducescatter, grouped_reducescatter, grouped_allreduce, broadcast, alltoall)
under tf.GradientTape on 2 and 3 ranks (hvdrun), eagerly and in a
tf.function, checked against Horovod's definitions computed in numpy; see
workers/tf_grads.py."""

import os

import pytest

import harness

pytest.importorskip("tensorflow", reason="tensorflow-cpu is not installed (requirements-test.txt)")

from hvd import _tf_kernels  # noqa: E402

WORKER = os.path.join(harness.WORKERS, "tf_grads.py")
CHECKS = ["allgather", "grouped_allgather", "reducescatter", "grouped_reducescatter",
          "grouped_allreduce", "broadcast", "alltoall", "no_gradient_for_ints", "process_set"]
SIZES = (2, 3)
_jobs = {}


def _job(size, tmp_path_factory):
    if size not in _jobs:
        mod = _tf_kernels.load()  # built here first, not inside the ranks' stall budget
        assert mod is not None, f"hvd's TensorFlow kernels did not load: {_tf_kernels.error()}"
        _jobs[size] = harness.run_job(size, WORKER, launcher="hvdrun", timeout=300,
                                      tmp_path=tmp_path_factory.mktemp(f"tfgrads{size}"))
    return _jobs[size]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("check", CHECKS)
def test_tf_gradient(size, check, hvdrun, tmp_path_factory):
    harness.assert_check(_job(size, tmp_path_factory), size, check)


@pytest.mark.parametrize("size", SIZES)
def test_job_exit(size, hvdrun, tmp_path_factory):
    job = _job(size, tmp_path_factory)
    assert job.ok(), job.describe()
