"""Horovod TensorFlow / Keras scripts on hvd under hvdrun at 2 ranks
(workers/horovod_tf_extras.py): hvd.tensorflow.grouped_allgather and
grouped_reducescatter eagerly and in tf.function (members named
"<name>.<i>", exact values), hvd.keras.load_model (a model saved with a
Keras optimizer and one saved with hvd's DistributedOptimizer: the loaded
optimizer is hvd's, with the saved state, and trains on averaged
gradients), callbacks.BestModelCheckpoint (best by monitor, rank 0 only),
process_set_included_op, hvd.tensorflow.keras as Horovod's module path,
broadcast_ (in place), the object functions with Horovod's session argument,
Horovod's average/power-of-2 helpers, the Compressor base class (hvd's
compressors and a script's own subclass), and hvd.keras.allreduce / reducescatter
in Horovod's Keras argument order."""

import os

import pytest

import harness

pytest.importorskip("tensorflow", reason="tensorflow-cpu is not installed (requirements-test.txt)")

from hvd import _tf_kernels  # noqa: E402
from workers import horovod_tf_extras  # noqa: E402

WORKER = os.path.join(harness.WORKERS, "horovod_tf_extras.py")


@pytest.fixture(scope="module")
def job(hvdrun, tmp_path_factory):
    assert _tf_kernels.load() is not None, _tf_kernels.error()  # built before the ranks start
    j = harness.run_job(2, WORKER, launcher="hvdrun",
                        tmp_path=tmp_path_factory.mktemp("tf_extras"), timeout=360)
    assert set(j.results) == {0, 1}, j.describe()
    return j


@pytest.mark.parametrize("check", horovod_tf_extras.CHECKS)
def test_check(job, check):
    for r in (0, 1):
        err = job.results[r]["checks"].get(check, "check did not run")
        assert err is None, f"rank {r}, {check}: {err}"


def test_exit(job):
    assert job.ok(), job.describe()
