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

In Keras' compiled train step hvd's collectives are TensorFlow kernels
(hvd.tensorflow), which XLA cannot compile: pass jit_compile=False to
compile() on a machine with a GPU (Keras already leaves XLA off on a
CPU-only one; DistributedOptimizer raises a clear error otherwise).

Do not use it in a process that has loaded PyTorch (hvd.torch): the two
frameworks cannot share a process (importing this module then warns; see
bindings/python/README.md).
"""

from __future__ import annotations

import sys as _sys
import types
import warnings as _warnings

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
from .tensorflow import (  # noqa: F401  (re-exported)
    Adasum,
    Average,
    Compression,
    HorovodInternalError,
    HvdError,
    InvalidArgumentError,
    Max,
    Min,
    MismatchError,
    ProcessSet,
    Product,
    Sum,
    add_process_set,
    allgather,
    allgather_object,
    allreduce_gradients,
    alltoall,
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
    global_process_set,
    grouped_allgather,
    grouped_allreduce,
    grouped_reducescatter,
    init,
    is_homogeneous,
    is_initialized,
    join,
    local_rank,
    local_rank_op,
    local_size,
    local_size_op,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    rank_op,
    remove_process_set,
    rocm_built,
    shutdown,
    size,
    size_op,
    start_timeline,
    stop_timeline,
    transport,
)
from . import tensorflow as _hvd_tf
from .tensorflow._keras_optimizer import (  # noqa: F401  (re-exported)
    DistributedOptimizer,
    PartialDistributedOptimizer,
    _DistributedOptimizerMixin,
)
from .tensorflow import broadcast_global_variables as _tf_broadcast_global_variables


# The public API, as `from hvd.keras import *` (and hvd.tensorflow.keras)
# exports it: the callbacks and elastic submodules and the lazily made
# SyncBatchNormalization aside.
__all__ = ["Adasum", "Average", "BestModelCheckpoint", "BroadcastGlobalVariablesCallback",
           "Compression", "DistributedOptimizer", "HorovodInternalError", "HvdError",
           "InvalidArgumentError", "LearningRateScheduleCallback", "LearningRateWarmupCallback",
           "Max", "MetricAverageCallback", "Min", "MismatchError", "PartialDistributedOptimizer",
           "ProcessSet", "Product", "Sum", "add_process_set", "allgather", "allgather_object",
           "allreduce", "allreduce_gradients", "alltoall", "barrier", "broadcast",
           "broadcast_global_variables", "broadcast_object", "broadcast_variables", "ccl_built",
           "cross_rank", "cross_size", "cuda_built", "ddl_built", "global_process_set",
           "gloo_built", "gloo_enabled", "grouped_allgather", "grouped_allreduce",
           "grouped_reducescatter", "init", "is_homogeneous", "is_initialized", "join",
           "load_model", "local_rank", "local_rank_op", "local_size", "local_size_op",
           "mpi_built", "mpi_enabled", "mpi_threads_supported", "nccl_built", "rank", "rank_op",
           "reducescatter", "remove_process_set", "rocm_built", "shutdown", "size", "size_op",
           "start_timeline", "stop_timeline", "transport"]


# ---------------------------------------------------------------------------
# Collectives on values, in Horovod's Keras argument order (the name second):
# hvd.tensorflow's, with the value made a tensor first.
# ---------------------------------------------------------------------------


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none, process_set=global_process_set):
    """Reduces a tensor-compatible value over ranks (default op Average),
    in Horovod's Keras argument order (hvd.tensorflow.allreduce takes
    average second). process_set: hvd's addition."""
    return _hvd_tf.allreduce(tf.convert_to_tensor(value), average=average,
                             compression=compression, op=op, prescale_factor=prescale_factor,
                             postscale_factor=postscale_factor, name=name,
                             process_set=process_set)


def reducescatter(value, name=None, op=Average, process_set=global_process_set):
    """Reduces a tensor-compatible value over ranks (default op Average); rank
    r keeps its block of rows. Horovod's Keras argument order (the name
    second). process_set: hvd's addition."""
    return _hvd_tf.reducescatter(tf.convert_to_tensor(value), op=op, name=name,
                                 process_set=process_set)


