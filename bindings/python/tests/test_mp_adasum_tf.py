"""hvd.Adasum through hvd.tensorflow and hvd.keras on 2 and 3 ranks (hvdrun):
allreduce, the tape, and DistributedOptimizer(op=hvd.Adasum) (Keras eagerly,
in tf.function and model.fit; tf.compat.v1 in a graph and eagerly) against a
float64 reference; see workers/adasum_tf.py."""

import os

import pytest

import harness

pytest.importorskip("tensorflow", reason="tensorflow-cpu is not installed (requirements-test.txt)")

WORKER = os.path.join(harness.WORKERS, "adasum_tf.py")
CHECKS = ["tf_allreduce", "tf_grouped", "gradient_tape", "keras_optimizer_eager",
          "keras_optimizer_function", "keras_fit", "tf1_graph_optimizer",
          "tf1_eager_optimizer", "optimizer_arguments"]
_jobs = {}


def _job(size, tmp_path_factory):
    if size not in _jobs:
        _jobs[size] = harness.run_job(size, WORKER, launcher="hvdrun",
                                      tmp_path=tmp_path_factory.mktemp(f"adasumtf{size}"))
    return _jobs[size]


@pytest.mark.parametrize("size", (2, 3))
@pytest.mark.parametrize("check", CHECKS)
def test_adasum_tf(size, check, hvdrun, tmp_path_factory):
    job = _job(size, tmp_path_factory)
    harness.assert_check(job, size, check)


@pytest.mark.parametrize("size", (2, 3))
def test_job_exit(size, hvdrun, tmp_path_factory):
    assert _job(size, tmp_path_factory).ok(), _job(size, tmp_path_factory).describe()
