"""hvd.tensorflow: the hvd collectives on TensorFlow 2 tensors, and
DistributedGradientTape.

    import hvd.tensorflow as hvd
    hvd.init()
    with tf.GradientTape() as tape:
        loss = ...
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)

Tensors travel through numpy: eagerly, ``tensor.numpy()`` goes to the numpy
API and the result comes back with ``tf.convert_to_tensor``; inside a
``tf.function`` the same code runs in a ``tf.py_function`` (so an XLA-compiled
function cannot contain hvd ops: compile Keras models with jit_compile=False).

Do not use it in a process that has loaded PyTorch (hvd.torch): the two
frameworks cannot share a process (importing this module, or hvd.keras, then
warns; see bindings/python/README.md).
"""

from __future__ import annotations

import sys as _sys
import warnings as _warnings


def _warn_if_torch_loaded():
    """A RuntimeWarning when torch is already loaded, attributed to the line
    that imported hvd.tensorflow or hvd.keras (hvd's own frames skipped;
    warnings itself skips importlib's)."""
    if "torch" not in _sys.modules:
        return
    level, imported, f = 1, "hvd.tensorflow", _sys._getframe(1)
    while f is not None:
        code = f.f_code.co_filename
        if "importlib" in code and "_bootstrap" in code:
            f = f.f_back
            continue
        level += 1
        mod = f.f_globals.get("__name__", "")
        if mod != "hvd" and not mod.startswith("hvd."):
            break
        imported = mod
        f = f.f_back
    _warnings.warn(
        f"{imported} was imported into a process that has already loaded PyTorch (torch). "
        "TensorFlow and PyTorch cannot share a process: both bundle LLVM, and with some pairs of "
        "wheels (tensorflow-cpu 2.21 with torch 2.15 / triton 3.9) the process aborts with "
        "\"LLVM ERROR: Option '...' registered more than once!\" as soon as torch loads triton "
        "(at the first optimizer step, for example). Use one framework per process.",
        RuntimeWarning, stacklevel=level)


_warn_if_torch_loaded()

try:
    import tensorflow as tf
except ImportError as _e:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "hvd.tensorflow needs TensorFlow 2, which is not installed (pip install tensorflow-cpu); "
        "the numpy API in `import hvd` works without it") from _e

import numpy as np

import hvd as _hvd
from . import _c_api as _C
from . import _ops
from ._api import DEFAULT as _DEFAULT
from ._api import unavailable_module as _unavailable_module
from . import (  # noqa: F401  (re-exported: `import hvd.tensorflow as hvd` is a drop-in)
    Average,
    HorovodInternalError,
    HvdError,
    Max,
    Min,
    Product,
    Sum,
    allgather_object,
    barrier,
    broadcast_object,
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
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
    rocm_built,
    shutdown,
    size,
    transport,
)


# ---------------------------------------------------------------------------
# Errors as TensorFlow's types. An op that fails because the ranks disagree
# raises an exception that is both hvd.MismatchError and
# tf.errors.FailedPreconditionError; bad arguments the library refuses, both
# hvd.InvalidArgumentError (a ValueError) and tf.errors.InvalidArgumentError.
# That holds where hvd.tensorflow's op runs eagerly. Inside a tf.function
# (and Keras' compiled train step) the op runs in a tf.py_function, and
# TensorFlow turns what it raises into an error by the Python type alone:
# bad arguments still come out as tf.errors.InvalidArgumentError, a
# mismatch as tf.errors.UnknownError carrying hvd's message.
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


def _eager(fn, *args):
    """fn(*args), with hvd's errors raised as their TensorFlow-typed classes."""
    try:
        return fn(*args)
    except HvdError as e:
        mapped = _as_tf_error(e)
        if mapped is None:
            raise
        raise mapped.with_traceback(e.__traceback__) from None


def _name(op, name):
    # Resolved once, in Python (at trace time inside tf.function): the same
    # name on every rank and at every execution of the traced graph.
    return _DEFAULT._namer(op, name)