# ---------------------------------------------------------------------------
# Variables.
# ---------------------------------------------------------------------------


def _model_and_optimizer_variables(model, local_variables=()):
    skip = {id(v) for v in local_variables}
    model_vars = [v for v in model.variables if id(v) not in skip]
    opt = getattr(model, "optimizer", None)
    opt_vars = []
    if opt is not None and getattr(opt, "variables", None):
        opt_vars = [v for v in opt.variables if id(v) not in skip]
    return model_vars, opt_vars


def broadcast_global_variables(model_or_root_rank, root_rank=0,
                               process_set=global_process_set):
    """Root's values on every rank (of process_set; root_rank is one of its
    ranks, as hvd.rank() numbers it).

    broadcast_global_variables(model, root_rank=0): the model's weights and
    its optimizer's state (Keras 3 has no global session, so hvd takes the
    model). broadcast_global_variables(root_rank): Horovod's form, for
    TensorFlow 1 graphs (hvd.tensorflow.broadcast_global_variables)."""
    if isinstance(model_or_root_rank, int):
        return _tf_broadcast_global_variables(model_or_root_rank, process_set=process_set)
    model_vars, opt_vars = _model_and_optimizer_variables(model_or_root_rank)
    broadcast_variables(model_vars, root_rank, name="broadcast_global_variables.model",
                        process_set=process_set)
    if opt_vars:
        broadcast_variables(opt_vars, root_rank, name="broadcast_global_variables.optimizer",
                            process_set=process_set)
    return None


