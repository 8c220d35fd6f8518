"""Broadcasting variables and Python objects (Horovod's
horovod.tensorflow.functions), and the TensorFlow 1 global-variable
broadcasts (broadcast_global_variables, BroadcastGlobalVariablesHook)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import hvd as _hvd
from .. import global_process_set
from ._collectives import broadcast
from ._execution import _eager, _name, _no_autograph


# ---------------------------------------------------------------------------
# Variables.
# ---------------------------------------------------------------------------


@_no_autograph
def broadcast_variables(variables, root_rank=0, name=None, inplace=False,
                        process_set=global_process_set):
    """Assigns root_rank's value to every variable (list order must match
    across ranks). Eagerly it returns None once done; in a graph
    (tf.function, tf.compat.v1) it returns the op that does it, and inside a
    tf.function the assignments take effect as the function runs, as in
    Horovod's "broadcast at the first step" idiom. inplace is accepted for
    Horovod's signature (hvd always assigns). process_set: among its ranks
    only (root_rank is one of them, as hvd.rank() numbers it)."""
    variables = list(variables)
    ps = process_set
    base = _name("broadcast_variables", name, ps)
    if tf.executing_eagerly():
        if not variables:
            return None
        arrays = [np.array(v.numpy(), order="C", copy=True) for v in variables]
        handles = _eager(lambda: [_hvd.broadcast_async_(a, root_rank, name=f"{base}.{i}",
                                                        process_set=ps)
                                  for i, a in enumerate(arrays)])
        for h in handles:
            _eager(h.wait)
        for v, a in zip(variables, arrays):
            v.assign(a)
        return None
    if not variables:
        return tf.no_op()
    assigns = []
    for i, v in enumerate(variables):
        value = broadcast(v, root_rank, name=f"{base}.{i}", process_set=ps)
        assigns.append(v.assign(value))
    return tf.group(*assigns)


@_no_autograph
def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Horovod's in-place broadcast: assigns root_rank's values to the
    variables (a list; order and shapes must match across ranks) and returns
    their updated values, a list of tensors. Eagerly the assignment is done on
    return; in a graph (tf.function, tf.compat.v1) the returned tensors
    depend on it. process_set: among its ranks only (root_rank is one of
    them, as hvd.rank() numbers it)."""
    variables = list(variables)
    done = broadcast_variables(variables, root_rank,
                               name=_name("broadcast_", name, process_set),
                               process_set=process_set)
    if done is None:
        return [v.read_value() for v in variables]
    with tf.control_dependencies([done]):
        return [v.read_value() for v in variables]


# ---------------------------------------------------------------------------
# Python objects. Horovod's TensorFlow signatures take the session that runs a
# TensorFlow 1 graph; hvd moves objects through the library directly, eagerly
# or in a graph program alike, so session is accepted and not needed.
# ---------------------------------------------------------------------------


def broadcast_object(obj, root_rank=0, session=None, name=None,
                     process_set=global_process_set):
    """root_rank's picklable obj, on every rank (of process_set; root_rank is
    one of its ranks, as hvd.rank() numbers it). session: Horovod's (for
    TensorFlow 1 graphs); hvd does not need it."""
    return _hvd.broadcast_object(obj, root_rank, name=name, process_set=process_set)


def broadcast_object_fn(root_rank=0, session=None, name=None,
                        process_set=global_process_set):
    """Horovod's: a function obj -> broadcast_object(obj, root_rank, ...),
    to call once per object (every rank calls it alike)."""
    def _fn(obj):
        return broadcast_object(obj, root_rank, session, name=name, process_set=process_set)
    return _fn


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Every rank's picklable obj (of process_set), as a list in rank order.
    session: Horovod's (for TensorFlow 1 graphs); hvd does not need it."""
    return _hvd.allgather_object(obj, name=name, process_set=process_set)


def _global_variables():
    return tf.compat.v1.global_variables()


@_no_autograph
def broadcast_global_variables(root_rank, process_set=global_process_set):
    """The op that assigns root_rank's value to every global variable
    (tf.compat.v1.global_variables()) -- TensorFlow 1 graphs. Eagerly it
    raises RuntimeError, as Horovod's does: use broadcast_variables.
    process_set: among its ranks only (root_rank is one of them, as
    hvd.rank() numbers it)."""
    if tf.executing_eagerly():
        raise RuntimeError(
            "hvd.broadcast_global_variables() does not support eager execution. Please use "
            "`hvd.broadcast_variables(<model/optimizer variables>)` instead.")
    return broadcast_variables(_global_variables(), root_rank,
                               name=_name("broadcast_global_variables", None, process_set),
                               process_set=process_set)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """SessionRunHook that broadcasts every global variable from root_rank
    once the session is created (tf.compat.v1.train.MonitoredTrainingSession).
    device is accepted and ignored; process_set: among its ranks only."""

    def __init__(self, root_rank, device="", process_set=global_process_set):
        super().__init__()
        self.root_rank = root_rank
        self.bcast_op = None
        self.device = device
        self.process_set = process_set

    def begin(self):
        if self.bcast_op is None or self.bcast_op.graph != tf.compat.v1.get_default_graph():
            self.bcast_op = broadcast_global_variables(self.root_rank, self.process_set)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)