def _to_numpy(t):
    if isinstance(t, np.ndarray):
        return t
    if isinstance(t, tf.IndexedSlices):
        t = tf.convert_to_tensor(t)
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t)


def _run(fn, inputs, touts, shapes):
    """Runs fn(list of numpy arrays) -> list of numpy arrays, eagerly or as a
    tf.py_function inside a graph."""
    if tf.executing_eagerly():
        outs = _eager(fn, [_to_numpy(x) for x in inputs])
        return [tf.convert_to_tensor(o, dtype=d) for o, d in zip(outs, touts)]

    def body(*args):
        return fn([a.numpy() for a in args])

    outs = tf.py_function(func=body, inp=list(inputs), Tout=list(touts))
    if not isinstance(outs, (list, tuple)):
        outs = [outs]
    for o, s in zip(outs, shapes):
        if s is not None:
            o.set_shape(s)
    return list(outs)


def _op_of(op, average):
    if op is not None:
        return op
    if average is None:
        return Average
    return Average if average else Sum


def _allreduce_raw(tensor, op, name, prescale, postscale):
    tensor = tf.convert_to_tensor(tensor)
    return _run(lambda a: [_hvd.allreduce(a[0], name=name, op=op, prescale_factor=prescale,
                                          postscale_factor=postscale)],
                [tensor], [tensor.dtype], [tensor.shape])[0]


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0):
    """Reduces over all ranks (default op Average); differentiable for Sum and Average."""
    op = _ops.check_op(_op_of(op, average))
    name = _name("allreduce", name)
    if isinstance(tensor, tf.IndexedSlices):
        tensor = tf.convert_to_tensor(tensor)
    if op not in (Sum, Average):
        return _allreduce_raw(tensor, op, name, prescale_factor, postscale_factor)

    @tf.custom_gradient
    def _fn(x):
        y = _allreduce_raw(x, op, name, prescale_factor, postscale_factor)

        def grad(dy):
            return _allreduce_raw(dy, op, name + ".grad", prescale_factor, postscale_factor)

        return y, grad

    return _fn(tf.convert_to_tensor(tensor))


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0):
    """Allreduces a list of tensors as one fused unit (all of one dtype)."""
    op = _ops.check_op(_op_of(op, average))
    name = _name("grouped_allreduce", name)
    ts = [tf.convert_to_tensor(t) for t in tensors]
    return _run(lambda a: _hvd.grouped_allreduce(a, name=name, op=op,
                                                 prescale_factor=prescale_factor,
                                                 postscale_factor=postscale_factor),
                ts, [t.dtype for t in ts], [t.shape for t in ts])


def allgather(tensor, name=None):
    name = _name("allgather", name)
    t = tf.convert_to_tensor(tensor)
    shape = tf.TensorShape([None]).concatenate(t.shape[1:]) if t.shape.rank else None
    return _run(lambda a: [_hvd.allgather(a[0], name=name)], [t], [t.dtype], [shape])[0]


def broadcast(tensor, root_rank, name=None):
    name = _name("broadcast", name)
    t = tf.convert_to_tensor(tensor)
    return _run(lambda a: [_hvd.broadcast(a[0], root_rank, name=name)], [t], [t.dtype],
                [t.shape])[0]


def alltoall(tensor, splits=None, name=None):
    """Like hvd.alltoall; with splits given returns (tensor, received_splits)."""
    name = _name("alltoall", name)
    t = tf.convert_to_tensor(tensor)
    shape = tf.TensorShape([None]).concatenate(t.shape[1:]) if t.shape.rank else None
    if splits is None:
        return _run(lambda a: [_hvd.alltoall(a[0], name=name)], [t], [t.dtype], [shape])[0]
    s = tf.cast(tf.convert_to_tensor(splits), tf.int64)

    def fn(a):
        out, recv = _hvd.alltoall(a[0], splits=a[1], name=name)
        return [out, recv]

    out, recv = _run(fn, [t, s], [t.dtype, tf.int64], [shape, tf.TensorShape([None])])
    return out, recv