# ---------------------------------------------------------------------------
# Callbacks (also importable as hvd.keras.callbacks).
# ---------------------------------------------------------------------------


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Sets every rank's weights and optimizer state to root_rank's, so all
    ranks train the same model: at the start of training when the model is
    built by then (it has an Input), else -- Keras builds it while tracing
    the first step -- right after the first batch, as Horovod does.
    local_variables: variables to leave as they are on each rank. device is
    accepted and ignored. process_set (hvd's): broadcast among the set's
    ranks only, root_rank being one of them (as hvd.rank() numbers it), e.g.
    one model per set."""

    def __init__(self, root_rank=0, device="", local_variables=None,
                 process_set=global_process_set):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.local_variables = list(local_variables or [])
        self.process_set = process_set
        self.broadcast_done = False

    def _broadcast(self):
        opt = getattr(self.model, "optimizer", None)
        if opt is not None and not getattr(opt, "built", True):
            opt.build(self.model.trainable_variables)
        model_vars, opt_vars = _model_and_optimizer_variables(self.model, self.local_variables)
        broadcast_variables(model_vars, self.root_rank,
                            name="BroadcastGlobalVariablesCallback.model",
                            process_set=self.process_set)
        if opt_vars:
            broadcast_variables(opt_vars, self.root_rank,
                                name="BroadcastGlobalVariablesCallback.optimizer",
                                process_set=self.process_set)
        self.broadcast_done = True

    def on_train_begin(self, logs=None):
        if not self.broadcast_done and getattr(self.model, "built", False) and \
                self.model.variables:
            self._broadcast()

    def on_train_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            self._broadcast()


class MetricAverageCallback(keras.callbacks.Callback):
    """At each epoch end, replaces every metric in logs by its average over
    ranks (of process_set: hvd's addition, e.g. one model per set). Put it
    before callbacks that read metrics (checkpoints, LR plateaus). device is
    accepted and ignored."""

    def __init__(self, device="", process_set=global_process_set):
        super().__init__()
        self.device = device
        self.process_set = process_set

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        keys = sorted(k for k, v in logs.items() if np.ndim(v) == 0 and
                      np.issubdtype(np.asarray(v).dtype, np.number))
        if not keys:
            return
        values = np.array([float(logs[k]) for k in keys], dtype=np.float64)
        avg = _hvd.allreduce(values, name=f"MetricAverageCallback.{epoch}", op=Average,
                             process_set=self.process_set)
        for k, v in zip(keys, avg.tolist()):
            logs[k] = v


def _get_value(x):
    return float(keras.ops.convert_to_numpy(x))


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Sets the learning rate to initial_lr * multiplier(epoch) from
    start_epoch to end_epoch (exclusive; None: to the end). multiplier is a
    function of the epoch, or a number m meaning m ** (epoch - start_epoch).
    staircase=True: set once at the first batch of each epoch; False: at
    every batch, with the fractional epoch (steps_per_epoch defaults to what
    fit() reports).

    momentum_correction scales the momentum by new_lr / old_lr for the batch
    (Goyal et al.); it needs an optimizer whose momentum is a variable:
    Keras 3's momentum is a Python number fixed when the train step is
    traced, so there it is skipped, with a warning."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        if initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required")
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        self.restore_momentum = None
        self._momentum_warned = False
        if callable(multiplier):
            self.multiplier = multiplier
        else:
            self.multiplier = lambda epoch: multiplier ** (epoch - start_epoch)

    def _autodetect_steps_per_epoch(self):
        steps = (self.params or {}).get("steps")
        if steps:
            return steps
        raise ValueError("Could not autodetect the number of steps per epoch. Please specify the "
                         f"steps_per_epoch parameter to the {type(self).__name__}() (fit() "
                         "reports none for this input).")

    def _momentum_variable(self, opt):
        m = getattr(opt, "momentum", None)
        if m is None or hasattr(m, "assign"):
            return m
        if m and not self._momentum_warned:
            self._momentum_warned = True
            _warnings.warn(
                f"hvd.keras.{type(self).__name__}: momentum_correction is skipped: this "
                "optimizer's momentum is a Python number, which the compiled train step "
                "captured when it was traced (pass momentum_correction=False to silence this)",
                RuntimeWarning, stacklevel=2)
        return None

    def _adjust_learning_rate(self, epoch):
        opt = self.model.optimizer
        old_lr = _get_value(opt.learning_rate)
        new_lr = self.initial_lr * self.multiplier(epoch)
        opt.learning_rate = new_lr
        if self.momentum_correction:
            m = self._momentum_variable(opt)
            if m is not None and old_lr:
                self.restore_momentum = _get_value(m)
                m.assign(self.restore_momentum * new_lr / old_lr)

    def _restore_momentum_if_needed(self):
        if self.restore_momentum is not None:
            self.model.optimizer.momentum.assign(self.restore_momentum)
            self.restore_momentum = None

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        if (self.current_epoch < self.start_epoch or
                (self.end_epoch is not None and self.current_epoch >= self.end_epoch)):
            return
        if self.staircase and batch == 0:
            self._adjust_learning_rate(self.current_epoch)
        elif not self.staircase:
            self._adjust_learning_rate(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_batch_end(self, batch, logs=None):
        self._restore_momentum_if_needed()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = _get_value(self.model.optimizer.learning_rate)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramps the learning rate from initial_lr / size to initial_lr over the
    first warmup_epochs epochs, batch by batch (Goyal et al., "Accurate,
    Large Minibatch SGD"), so a large size-scaled rate does not diverge early.
    initial_lr is the target (already scaled by size); after the warmup the
    rate stays there. process_set (hvd's): the ramp starts from
    initial_lr / the set's size, for a model trained within a set."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0, process_set=global_process_set):
        def multiplier(epoch):
            # One step ahead, so the last batch of the warmup reaches initial_lr.
            epoch += 1.0 / self.steps_per_epoch
            n = _hvd._np._target(self.process_set)[0].size()
            return 1.0 / n * (epoch * (n - 1) / warmup_epochs + 1)

        self.process_set = process_set

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.warmup_epochs = warmup_epochs
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and rank() == 0:
            new_lr = _get_value(self.model.optimizer.learning_rate)
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to {new_lr:g}.")


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """Horovod's BestModelCheckpoint: keras' ModelCheckpoint with
    save_best_only=True and the full model saved, on rank 0 only (the other
    ranks do nothing). As in Horovod, filepath may be left out and set later
    (``cb.filepath = "best.keras"``, before fit); hvd also takes it as a
    keyword."""

    def __init__(self, monitor="val_loss", verbose=0, mode="auto", save_freq="epoch",
                 filepath=None):
        # keras checks the file name at construction: a stand-in until filepath is set
        super().__init__(filepath="best.keras" if filepath is None else filepath,
                         monitor=monitor, verbose=verbose, save_best_only=True,
                         save_weights_only=False, mode=mode, save_freq=save_freq)
        if filepath is None:
            self.filepath = None

    def on_train_begin(self, logs=None):
        if self.filepath is None:
            raise ValueError("hvd.keras.callbacks.BestModelCheckpoint: set its filepath "
                             "(cb.filepath = 'best.keras') before training")
        super().on_train_begin(logs)

    def on_train_batch_end(self, batch, logs=None):
        if rank() == 0:
            super().on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if rank() == 0:
            super().on_epoch_end(epoch, logs)


# ---------------------------------------------------------------------------
# load_model.
# ---------------------------------------------------------------------------


def _loading_class(base, compression):
    """A stand-in for optimizer class base while a model loads: building it
    from a config builds hvd's DistributedOptimizer of base instead."""

    def from_config(cls, config, custom_objects=None):
        return DistributedOptimizer(base.from_config(config), compression=compression)

    return type(base.__name__, (base,), {"from_config": classmethod(from_config),
                                         "__module__": __name__})


def _keras_optimizer_classes():
    out = {}
    for attr in dir(keras.optimizers):
        obj = getattr(keras.optimizers, attr)
        if (isinstance(obj, type) and issubclass(obj, keras.optimizers.Optimizer)
                and obj is not keras.optimizers.Optimizer):
            out[obj.__name__] = obj
    return out


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none, legacy_opts=False):
    """Loads a saved Keras model (keras.models.load_model) whose optimizer
    becomes hvd's DistributedOptimizer (compression as given), with the
    saved optimizer state, as Horovod's load_model does. Works for a model
    saved with a Keras optimizer and for one saved while training with hvd's
    DistributedOptimizer. custom_optimizers: optimizer classes of your own
    that the file uses; custom_objects: passed to keras. legacy_opts is
    accepted for Horovod's signature (Keras 3 has no legacy optimizers)."""
    objects = {name: _loading_class(cls, compression)
               for name, cls in _keras_optimizer_classes().items()}
    for cls in custom_optimizers or ():
        objects[cls.__name__] = _loading_class(cls, compression)
    objects.update(custom_objects or {})
    model = keras.models.load_model(filepath, custom_objects=objects)
    opt = getattr(model, "optimizer", None)
    if opt is None or isinstance(opt, _DistributedOptimizerMixin):
        return model
    # Saved with a Keras optimizer (keras resolves its own classes before
    # custom_objects): wrap it now and carry its state over.
    dist = DistributedOptimizer(opt, compression=compression)
    if opt.built:
        dist.build(model.trainable_variables)
        old, new = list(opt.variables), list(dist.variables)
        if len(old) != len(new) or any(tuple(a.shape) != tuple(b.shape)
                                       for a, b in zip(old, new)):
            raise ValueError("hvd.keras.load_model: the loaded optimizer's state does not "
                             "match its distributed copy's")
        for a, b in zip(old, new):
            b.assign(a)
    model.optimizer = dist
    return model


# Horovod's hvd.keras.elastic (KerasState, CommitStateCallback, ...), also
# importable as a module (hvd.tensorflow.keras.elastic re-exports it).
from . import _keras_elastic as elastic  # noqa: E402

_sys.modules[__name__ + ".elastic"] = elastic


def _callbacks_module():
    """hvd.keras.callbacks, a module so that `from hvd.keras.callbacks import
    BroadcastGlobalVariablesCallback` works as Horovod's import does."""
    name = __name__ + ".callbacks"
    mod = _sys.modules.get(name)
    if mod is None:
        mod = types.ModuleType(name, "hvd's Keras callbacks (Horovod's names).")
        _sys.modules[name] = mod
    for cls in (BroadcastGlobalVariablesCallback, MetricAverageCallback,
                LearningRateScheduleCallback, LearningRateWarmupCallback, BestModelCheckpoint):
        setattr(mod, cls.__name__, cls)
    return mod


callbacks = _callbacks_module()


def __getattr__(name):
    if name == "SyncBatchNormalization":
        from .tensorflow._sync_batch_norm import SyncBatchNormalization
        return SyncBatchNormalization
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
