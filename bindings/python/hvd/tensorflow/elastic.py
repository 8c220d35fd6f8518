"""hvd.tensorflow.elastic and hvd.keras.elastic: Horovod's elastic training
for TensorFlow 2 (eager) and Keras (docs/elastic.md).

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)      # hvd.keras
    state = hvd.elastic.TensorFlowKerasState(model, optimizer)   # hvd.tensorflow

    @hvd.elastic.run
    def train(state):
        model.fit(..., callbacks=[hvd.elastic.CommitStateCallback(state),
                                  hvd.elastic.UpdateBatchStateCallback(state),
                                  hvd.elastic.UpdateEpochStateCallback(state)],
                  initial_epoch=state.epoch)

The states keep copies of the model's and optimizer's variables at each commit
(numpy copies), assign them back after a failure, and broadcast rank 0's after
a reset (broadcast_variables). run() also recognizes a lost peer in the errors
of hvd's graph kernels (tf.function, Keras' compiled step), which TensorFlow
raises as its own error classes carrying [HVD_ERR_MEMBERSHIP_CHANGED].

TensorFlow 1 graphs (tf.compat.v1): TensorFlowState(variables, session=sess)
reads the variables with session.run at each commit, assigns them back
through assign ops fed by placeholders (built once, with the state: make it
before the graph is finalized) and syncs them with a broadcast op run in the
session. The Keras states are eager only.

A graph traced before a reset keeps any value it read at trace time
(hvd.size() in Python code inside a tf.function): compile again after a reset
if training depends on it.
"""

from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf

from .. import _c_api as C
from .. import elastic as _elastic
from ._functions import broadcast_variables as _broadcast_variables
from ..elastic import (  # noqa: F401  (Horovod's names in the frameworks' elastic modules)
    HorovodInternalError,
    HostsUpdatedInterrupt,
    MembershipChangedError,
    ObjectState,
    State,
    membership,
    run_fn,
)

_CHANGED = "[HVD_ERR_MEMBERSHIP_CHANGED]"


def _translated(func):
    """func, with TensorFlow's errors for a changed membership (raised by
    hvd's graph kernels, or through tf.py_function) raised as
    MembershipChangedError."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except tf.errors.OpError as e:
            if isinstance(e, HorovodInternalError) or _CHANGED not in str(e.message):
                raise
            raise MembershipChangedError(C.HVD_ERR_MEMBERSHIP_CHANGED, e.message) from e

    return wrapper


def run(func):
    """Horovod's hvd.tensorflow.elastic.run / hvd.keras.elastic.run: as
    hvd.elastic.run, also for the errors of hvd's TensorFlow kernels."""
    return run_fn(_translated(func), _elastic._reset_context)


def _optimizer_variables(optimizer):
    if optimizer is None:
        return []
    v = getattr(optimizer, "variables", None)
    if callable(v):  # tf.keras optimizers (v2): a method
        v = v()
    return list(v or [])


def _build_optimizer(optimizer, model):
    """Keras 3 makes an optimizer's variables at its first step: build them
    now, so that every worker (a new one too) has the same list to save and
    broadcast."""
    if optimizer is None or getattr(optimizer, "built", True) or not model.trainable_variables:
        return
    optimizer.build(model.trainable_variables)


class _Variables:
    """Saved copies of a list of variables (numpy), assigned back on restore."""

    def __init__(self, name):
        self.name = name
        self._saved = None

    def save(self, variables):
        self._saved = [np.array(v.numpy(), copy=True) for v in variables]

    def restore(self, variables):
        if self._saved is None:
            return
        if len(self._saved) != len(variables):
            raise RuntimeError(
                f"hvd elastic: {len(variables)} {self.name} variables now, {len(self._saved)} "
                "when the state was committed; make every variable (build the model and its "
                "optimizer) before making the state")
        for v, value in zip(variables, self._saved):
            v.assign(value)

    def sync(self, variables):
        _broadcast_variables(variables, root_rank=0, name=f"elastic.{self.name}")


def _require_eager(what):
    if not tf.executing_eagerly():
        raise NotImplementedError(
            f"hvd: {what} supports eager TensorFlow 2 (the default) only, not TensorFlow 1 "
            "graphs (tf.compat.v1)")


