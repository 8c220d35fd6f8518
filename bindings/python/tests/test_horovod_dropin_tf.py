"""Behaviours of Horovod's TensorFlow API that scripts and Horovod's own
tests rely on (issue 40, items 5-9), under hvdrun at 2 ranks
(workers/horovod_dropin_tf.py): tf.IndexedSlices without dense_shape in
allreduce and grouped_allreduce (graphs and tf.function) and their
prescale/postscale refusal, the graph-mode gradient of grouped_allgather,
SyncBatchNormalization(fused=False), local Keras 3 variables in
PartialDistributedGradientTape and BroadcastGlobalVariablesCallback, and
hvd._executing_eagerly()."""

import os

import pytest

import harness

tf = pytest.importorskip("tensorflow", reason="tensorflow is not installed")

from workers import horovod_dropin_tf  # noqa: E402

WORKER = os.path.join(harness.WORKERS, "horovod_dropin_tf.py")
_jobs = {}


def _job(tmp_path_factory):
    if "np2" not in _jobs:
        # importing TensorFlow and Keras before hvd.init() can take a minute on a
        # loaded machine: more than hvdrun's default start timeout
        _jobs["np2"] = harness.run_job(2, WORKER, launcher="hvdrun", timeout=480,
                                       env={"HVD_START_TIMEOUT": "240"},
                                       tmp_path=tmp_path_factory.mktemp("dropintf"))
    return _jobs["np2"]


@pytest.mark.parametrize("check", horovod_dropin_tf.CHECKS)
def test_horovod_dropin_tf(check, hvdrun, tmp_path_factory):
    harness.assert_check(_job(tmp_path_factory), 2, check)


def test_horovod_dropin_tf_job_exit(hvdrun, tmp_path_factory):
    job = _job(tmp_path_factory)
    assert job.ok(), job.describe()
