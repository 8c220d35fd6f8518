"""hvd.tensorflow.DistributedOptimizer around a tf.compat.v1.train.Optimizer
with backward_passes_per_step > 1, driven as a Horovod TensorFlow script
does, under hvdrun at 2 ranks (workers/horovod_tf_aggregation.py): in a TF1
graph (Session.run of minimize's train op, with a global_step; Average and
Sum, average_aggregated_gradients, Momentum's slot, the accumulators in
LOCAL_VARIABLES, compute_gradients' returns pass by pass, IndexedSlices
refused unless sparse_as_dense), eagerly and in tf.function, with
register_local_var, and the arguments refused. After n passes the variables
equal one step with the reduced (averaged) sum of the n passes' gradients,
in between they do not move: float64, compared exactly."""

import os

import pytest

import harness

pytest.importorskip("tensorflow", reason="tensorflow-cpu is not installed (requirements-test.txt)")

from hvd import _tf_kernels  # noqa: E402
from workers import horovod_tf_aggregation  # noqa: E402

WORKER = os.path.join(harness.WORKERS, "horovod_tf_aggregation.py")


@pytest.fixture(scope="module")
def job(hvdrun, tmp_path_factory):
    assert _tf_kernels.load() is not None, _tf_kernels.error()  # built before the ranks start
    j = harness.run_job(2, WORKER, launcher="hvdrun",
                        tmp_path=tmp_path_factory.mktemp("tf_aggregation"), timeout=360)
    assert set(j.results) == {0, 1}, j.describe()
    return j


@pytest.mark.parametrize("check", horovod_tf_aggregation.CHECKS)
def test_check(job, check):
    for r in (0, 1):
        err = job.results[r]["checks"].get(check, "check did not run")
        assert err is None, f"rank {r}, {check}: {err}"


def test_job_exit(job):
    assert job.ok(), job.describe()