class TensorFlowKerasState(ObjectState):
    """Horovod's TensorFlowKerasState: a Keras model (and its optimizer,
    default model.optimizer) plus any keyword attributes. commit() keeps a
    copy of the model's and optimizer's variables, restore() assigns it back,
    sync() broadcasts rank 0's. backend: accepted for Horovod's signature
    (Keras' backend is not needed in eager mode)."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        _require_eager(type(self).__name__)
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer",
                                                                          None)
        self.backend = backend
        self._model_copy = _Variables("model")
        self._optimizer_copy = _Variables("optimizer")
        _build_optimizer(self.optimizer, self.model)
        self._save_model()
        super().__init__(**kwargs)

    def _save_model(self):
        self._model_copy.save(self.model.variables)
        self._optimizer_copy.save(_optimizer_variables(self.optimizer))

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        self._model_copy.restore(self.model.variables)
        self._optimizer_copy.restore(_optimizer_variables(self.optimizer))
        super().restore()

    def sync(self):
        _build_optimizer(self.optimizer, self.model)
        self._model_copy.sync(self.model.variables)
        opt_vars = _optimizer_variables(self.optimizer)
        if opt_vars:
            self._optimizer_copy.sync(opt_vars)
        self._save_model()
        super().sync()


class _SessionVariables:
    """Saved copies of a TensorFlow 1 graph's variables, read and written
    through a Session. Every op it runs is built here, once: an assign op per
    variable fed from a placeholder (restore) and the broadcast of the
    variables from rank 0 (sync), so restoring or syncing many times adds
    nothing to the graph."""

    def __init__(self, variables, session, name):
        self.session = session
        graph = session.graph
        with graph.as_default():
            if variables is None:
                variables = tf.compat.v1.global_variables()
            self.variables = list(variables)
            for v in self.variables:
                if getattr(v, "graph", graph) is not graph:
                    raise ValueError(f"hvd.tensorflow.elastic.{name}: variable {v.name} is "
                                     "not in the session's graph")
            if graph.finalized:
                raise RuntimeError(f"hvd.tensorflow.elastic.{name}: the session's graph is "
                                   "finalized (e.g. by MonitoredTrainingSession); make the "
                                   "state before it is, it adds its assign and broadcast ops")
            with tf.name_scope("hvd_elastic_state"):
                self._feeds = [tf.compat.v1.placeholder(v.dtype.base_dtype, shape=v.shape)
                               for v in self.variables]
                self._assign = tf.group(*[v.assign(p) for v, p in
                                          zip(self.variables, self._feeds)])
                self._bcast = _broadcast_variables(self.variables, root_rank=0,
                                                   name="elastic.variables")
        self._saved = None

    def save(self):
        values = self.session.run(self.variables) if self.variables else []
        self._saved = [np.array(x, copy=True) for x in values]

    def restore(self):
        if self._saved is None or not self.variables:
            return
        self.session.run(self._assign, feed_dict=dict(zip(self._feeds, self._saved)))

    def sync(self):
        if self.variables:
            self.session.run(self._bcast)
        self.save()


class TensorFlowState(ObjectState):
    """Horovod's TensorFlowState: a list of variables plus any keyword
    attributes. Eagerly (TensorFlow 2) they are saved, restored and synced as
    TensorFlowKerasState does. With session= (a tf.compat.v1 Session, graph
    mode) the state works through the session: commit() reads the variables'
    values (session.run), restore() assigns them back (assign ops fed from
    placeholders, built once here), sync() runs a broadcast of rank 0's
    values; variables defaults to the graph's global variables. Make it once
    the variables are initialized and before the graph is finalized."""

    def __init__(self, variables=None, session=None, **kwargs):
        self.session = session
        if session is not None:
            if not hasattr(session, "run") or not hasattr(session, "graph"):
                raise TypeError("hvd.tensorflow.elastic.TensorFlowState: session must be a "
                                f"tf.compat.v1.Session, got {type(session).__name__}")
            self._copy = _SessionVariables(variables, session, "TensorFlowState")
            self.variables = self._copy.variables
            self._copy.save()
            super().__init__(**kwargs)
            return
        if not tf.executing_eagerly():
            raise ValueError("hvd.tensorflow.elastic.TensorFlowState: in a TensorFlow 1 graph "
                             "pass the session that runs it (session=sess)")
        if variables is None:
            raise ValueError("hvd.tensorflow.elastic.TensorFlowState: pass variables= (eager "
                             "TensorFlow has no global variable collection)")
        self.variables = list(variables)
        self._copy = _Variables("variables")
        self._copy.save(self.variables)
        super().__init__(**kwargs)

    def save(self):
        if self.session is not None:
            self._copy.save()
        else:
            self._copy.save(self.variables)
        super().save()

    def restore(self):
        if self.session is not None:
            self._copy.restore()
        else:
            self._copy.restore(self.variables)
        super().restore()

    def sync(self):
        if self.session is not None:
            self._copy.sync()
        else:
            self._copy.sync(self.variables)
            self._copy.save(self.variables)
        super().sync()


__all__ = ["run", "run_fn", "State", "ObjectState", "TensorFlowKerasState", "TensorFlowState",
           "HostsUpdatedInterrupt", "HorovodInternalError", "MembershipChangedError",
           "membership"]
