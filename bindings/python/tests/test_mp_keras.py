"""TensorFlow/Keras on 2 ranks (hvdrun): fit -> identical weights, averaged metrics."""

import os

import numpy as np
import pytest

import harness

pytest.importorskip("tensorflow", reason="tensorflow-cpu is not installed (requirements-test.txt)")

WORKER = os.path.join(harness.WORKERS, "keras_fit.py")
SIZE = 2


@pytest.fixture(scope="module")
def job(hvdrun, tmp_path_factory):
    j = harness.run_job(SIZE, WORKER, launcher="hvdrun", tmp_path=tmp_path_factory.mktemp("keras"))
    assert set(j.results) == set(range(SIZE)), j.describe()
    return j


@pytest.mark.parametrize("check", ["tf_ops", "gradient_tape", "fit"])
def test_check(job, check):
    for r in range(SIZE):
        assert job.results[r]["checks"][check] is None, f"rank {r}: {job.results[r]['checks'][check]}"


def test_exit(job):
    assert job.ok(), job.describe()


def test_weights_identical_on_all_ranks(job):
    w0 = job.results[0]["weights"]
    for r in range(1, SIZE):
        for a, b in zip(w0, job.results[r]["weights"]):
            np.testing.assert_array_equal(np.array(a), np.array(b))


def test_metrics_averaged(job):
    hist = [job.results[r]["history"] for r in range(SIZE)]
    local = [job.results[r]["local"] for r in range(SIZE)]
    for key in ("loss", "accuracy"):
        for epoch in range(3):
            mean = np.mean([local[r][epoch][key] for r in range(SIZE)])
            for r in range(SIZE):
                assert hist[r][key][epoch] == pytest.approx(mean, rel=1e-6, abs=1e-7)
    # the shards differ, so un-averaged losses differ: averaging did something
    assert local[0][0]["loss"] != local[1][0]["loss"]


def test_learning_rate_warmup(job):
    lr = job.results[0]["history"]["lr"]
    # warmup from 0.05 * size / size towards 0.05 * size over 2 epochs, then flat
    assert lr[0] < lr[1] <= lr[2] == pytest.approx(0.05 * SIZE, rel=1e-6)
