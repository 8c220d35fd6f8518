"""hvd.keras: Keras (TensorFlow backend) DistributedOptimizer and callbacks.

    import hvd.keras as hvd
    hvd.init()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))
    model.compile(optimizer=opt, loss=..., metrics=[...], jit_compile=False)
    model.fit(x_shard, y_shard, callbacks=[
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.01 * hvd.size(), warmup_epochs=2),
    ], verbose=1 if hvd.rank() == 0 else 0)

hvd ops run in a tf.py_function inside Keras' compiled train step, which XLA
cannot compile: pass jit_compile=False to compile() (DistributedOptimizer
raises a clear error otherwise).

Do not use it in a process that has loaded PyTorch (hvd.torch): the two
frameworks cannot share a process (importing this module then warns; see
bindings/python/README.md).
"""

from __future__ import annotations

import sys as _sys
import types

if "hvd.tensorflow" in _sys.modules:  # else importing it, below, warns
    from .tensorflow import _warn_if_torch_loaded
    _warn_if_torch_loaded()
    del _warn_if_torch_loaded

try:
    import tensorflow as tf
    import keras
except ImportError as _e:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "hvd.keras needs TensorFlow 2 with Keras (pip install tensorflow-cpu); the numpy API in "
        "`import hvd` works without it") from _e

import numpy as np

import hvd as _hvd
from . import _ops
from ._api import unavailable_module as _unavailable_module
from .tensorflow import (  # noqa: F401  (re-exported)
    Average,
    Compression,
    HorovodInternalError,
    HvdError,
    InvalidArgumentError,
    Max,
    Min,
    MismatchError,
    Product,
    Sum,
    allgather,
    allgather_object,
    allreduce,
    allreduce_gradients,
    barrier,
    broadcast,
    broadcast_object,
    broadcast_variables,
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    grouped_allreduce,
    init,
    is_initialized,
    join,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    reducescatter,
    rocm_built,
    shutdown,
    size,
    transport,
)


def _in_xla():
    try:
        from tensorflow.python.framework import ops as _tf_ops
        from tensorflow.python.ops import control_flow_util
        return control_flow_util.GraphOrParentsInXlaContext(_tf_ops.get_default_graph())
    except Exception:  # private API moved: skip the check
        return False


class _DistributedOptimizerMixin:
    """Overrides apply(): gradients are averaged over ranks before the wrapped
    optimizer's update (model.fit goes through apply_gradients -> apply)."""

    def apply(self, grads, trainable_variables=None):
        if _in_xla():
            raise RuntimeError(
                "hvd.keras.DistributedOptimizer: the train step is XLA-compiled, which cannot "
                "run hvd's collectives; compile the model with jit_compile=False")
        grads = allreduce_gradients(list(grads), op=self._hvd_op,
                                    compression=self._hvd_compression,
                                    gradient_predivide_factor=self._hvd_predivide,
                                    name=self._hvd_name)
        return super().apply(grads, trainable_variables)


def DistributedOptimizer(optimizer, name=None, compression=Compression.none, op=Average,
                         gradient_predivide_factor=1.0):
    """A copy of optimizer (same class and config) whose updates use gradients
    averaged (op) over all ranks."""
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError("hvd.keras.DistributedOptimizer: expected a keras optimizer, got "
                        f"{type(optimizer).__name__}")
    cls = type(optimizer.__class__.__name__, (_DistributedOptimizerMixin, optimizer.__class__),
               {})
    opt = cls.from_config(optimizer.get_config())
    opt._hvd_op = _ops.check_op(op)
    opt._hvd_compression = compression
    opt._hvd_predivide = float(gradient_predivide_factor)
    opt._hvd_name = name or f"DistributedOptimizer.{optimizer.name}"
    return opt


def broadcast_global_variables(model, root_rank=0):
    """Root's model weights and optimizer state on every rank."""
    broadcast_variables(model.variables, root_rank, name="broadcast_global_variables.model")
    opt = getattr(model, "optimizer", None)
    if opt is not None and getattr(opt, "variables", None):
        broadcast_variables(opt.variables, root_rank,
                            name="broadcast_global_variables.optimizer")


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """At the start of training, sets every rank's weights and optimizer state
    to root_rank's, so all ranks start identical."""

    def __init__(self, root_rank=0):
        super().__init__()
        self.root_rank = root_rank
        self.broadcast_done = False

    def on_train_begin(self, logs=None):
        if self.broadcast_done:
            return
        opt = getattr(self.model, "optimizer", None)
        if opt is not None and not getattr(opt, "built", True):
            opt.build(self.model.trainable_variables)
        broadcast_global_variables(self.model, self.root_rank)
        self.broadcast_done = True


class MetricAverageCallback(keras.callbacks.Callback):
    """At each epoch end, replaces every metric in logs by its average over
    ranks. Put it before callbacks that read metrics (checkpoints, LR plateaus)."""

    def __init__(self):
        super().__init__()

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        keys = sorted(k for k, v in logs.items() if np.ndim(v) == 0 and
                      np.issubdtype(np.asarray(v).dtype, np.number))
        if not keys:
            return
        values = np.array([float(logs[k]) for k in keys], dtype=np.float64)
        avg = _hvd.allreduce(values, name=f"MetricAverageCallback.{epoch}", op=Average)
        for k, v in zip(keys, avg.tolist()):
            logs[k] = v


class LearningRateWarmupCallback(keras.callbacks.Callback):
    """Ramps the learning rate from initial_lr / size to initial_lr over the
    first warmup_epochs epochs, batch by batch (Goyal et al., "Accurate,
    Large Minibatch SGD"), so a large size-scaled rate does not diverge early.

    initial_lr: the target (already scaled by size); steps_per_epoch: defaults
    to what fit() reports."""

    def __init__(self, initial_lr, warmup_epochs=5, steps_per_epoch=None, verbose=0):
        super().__init__()
        self.initial_lr = float(initial_lr)
        self.warmup_epochs = warmup_epochs
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self.current_epoch = 0

    def _set_lr(self, lr):
        opt = self.model.optimizer
        lr_attr = opt.learning_rate
        if hasattr(lr_attr, "assign"):
            lr_attr.assign(lr)
        else:
            opt.learning_rate = lr

    def lr_at(self, epoch_float):
        if epoch_float >= self.warmup_epochs:
            return self.initial_lr
        n = size()
        return self.initial_lr / n * (epoch_float * (n - 1) / self.warmup_epochs + 1)

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        steps = self.steps_per_epoch or (self.params or {}).get("steps") or 1
        e = self.current_epoch + float(batch) / steps
        if self.current_epoch <= self.warmup_epochs:
            self._set_lr(self.lr_at(e))

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == self.warmup_epochs:
            self._set_lr(self.initial_lr)
            if self.verbose and rank() == 0:
                print(f"\nEpoch {epoch + 1}: finished learning-rate warmup to "
                      f"{self.initial_lr:g}.")
        if logs is not None:
            lr = self.model.optimizer.learning_rate
            logs["lr"] = float(lr.numpy() if hasattr(lr, "numpy") else lr)


# Horovod's hvd.elastic (KerasState, CommitStateCallback, ...): importable as
# hvd.keras.elastic, and every use raises NotImplementedError saying why.
elastic = _unavailable_module(__name__ + ".elastic")

callbacks = types.SimpleNamespace(
    BroadcastGlobalVariablesCallback=BroadcastGlobalVariablesCallback,
    MetricAverageCallback=MetricAverageCallback,
    LearningRateWarmupCallback=LearningRateWarmupCallback,
)
