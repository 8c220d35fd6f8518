"""How hvd.tensorflow's ops run: eagerly through the numpy API, in a graph
as hvd's TensorFlow kernels (or a py_function where they cannot be built),
with hvd's errors as TensorFlow's types, and the process-set ids the kernels
take."""

from __future__ import annotations

import sys as _sys
import warnings as _warnings

import numpy as np
import tensorflow as tf

import hvd as _hvd
from .. import _c_api as _C
from .. import HvdError
from .._api import DEFAULT as _DEFAULT


# ---------------------------------------------------------------------------
# Errors as TensorFlow's types. An op that fails because the ranks disagree
# raises an exception that is both hvd.MismatchError and
# tf.errors.FailedPreconditionError; bad arguments the library refuses, both
# hvd.InvalidArgumentError (a ValueError) and tf.errors.InvalidArgumentError.
# That holds where hvd.tensorflow's op runs eagerly. In a graph (tf.function,
# Keras' compiled train step, Session.run) the op is hvd's TensorFlow kernel,
# which fails with TensorFlow's own error for the status (a mismatch
# tf.errors.FailedPreconditionError, bad arguments
# tf.errors.InvalidArgumentError, a broken context tf.errors.UnavailableError),
# carrying hvd's message; TensorFlow raises those classes themselves.
# ---------------------------------------------------------------------------


def _tf_error_class(hvd_cls, tf_cls, code):
    class _Mapped(hvd_cls, tf_cls):
        # Shadows OpError.message, a read-only property: HvdError sets it.
        message = None

        def __init__(self, status, message=""):
            hvd_cls.__init__(self, status, message)
            # OpError's fields (its __init__ would reset args).
            self._node_def = None
            self._op = None
            self._message = self.message
            self._error_code = code
            self._experimental_payloads = {}

        __str__ = RuntimeError.__str__

        def __reduce__(self):
            return type(self), (self.status, self.message)

    _Mapped.__name__ = _Mapped.__qualname__ = hvd_cls.__name__
    _Mapped.__module__ = __name__
    _Mapped.__doc__ = (f"hvd.{hvd_cls.__name__} that is also tf.errors.{tf_cls.__name__} "
                       "(raised by hvd.tensorflow's ops)")
    return _Mapped


MismatchError = _tf_error_class(_C.MismatchError, tf.errors.FailedPreconditionError,
                                tf.errors.FAILED_PRECONDITION)
InvalidArgumentError = _tf_error_class(_C.InvalidArgumentError, tf.errors.InvalidArgumentError,
                                       tf.errors.INVALID_ARGUMENT)
_TF_ERRORS = ((_C.MismatchError, MismatchError), (_C.InvalidArgumentError, InvalidArgumentError))


def _as_tf_error(e):
    """e as its TensorFlow-typed class, or None when it has none (or is one)."""
    if isinstance(e, tf.errors.OpError):
        return None
    for hvd_cls, mapped in _TF_ERRORS:
        if isinstance(e, hvd_cls):
            return mapped(e.status, e.message)
    return None


def _executing_eagerly():
    """Whether TensorFlow runs eagerly here (tf.executing_eagerly()); under
    Horovod's private name, which scripts and Horovod's tests call as
    hvd._executing_eagerly()."""
    return tf.executing_eagerly()


def _eager(fn, *args):
    """fn(*args), with hvd's errors raised as their TensorFlow-typed classes."""
    try:
        return fn(*args)
    except HvdError as e:
        mapped = _as_tf_error(e)
        if mapped is None:
            raise
        raise mapped.with_traceback(e.__traceback__) from None


def _target(process_set):
    """(context, ProcessSet or None) an op on process_set runs on; raises
    ValueError for a set that is not registered or lacks this rank."""
    return _hvd._np._target(process_set)


def _name(op, name, process_set=None):
    # Resolved once, in Python (at trace time inside tf.function): the same
    # name on every rank and at every execution of the traced graph. A
    # process set numbers its unnamed ops itself.
    return _target(process_set)[0]._namer(op, name)


