"""process_set= on hvd.keras's callbacks (BroadcastGlobalVariablesCallback in
model.fit, MetricAverageCallback, LearningRateWarmupCallback) and
broadcast_global_variables, and on hvd.tensorflow's
broadcast_global_variables and BroadcastGlobalVariablesHook (TF1 graphs): 4
ranks (hvdrun) in two sets of 2, each set's values from its own root and
staying within it (workers/process_sets_keras.py)."""

import os

import pytest

import harness

pytest.importorskip("tensorflow", reason="tensorflow-cpu is not installed (requirements-test.txt)")

from hvd import _tf_kernels  # noqa: E402
from workers import process_sets_keras  # noqa: E402

WORKER = os.path.join(harness.WORKERS, "process_sets_keras.py")
SIZE = process_sets_keras.SIZE
_job = []


def job(tmp_path_factory):
    if not _job:
        mod = _tf_kernels.load()  # built here first, not inside the ranks' stall budget
        assert mod is not None, f"hvd's TensorFlow kernels did not load: {_tf_kernels.error()}"
        _job.append(harness.run_job(SIZE, WORKER, launcher="hvdrun", timeout=300,
                                    tmp_path=tmp_path_factory.mktemp("ps_keras")))
    return _job[0]


@pytest.mark.parametrize("check", process_sets_keras.CHECKS)
def test_process_sets_keras(check, hvdrun, tmp_path_factory):
    harness.assert_check(job(tmp_path_factory), SIZE, check)


def test_job_exit(hvdrun, tmp_path_factory):
    j = job(tmp_path_factory)
    assert j.ok(), j.describe()
