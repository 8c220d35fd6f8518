"""hvd.keras driven as Horovod Keras scripts drive it (2 ranks under hvdrun,
Keras 3): DistributedOptimizer(backward_passes_per_step,
average_aggregated_gradients, sparse_as_dense, gradient_predivide_factor),
PartialDistributedOptimizer, BroadcastGlobalVariablesCallback with
local_variables, hvd.keras.callbacks as a module, LearningRateScheduleCallback
and LearningRateWarmupCallback with Horovod's formulas."""

import inspect
import os

import pytest

import harness

pytest.importorskip("tensorflow", reason="tensorflow-cpu is not installed (requirements-test.txt)")

import hvd.keras as hvdk  # noqa: E402
from hvd import _tf_kernels  # noqa: E402

WORKER = os.path.join(harness.WORKERS, "keras_api.py")
SIZE = 2
CHECKS = ["backward_passes_sum", "backward_passes_average", "backward_passes_eager",
          "sparse_as_dense", "predivide", "partial_optimizer", "callbacks_module",
          "lr_schedule", "lr_warmup", "deferred_broadcast"]


@pytest.fixture(scope="module")
def job(hvdrun, tmp_path_factory):
    assert _tf_kernels.load() is not None, _tf_kernels.error()  # built before the ranks start
    j = harness.run_job(SIZE, WORKER, launcher="hvdrun",
                        tmp_path=tmp_path_factory.mktemp("keras_api"), timeout=300)
    assert set(j.results) == set(range(SIZE)), j.describe()
    return j


@pytest.mark.parametrize("check", CHECKS)
def test_check(job, check):
    for r in range(SIZE):
        assert job.results[r]["checks"][check] is None, \
            f"rank {r}, {check}: {job.results[r]['checks'][check]}"


def test_exit(job):
    assert job.ok(), job.describe()


def test_shared_weights_identical_local_ones_not(job):
    assert job.results[0]["sparse_weights"] == job.results[1]["sparse_weights"]
    assert job.results[0]["partial_shared"] == job.results[1]["partial_shared"]
    assert job.results[0]["partial_local"] != job.results[1]["partial_local"]


def test_horovod_signatures():
    """Horovod's keyword names and positional order (Horovod 0.28's
    horovod.tensorflow.keras), so scripts that pass them work."""
    params = list(inspect.signature(hvdk.DistributedOptimizer).parameters)
    assert params[:10] == ["optimizer", "name", "device_dense", "device_sparse", "compression",
                           "sparse_as_dense", "gradient_predivide_factor", "op",
                           "backward_passes_per_step", "average_aggregated_gradients"]
    assert "local_layers" in inspect.signature(hvdk.PartialDistributedOptimizer).parameters
    cb = inspect.signature(hvdk.callbacks.BroadcastGlobalVariablesCallback).parameters
    # Horovod's, then hvd's process_set (keyword; docs/horovod.md)
    assert list(cb) == ["root_rank", "device", "local_variables", "process_set"]
    assert list(inspect.signature(hvdk.callbacks.MetricAverageCallback).parameters) == \
        ["device", "process_set"]
    sched = inspect.signature(hvdk.callbacks.LearningRateScheduleCallback).parameters
    assert list(sched) == ["initial_lr", "multiplier", "start_epoch", "end_epoch", "staircase",
                           "momentum_correction", "steps_per_epoch"]
    warm = inspect.signature(hvdk.callbacks.LearningRateWarmupCallback).parameters
    assert list(warm) == ["initial_lr", "warmup_epochs", "momentum_correction",
                          "steps_per_epoch", "verbose", "process_set"]
    with pytest.raises(ValueError, match="backward_passes_per_step"):
        import keras
        hvdk.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=0)
