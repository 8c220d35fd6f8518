"""hvd.keras.elastic (re-exported as hvd.tensorflow.keras.elastic): Horovod's elastic
Keras API -- KerasState and the callbacks that commit and track progress
during model.fit (docs/elastic.md; hvd.tensorflow.elastic has the rest)."""

from __future__ import annotations

import keras

from .tensorflow.elastic import (  # noqa: F401
    HorovodInternalError,
    HostsUpdatedInterrupt,
    MembershipChangedError,
    ObjectState,
    State,
    TensorFlowKerasState,
    membership,
    run,
    run_fn,
)


class KerasState(TensorFlowKerasState):
    """Horovod's KerasState: TensorFlowKerasState with Keras' backend."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, backend=keras.backend, **kwargs)


class CommitStateCallback(keras.callbacks.Callback):
    """Commits the state every batches_per_commit batches and at the end of
    each epoch (Horovod's). The count starts again at each fit (after a
    reset, every rank counts from the same point)."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        self.state = state
        self.batches_per_commit = int(batches_per_commit)
        self.batches_remaining = self.batches_per_commit

    def on_train_begin(self, logs=None):
        self.batches_remaining = self.batches_per_commit

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps state.batch at the last finished batch of the epoch, 0 at the
    end of an epoch (Horovod's). As in Horovod it shortens the first epoch
    after a reset by state.batch steps where fit's params have 'steps' (Keras
    versions whose fit loop reads them)."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        params = self.params or {}
        if params.get("steps"):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = params.get("steps")
            params["steps"] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keeps state.epoch at the number of finished epochs across resets
    (Horovod's): Keras counts the epochs of each fit from 0, the state from
    the start of training; fit for the epochs left, as Horovod's examples do:
    model.fit(..., epochs=epochs - state.epoch)."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = self.state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self.initial_epoch + epoch + 1


__all__ = ["run", "run_fn", "State", "ObjectState", "KerasState", "CommitStateCallback",
           "UpdateBatchStateCallback", "UpdateEpochStateCallback", "HostsUpdatedInterrupt",
           "HorovodInternalError", "MembershipChangedError", "membership"]