def _set_id(process_set):
    """The kernels' process_set_id attr for process_set (0: the whole job),
    telling the kernels the set's context."""
    ctx, ps = _target(process_set)
    if ps is None:
        return 0
    from .. import _tf_kernels
    _tf_kernels.set_context(ps.process_set_id, ctx._ptr)
    return ps.process_set_id


def _forget_set(process_set_id):
    # Before a process set's context is destroyed: graph ops on it then fail
    # (FailedPreconditionError) instead of reaching a destroyed context.
    kernels = _sys.modules.get("hvd._tf_kernels")
    if kernels is not None:
        kernels.set_context(process_set_id, None)


if _forget_set not in _DEFAULT._registry.on_remove:
    _DEFAULT._registry.on_remove.append(_forget_set)


def _to_numpy(t):
    if isinstance(t, np.ndarray):
        return t
    if isinstance(t, tf.IndexedSlices):
        t = tf.convert_to_tensor(t)
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t)


# ---------------------------------------------------------------------------
# Graph mode. In a graph (tf.function, Keras' compiled train step,
# tf.compat.v1 Session.run) every op is one of hvd's asynchronous TensorFlow
# kernels (_tf_kernels.cc, built on first use by _tf_kernels.py): a kernel
# submits its collective and returns, and completes when the collective does,
# so no TensorFlow thread waits for another rank and a graph with any number
# of independent hvd ops runs on any inter-op thread pool, whatever order
# each rank's executor picks (the argument is written out in the .cc file).
#
# Without the kernels (HVD_TF_KERNELS=0, or no C++ compiler) the op runs in a
# tf.py_function that blocks its thread until the collective completes:
# correct while a run has no more independent hvd ops than TensorFlow has
# inter-op threads, and able to deadlock beyond that.
# ---------------------------------------------------------------------------

_fallback_warned = []

# AutoGraph converts the Python functions a tf.function calls, recursively;
# hvd's are plain graph-building code (and the kernel loader runs a
# compiler), so they are marked to be called as they are.
_no_autograph = tf.autograph.experimental.do_not_convert


@_no_autograph
def _kernels():
    """hvd's kernel module for graph-mode ops, or None (tf.py_function)."""
    from .. import _tf_kernels
    mod = _tf_kernels.load()
    if mod is None and not _fallback_warned and not _tf_kernels.disabled():
        _fallback_warned.append(True)
        _warnings.warn(
            "hvd.tensorflow: could not build hvd's TensorFlow kernels, so graph-mode ops "
            "(tf.function, Keras fit, Session.run) run in tf.py_function, which blocks a "
            "TensorFlow thread per pending op: a graph that runs more independent hvd ops at "
            "once than TensorFlow has inter-op threads can deadlock. Cause: "
            f"{_tf_kernels.error()}", RuntimeWarning, stacklevel=3)
    return mod


def _scale(x):
    return tf.constant(float(x), dtype=tf.float64)


def _run(fn, inputs, touts, shapes, kernel=None):
    """Runs a collective on TensorFlow tensors.

    fn(list of numpy arrays) -> list of numpy arrays is the collective through
    the numpy API: run directly when executing eagerly, and in a
    tf.py_function in a graph without hvd's kernels. kernel(module) -> list
    of tensors builds the graph-mode op from hvd's kernels."""
    if tf.executing_eagerly():
        outs = _eager(fn, [_to_numpy(x) for x in inputs])
        return [tf.convert_to_tensor(o, dtype=d) for o, d in zip(outs, touts)]
    k = _kernels() if kernel is not None else None
    if k is not None:
        outs = kernel(k)
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        outs = list(outs)
    else:
        def body(*args):
            return fn([a.numpy() for a in args])

        outs = tf.py_function(func=body, inp=list(inputs), Tout=list(touts))
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        outs = list(outs)
    for o, s in zip(outs, shapes):
        if s is not None:
            o.set_shape(s)
    return outs
