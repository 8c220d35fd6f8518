"""hvd.tensorflow / hvd.keras with process sets on 2 ranks (hvdrun): each op
with process_set= eagerly and in tf.function, the same name in a set and the
whole job at once, DistributedGradientTape and the Keras DistributedOptimizer
within a set, broadcast_variables, size_op / process_set_included_op, errors,
and a traced graph on a removed set failing cleanly (workers/process_sets_tf.py)."""

import os

import pytest

import harness

pytest.importorskip("tensorflow", reason="tensorflow-cpu is not installed (requirements-test.txt)")

from workers import process_sets_tf  # noqa: E402

WORKER = os.path.join(harness.WORKERS, "process_sets_tf.py")
SIZE = process_sets_tf.SIZE
_job = []


def job(tmp_path_factory):
    if not _job:
        _job.append(harness.run_job(SIZE, WORKER, launcher="hvdrun", timeout=300,
                                    tmp_path=tmp_path_factory.mktemp("ps_tf")))
    return _job[0]


@pytest.mark.parametrize("check", process_sets_tf.check_names())
def test_process_sets_tf(check, hvdrun, tmp_path_factory):
    harness.assert_check(job(tmp_path_factory), SIZE, check)


def test_job_exit(hvdrun, tmp_path_factory):
    j = job(tmp_path_factory)
    assert j.ok(), j.describe()