def reducescatter(tensor, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    op = _ops.check_op(_op_of(op, None))
    name = _name("reducescatter", name)
    t = tf.convert_to_tensor(tensor)
    shape = tf.TensorShape([None]).concatenate(t.shape[1:]) if t.shape.rank else None
    return _run(lambda a: [_hvd.reducescatter(a[0], name=name, op=op,
                                              prescale_factor=prescale_factor,
                                              postscale_factor=postscale_factor)],
                [t], [t.dtype], [shape])[0]


def broadcast_variables(variables, root_rank=0, name="broadcast_variables"):
    """Assigns root's value to every variable (in list order, which must match across ranks)."""
    variables = list(variables)
    if not variables:
        return
    arrays = [np.array(v.numpy(), order="C", copy=True) for v in variables]
    handles = _eager(lambda: [_hvd.broadcast_async_(a, root_rank, name=f"{name}.{i}")
                              for i, a in enumerate(arrays)])
    for v, a, h in zip(variables, arrays, handles):
        _eager(h.wait)
        v.assign(a)


# Horovod's hvd.elastic (run, TensorFlowKerasState, ...): importable as
# hvd.tensorflow.elastic, and every use raises NotImplementedError saying why.
elastic = _unavailable_module(__name__ + ".elastic")


# ---------------------------------------------------------------------------
# Gradient compression.
# ---------------------------------------------------------------------------


class NoneCompressor:
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor:
    """Floating-point gradients travel as float16."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor


def allreduce_gradients(grads, op=Average, compression=Compression.none,
                        gradient_predivide_factor=1.0, name="gradients"):
    """Averages a list of gradients (None entries stay None) as one grouped
    allreduce per dtype. Shared by DistributedGradientTape and hvd.keras."""
    op = _ops.check_op(op)
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("hvd.tensorflow: gradient_predivide_factor needs op=Average")
    pre, post = 1.0, 1.0
    if op == Average and gradient_predivide_factor != 1.0:
        pre, post = 1.0 / gradient_predivide_factor, gradient_predivide_factor
    grads = list(grads)
    idx, sent, ctxs = [], [], []
    for i, g in enumerate(grads):
        if g is None:
            continue
        if isinstance(g, tf.IndexedSlices):
            g = tf.convert_to_tensor(g)  # sparse gradients are reduced densely
        c, cctx = compression.compress(tf.convert_to_tensor(g))
        idx.append(i)
        sent.append(c)
        ctxs.append(cctx)
    out = list(grads)
    by_dtype = {}
    for k, t in enumerate(sent):
        by_dtype.setdefault(t.dtype.name, []).append(k)
    for dname in sorted(by_dtype):
        ks = by_dtype[dname]
        reduced = grouped_allreduce([sent[k] for k in ks], name=f"{name}.{dname}", op=op,
                                    prescale_factor=pre, postscale_factor=post)
        for k, r in zip(ks, reduced):
            out[idx[k]] = compression.decompress(r, ctxs[k])
    return out


class DistributedGradientTape:
    """Wraps a tf.GradientTape: gradient() returns gradients averaged (op) over
    all ranks. Every other attribute is the wrapped tape's."""

    def __init__(self, gradtape, compression=Compression.none, op=Average,
                 gradient_predivide_factor=1.0, name="DistributedGradientTape"):
        self._tape = gradtape
        self._compression = compression
        self._op = _ops.check_op(op)
        self._predivide = gradient_predivide_factor
        self._name = name

    def gradient(self, target, sources, output_gradients=None, **kwargs):
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients, **kwargs)
        flat = tf.nest.flatten(grads) if tf.nest.is_nested(grads) else [grads]
        reduced = allreduce_gradients(flat, op=self._op, compression=self._compression,
                                      gradient_predivide_factor=self._predivide,
                                      name=self._name)
        if tf.nest.is_nested(grads):
            return tf.nest.pack_sequence_as(grads, reduced)
        return reduced[0]

    def __getattr__(self, item):
        return getattr(self._tape, item)

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)
