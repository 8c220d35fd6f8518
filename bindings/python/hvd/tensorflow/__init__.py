"""hvd.tensorflow: the hvd collectives on TensorFlow 2 tensors, and
DistributedGradientTape.

    import hvd.tensorflow as hvd
    hvd.init()
    with tf.GradientTape() as tape:
        loss = ...
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)

Eagerly, ``tensor.numpy()`` goes to the numpy API and the result comes back
with ``tf.convert_to_tensor``. In a graph (``tf.function``, Keras' compiled
train step, ``tf.compat.v1`` ``Session.run``) each op is one of hvd's
asynchronous TensorFlow kernels, built against the installed TensorFlow on
first use and cached (hvd/_tf_kernels.py; ``python -m hvd._tf_kernels``
builds it ahead of time). They never hold a TensorFlow thread while waiting
for other ranks, so a graph may run any number of independent hvd ops on any
inter-op thread pool. XLA cannot compile them: compile Keras models with
jit_compile=False where XLA would be on.

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
from .. import _c_api as _C
from .. import _ops
from .._api import DEFAULT as _DEFAULT
from .. import (  # noqa: F401  (re-exported: `import hvd.tensorflow as hvd` is a drop-in)
    Adasum,
    Average,
    HorovodInternalError,
    HvdError,
    Max,
    Min,
    ProcessSet,
    Product,
    Sum,
    add_process_set,
    barrier,
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    global_process_set,
    init,
    is_homogeneous,
    is_initialized,
    join,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    remove_process_set,
    rocm_built,
    shutdown,
    size,
    start_timeline,
    stop_timeline,
    transport,
)


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


def _op_of(op, average):
    if op is not None and average is not None:
        raise ValueError("hvd.tensorflow: pass op or (deprecated) average, not both")
    if op is not None:
        return op
    if average is None:
        return Average
    return Average if average else Sum


def _allreduce_raw(tensor, op, name, prescale, postscale, ps=None):
    tensor = tf.convert_to_tensor(tensor)
    return _run(lambda a: [_hvd.allreduce(a[0], name=name, op=op, prescale_factor=prescale,
                                          postscale_factor=postscale, process_set=ps)],
                [tensor], [tensor.dtype], [tensor.shape],
                lambda k: k.hvd_allreduce(tensor, _scale(prescale), _scale(postscale),
                                          tensor_name=name, reduce_op=int(op),
                                          process_set_id=_set_id(ps)))[0]


def _rows(t):
    return tf.TensorShape([None]).concatenate(t.shape[1:]) if t.shape.rank else None


def _sparse_allreduce(slices, op, name, ps=None):
    """Horovod's allreduce of tf.IndexedSlices: an allgather of the values and
    one of the indices (divided by size for Average); the result is
    IndexedSlices whose repeated indices add up."""
    values = allgather(slices.values, name=name + ".values", process_set=ps)
    indices = allgather(slices.indices, name=name + ".indices", process_set=ps)
    if op == Average:
        n = size_op() if ps is None or ps._global else _target(ps)[0].size()
        values = values / tf.cast(n, values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


@_no_autograph
def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=None,
              op=None, prescale_factor=1.0, postscale_factor=1.0, name=None,
              process_set=global_process_set, ignore_name_scope=False):
    """Reduces over all ranks (of process_set; default op Average);
    differentiable for Sum and Average. tf.IndexedSlices are reduced as
    Horovod does (allgathers of values and indices) for Sum and Average,
    densely for other ops. device_dense/device_sparse are accepted and
    ignored (hvd works in host memory); compression is a Compression class
    (Compression.fp16 sends float16); ignore_name_scope is accepted (hvd's
    names never include TensorFlow's name scopes)."""
    op = _ops.check_op(_op_of(op, average))
    name = _name("allreduce", name, process_set)
    ps = process_set
    if isinstance(tensor, tf.IndexedSlices):
        if op in (Sum, Average):
            return _sparse_allreduce(tensor, op, name, ps)
        tensor = tf.convert_to_tensor(tensor)
    tensor = tf.convert_to_tensor(tensor)
    if compression is not None and compression is not Compression.none:
        sent, ctx = compression.compress(tensor)
        return compression.decompress(
            allreduce(sent, op=op, prescale_factor=prescale_factor,
                      postscale_factor=postscale_factor, name=name, process_set=ps), ctx)
    if op not in (Sum, Average):
        return _allreduce_raw(tensor, op, name, prescale_factor, postscale_factor, ps)

    @tf.custom_gradient
    def _fn(x):
        y = _allreduce_raw(x, op, name, prescale_factor, postscale_factor, ps)

        def grad(dy):
            return _allreduce_raw(dy, op, name + ".grad", prescale_factor, postscale_factor, ps)

        return y, grad

    return _fn(tensor)


@_no_autograph
def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                      name=None, process_set=global_process_set):
    """Allreduces a list of tensors as one fused unit (all of one dtype)."""
    op = _ops.check_op(_op_of(op, average))
    name = _name("grouped_allreduce", name, process_set)
    ps = process_set
    ts = [tf.convert_to_tensor(t) for t in tensors]
    if not ts:
        return []
    if compression is not None and compression is not Compression.none:
        pairs = [compression.compress(t) for t in ts]
        outs = grouped_allreduce([p[0] for p in pairs], op=op, prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor, name=name, process_set=ps)
        return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]
    if len({t.dtype for t in ts}) > 1:
        raise InvalidArgumentError(
            _C.HVD_ERR_INVALID_ARGUMENT,
            f"hvd.tensorflow.grouped_allreduce '{name}': all tensors must have one dtype, got "
            f"{sorted({t.dtype.name for t in ts})}")
    if op not in (Sum, Average) or not _differentiable(ts):
        return _grouped_allreduce_raw(ts, op, name, prescale_factor, postscale_factor, ps)

    @tf.custom_gradient
    def _fn(*xs):
        ys = _grouped_allreduce_raw(list(xs), op, name, prescale_factor, postscale_factor, ps)

        def grad(*dys):
            return _grouped_allreduce_raw(_dense_grads(dys, ys), op, name + ".grad",
                                          prescale_factor, postscale_factor, ps)

        return ys, grad

    return list(_fn(*ts))


def _grouped_allreduce_raw(ts, op, name, prescale, postscale, ps):
    return _run(lambda a: _hvd.grouped_allreduce(a, name=name, op=op, prescale_factor=prescale,
                                                 postscale_factor=postscale, process_set=ps),
                ts, [t.dtype for t in ts], [t.shape for t in ts],
                lambda k: k.hvd_grouped_allreduce(ts, _scale(prescale), _scale(postscale),
                                                  tensor_name=name, reduce_op=int(op),
                                                  process_set_id=_set_id(ps)))


# Gradients of the collectives, as Horovod's TensorFlow ops (and hvd.torch's
# autograd functions) define them, within the op's process set (whose size
# and rank replace the job's). The backward pass runs collectives too, so
# every rank must compute it; the backward of an op named N uses N + ".grad".
#   allreduce, grouped_allreduce   the same reduction (op, scale factors) of
#                                  the gradient (Sum and Average only)
#   allgather, grouped_allgather   this rank's rows of the Average-allreduced
#                                  gradient
#   broadcast                      the Average-allreduced gradient on the
#                                  root, zeros elsewhere
#   alltoall                       the gradient sent back with alltoall,
#                                  splits = the rows received
#   reducescatter, grouped_reducescatter
#                                  the allgathered gradient, times the set's
#                                  size for Sum, times the scale factors
# Only floating-point (and complex) tensors get gradients.


def _differentiable(ts):
    return all(t.dtype.is_floating or t.dtype.is_complex for t in ts)


def _dense_grads(dys, ys):
    """The upstream gradients as dense tensors (zeros for an unused output)."""
    out = []
    for dy, y in zip(dys, ys):
        if dy is None:
            dy = tf.zeros_like(y)
        out.append(tf.convert_to_tensor(dy))
    return out


def _average_by_dtype(ts, name, ps):
    """Average-allreduce of a list of tensors, one grouped allreduce per dtype."""
    out = [None] * len(ts)
    by_dtype = {}
    for i, t in enumerate(ts):
        by_dtype.setdefault(t.dtype.name, []).append(i)
    for dname in sorted(by_dtype):
        idx = by_dtype[dname]
        sub = f"{name}.{dname}" if len(by_dtype) > 1 else name
        reduced = _grouped_allreduce_raw([ts[i] for i in idx], Average, sub, 1.0, 1.0, ps)
        for i, r in zip(idx, reduced):
            out[i] = r
    return out


def _own_rows(grads, xs, name, ps):
    """Rank r's rows of each gathered gradient: the rows its input
    contributed (the ranks' first dimensions are allgathered)."""
    c = _target(ps)[0]
    r = c.rank()
    dims = tf.reshape(tf.stack([tf.shape(x, out_type=tf.int64)[0] for x in xs]), [1, len(xs)])
    every = _allgather_raw(dims, name + ".dims", ps)  # (set size, len(xs))
    out = []
    for i, (g, x) in enumerate(zip(grads, xs)):
        start = tf.reduce_sum(every[:r, i])
        out.append(g[start:start + tf.shape(x, out_type=tf.int64)[0]])
    return out


def _reducescatter_grad_scale(dy, op, prescale, postscale, ps):
    factor = float(prescale) * float(postscale)
    if op == Sum:
        factor *= _target(ps)[0].size()
    if factor != 1.0:
        dy = dy * tf.cast(factor, dy.dtype)
    return dy


@_no_autograph
def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates every rank's tensor (of process_set, in its rank order) along
    the first dimension."""
    name = _name("allgather", name, process_set)
    ps = process_set
    t = tf.convert_to_tensor(tensor)
    if not _differentiable([t]):
        return _allgather_raw(t, name, ps)

    @tf.custom_gradient
    def _fn(x):
        y = _allgather_raw(x, name, ps)

        def grad(dy):
            g = _average_by_dtype(_dense_grads([dy], [y]), name + ".grad", ps)
            return _own_rows(g, [x], name + ".grad", ps)[0]

        return y, grad

    return _fn(t)


def _allgather_raw(t, name, ps):
    return _run(lambda a: [_hvd.allgather(a[0], name=name, process_set=ps)], [t], [t.dtype],
                [_rows(t)],
                lambda k: k.hvd_allgather(t, tensor_name=name, process_set_id=_set_id(ps)))[0]


@_no_autograph
def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """root_rank's tensor on every rank (of process_set; root_rank is a rank of
    the job, as hvd.rank() numbers it)."""
    name = _name("broadcast", name, process_set)
    ps = process_set
    _, bound = _target(ps)
    root = int(root_rank) if bound is None else bound._set_rank_of(root_rank)
    t = tf.convert_to_tensor(tensor)

    def raw(x):
        return _run(lambda a: [_hvd.broadcast(a[0], root_rank, name=name, process_set=ps)],
                    [x], [x.dtype], [x.shape],
                    lambda k: k.hvd_broadcast(x, tensor_name=name, root_rank=root,
                                              process_set_id=_set_id(ps)))[0]

    if not _differentiable([t]):
        return raw(t)

    @tf.custom_gradient
    def _fn(x):
        y = raw(x)

        def grad(dy):
            g = _allreduce_raw(_dense_grads([dy], [y])[0], Average, name + ".grad", 1.0, 1.0,
                               ps)
            # Roots are ranks of the job, also within a process set; zeros as
            # Horovod's (a NaN or inf gradient stays NaN).
            return g if rank() == int(root_rank) else g * tf.zeros([], g.dtype)

        return y, grad

    return _fn(t)


@_no_autograph
def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Like hvd.alltoall; with splits given returns (tensor, received_splits)."""
    name = _name("alltoall", name, process_set)
    ps = process_set
    t = tf.convert_to_tensor(tensor)
    s = None if splits is None else tf.cast(tf.convert_to_tensor(splits), tf.int64)
    if not _differentiable([t]):
        return _alltoall_raw(t, s, name, ps)

    @tf.custom_gradient
    def _fn(x):
        y = _alltoall_raw(x, s, name, ps)
        out = y if s is None else y[0]

        def grad(*dys):
            dy = _dense_grads(dys[:1], [out])[0]
            if s is None:  # rank j sent this rank its first dimension / set size rows
                n = tf.reshape(tf.shape(x, out_type=tf.int64)[0], [1])
                recv = _allgather_raw(n, name + ".grad.dims", ps) // _target(ps)[0].size()
            else:
                recv = y[1]
            return _alltoall_raw(dy, recv, name + ".grad", ps)[0]

        return y, grad

    return _fn(t)


def _alltoall_raw(t, s, name, ps):
    """alltoall of t: the result, or (result, received splits) with splits s."""
    if s is None:
        empty = tf.zeros([0], tf.int64)
        return _run(lambda a: [_hvd.alltoall(a[0], name=name, process_set=ps)], [t], [t.dtype],
                    [_rows(t)],
                    lambda k: k.hvd_alltoall(t, empty, tensor_name=name,
                                             process_set_id=_set_id(ps))[:1])[0]

    def fn(a):
        out, recv = _hvd.alltoall(a[0], splits=a[1], name=name, process_set=ps)
        return [out, recv]

    out, recv = _run(fn, [t, s], [t.dtype, tf.int64], [_rows(t), tf.TensorShape([None])],
                     lambda k: k.hvd_alltoall(t, s, tensor_name=name,
                                              process_set_id=_set_id(ps)))
    return out, recv


@_no_autograph
def reducescatter(tensor, device_dense="", compression=None, op=None, name=None,
                  ignore_name_scope=False, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=global_process_set):
    """Reduces over ranks (of process_set; default op Average); rank r keeps its
    block of rows. Horovod's argument order; device_dense and
    ignore_name_scope are accepted and change nothing."""
    op = _ops.check_op(_op_of(op, None))
    name = _name("reducescatter", name, process_set)
    ps = process_set
    t = tf.convert_to_tensor(tensor)
    if compression is not None and compression is not Compression.none:
        sent, ctx = compression.compress(t)
        return compression.decompress(
            reducescatter(sent, op=op, name=name, prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor, process_set=ps), ctx)
    if op not in (Sum, Average) or not _differentiable([t]):
        return _reducescatter_raw(t, op, name, prescale_factor, postscale_factor, ps)

    @tf.custom_gradient
    def _fn(x):
        y = _reducescatter_raw(x, op, name, prescale_factor, postscale_factor, ps)

        def grad(dy):
            dy = _reducescatter_grad_scale(_dense_grads([dy], [y])[0], op, prescale_factor,
                                           postscale_factor, ps)
            return _allgather_raw(dy, name + ".grad", ps)

        return y, grad

    return _fn(t)


def _reducescatter_raw(t, op, name, prescale, postscale, ps):
    return _run(lambda a: [_hvd.reducescatter(a[0], name=name, op=op, prescale_factor=prescale,
                                              postscale_factor=postscale, process_set=ps)],
                [t], [t.dtype], [_rows(t)],
                lambda k: k.hvd_reducescatter(t, _scale(prescale), _scale(postscale),
                                              tensor_name=name, reduce_op=int(op),
                                              process_set_id=_set_id(ps)))[0]


@_no_autograph
def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """Allgathers every tensor of the list (each along its first dimension,
    which may differ between ranks); returns the list of results. The library
    has no grouped form of allgather: member i is a separate allgather named
    f"{name}.{i}", so members are not negotiated as one unit (eagerly the call
    returns when all have completed; in a graph each is its own kernel)."""
    name = _name("grouped_allgather", name, process_set)
    ps = process_set
    ts = [tf.convert_to_tensor(t) for t in tensors]
    if not ts:
        raise ValueError("hvd.tensorflow.grouped_allgather needs at least one tensor")
    if not _differentiable(ts):
        return _grouped_allgather_raw(ts, name, ps)

    @tf.custom_gradient
    def _fn(*xs):
        ys = _grouped_allgather_raw(list(xs), name, ps)

        def grad(*dys):
            g = _average_by_dtype(_dense_grads(dys, ys), name + ".grad", ps)
            return _own_rows(g, xs, name + ".grad", ps)

        return ys, grad

    return list(_fn(*ts))


def _grouped_allgather_raw(ts, name, ps):
    def kernel(k):
        sid = _set_id(ps)
        return [k.hvd_allgather(t, tensor_name=f"{name}.{i}", process_set_id=sid)
                for i, t in enumerate(ts)]

    return _run(lambda a: _hvd.grouped_allgather(a, name=name, process_set=ps), ts,
                [t.dtype for t in ts], [_rows(t) for t in ts], kernel)


@_no_autograph
def grouped_reducescatter(tensors, device_dense="", compression=None, op=None, name=None,
                          ignore_name_scope=False, prescale_factor=1.0, postscale_factor=1.0,
                          process_set=global_process_set):
    """Reducescatters every tensor of the list (default op Average): rank r
    keeps its block of rows of each. Member i is a separate reducescatter
    named f"{name}.{i}" (the library has no grouped form of it).
    device_dense and ignore_name_scope are accepted and change nothing;
    compression is a Compression class, applied member by member."""
    op = _ops.check_op(_op_of(op, None))
    name = _name("grouped_reducescatter", name, process_set)
    ps = process_set
    ts = [tf.convert_to_tensor(t) for t in tensors]
    if not ts:
        raise ValueError("hvd.tensorflow.grouped_reducescatter needs at least one tensor")
    if compression is not None and compression is not Compression.none:
        pairs = [compression.compress(t) for t in ts]
        outs = grouped_reducescatter([p[0] for p in pairs], op=op, name=name,
                                     prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor, process_set=ps)
        return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]

    if op not in (Sum, Average) or not _differentiable(ts):
        return _grouped_reducescatter_raw(ts, op, name, prescale_factor, postscale_factor, ps)

    @tf.custom_gradient
    def _fn(*xs):
        ys = _grouped_reducescatter_raw(list(xs), op, name, prescale_factor, postscale_factor,
                                        ps)

        def grad(*dys):
            scaled = [_reducescatter_grad_scale(dy, op, prescale_factor, postscale_factor, ps)
                      for dy in _dense_grads(dys, ys)]
            return _grouped_allgather_raw(scaled, name + ".grad", ps)

        return ys, grad

    return list(_fn(*ts))


def _grouped_reducescatter_raw(ts, op, name, prescale, postscale, ps):
    def kernel(k):
        pre, post = _scale(prescale), _scale(postscale)
        sid = _set_id(ps)
        return [k.hvd_reducescatter(t, pre, post, tensor_name=f"{name}.{i}", reduce_op=int(op),
                                    process_set_id=sid)
                for i, t in enumerate(ts)]

    return _run(lambda a: _hvd.grouped_reducescatter(a, name=name, op=op,
                                                     prescale_factor=prescale,
                                                     postscale_factor=postscale,
                                                     process_set=ps),
                ts, [t.dtype for t in ts], [_rows(t) for t in ts], kernel)


# ---------------------------------------------------------------------------
# rank_op and friends: int32 scalars evaluated when the graph runs.
# ---------------------------------------------------------------------------


@_no_autograph
def _topology_op(kernel_name, fn, name):
    if tf.executing_eagerly():
        return tf.constant(fn(), dtype=tf.int32, name=name)
    k = _kernels()
    if k is not None:
        out = getattr(k, kernel_name)(name=name)
    else:
        out = tf.py_function(func=lambda: np.int32(fn()), inp=[], Tout=tf.int32, name=name)
    out.set_shape([])
    return out


def rank_op(name=None):
    """This process's rank as an int32 tensor (read when the graph runs)."""
    return _topology_op("hvd_rank", rank, name)


def _registered_set(process_set_id, what):
    if isinstance(process_set_id, bool) or not isinstance(process_set_id, int):
        raise TypeError(f"hvd.tensorflow.{what}: process_set_id must be an int, got "
                        f"{process_set_id!r}")
    size()  # NotInitializedError before init(), as Horovod's op fails
    ps = _DEFAULT._registry.by_id(process_set_id)
    if ps is None:
        raise ValueError(f"hvd.tensorflow.{what}: no process set with id {process_set_id!r} "
                         "is registered (hvd.add_process_set)")
    return ps


def size_op(process_set_id=0, name=None):
    """The number of ranks (of the process set with that id; 0: the whole job)
    as an int32 tensor (read when the graph runs; a set's size is fixed)."""
    if process_set_id == 0:
        return _topology_op("hvd_size", size, name)
    ps = _registered_set(process_set_id, "size_op")
    return tf.constant(len(ps.ranks), dtype=tf.int32, name=name)


def local_rank_op(name=None):
    """The rank on this host as an int32 tensor (read when the graph runs)."""
    return _topology_op("hvd_local_rank", local_rank, name)


def local_size_op(name=None):
    """The number of ranks on this host as an int32 tensor (read when the graph runs)."""
    return _topology_op("hvd_local_size", local_size, name)


def process_set_included_op(process_set_id=0, name=None):
    """Whether this rank belongs to the process set with that id, as an int32
    scalar, 1 or 0 (Horovod's). Id 0 is the global set (every rank); an id
    that is not registered raises ValueError."""
    if process_set_id == 0:
        size()  # NotInitializedError before init(), as Horovod's op fails
        return tf.constant(1, dtype=tf.int32, name=name)
    ps = _registered_set(process_set_id, "process_set_included_op")
    return tf.constant(int(bool(ps.included())), dtype=tf.int32, name=name)


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


# Horovod's helper, shared with hvd.torch.
handle_average_backwards_compatibility = _ops.handle_average_backwards_compatibility


def check_num_rank_power_of_2(num_rank):
    """Horovod's: whether num_rank is a positive power of 2."""
    return num_rank > 0 and (num_rank & (num_rank - 1)) == 0


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


def _rebind_sets():
    # After an elastic reset: the registered sets' new contexts, for graphs
    # traced before it (their ops name the set by id).
    kernels = _sys.modules.get("hvd._tf_kernels")
    if kernels is None:
        return
    for ps in _DEFAULT._registry.live():
        if ps._ctx is not None:
            kernels.set_context(ps.process_set_id, ps._ctx._ptr)


# Horovod's hvd.tensorflow.elastic (run, TensorFlowKerasState,
# TensorFlowState, ...), also importable as a module.
from .. import elastic as _hvd_elastic  # noqa: E402
from . import elastic  # noqa: E402

_hvd_elastic._register_reset_hook(_rebind_sets, after=True)


# `import horovod.tensorflow.keras as hvd` becomes `import hvd.tensorflow.keras as hvd`
# (or `import hvd.keras as hvd`): hvd.tensorflow.keras is hvd.keras itself,
# imported on first use through the finder below (the folder has no keras module).


class _KerasAlias:
    """Finder and loader of hvd.tensorflow.keras: the hvd.keras module."""

    name = __name__ + ".keras"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        import importlib.util
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        import importlib
        mod = importlib.import_module("hvd.keras")
        # its submodules under this name too (from hvd.tensorflow.keras.callbacks import ...)
        for sub in ("callbacks", "elastic"):
            _sys.modules.setdefault(f"{self.name}.{sub}", getattr(mod, sub))
        return mod

    def exec_module(self, module):
        pass  # hvd.keras ran when it was imported


if not any(isinstance(f, _KerasAlias) for f in _sys.meta_path):
    _sys.meta_path.append(_KerasAlias())


# ---------------------------------------------------------------------------
# Gradient compression.
# ---------------------------------------------------------------------------


Compressor = _ops.Compressor
NoneCompressor = _ops.NoneCompressor


class FP16Compressor(Compressor):
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


# ---------------------------------------------------------------------------
# Gradients.
# ---------------------------------------------------------------------------


@_no_autograph
def allreduce_gradients(grads, op=Average, compression=Compression.none,
                        gradient_predivide_factor=1.0, name="gradients", sparse_as_dense=False,
                        process_set=global_process_set):
    """Reduces a list of gradients over ranks (of process_set; None entries
    stay None): the dense ones as one grouped allreduce per dtype,
    tf.IndexedSlices as Horovod does (allgathers; densely with
    sparse_as_dense=True or an op other than Sum and Average). Shared by the
    tapes and hvd.keras."""
    op = _ops.check_op(op)
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("hvd.tensorflow: gradient_predivide_factor needs op=Average")
    pre, post = 1.0, 1.0
    if op == Average and gradient_predivide_factor != 1.0:
        pre, post = 1.0 / gradient_predivide_factor, gradient_predivide_factor
    grads = list(grads)
    out = list(grads)
    idx, sent, ctxs = [], [], []
    for i, g in enumerate(grads):
        if g is None:
            continue
        if isinstance(g, tf.IndexedSlices):
            if not sparse_as_dense and op in (Sum, Average):
                out[i] = _sparse_allreduce(g, op, f"{name}.sparse.{i}", process_set)
                continue
            g = tf.convert_to_tensor(g)
        c, cctx = compression.compress(tf.convert_to_tensor(g))
        idx.append(i)
        sent.append(c)
        ctxs.append(cctx)
    by_dtype = {}
    for k, t in enumerate(sent):
        by_dtype.setdefault(t.dtype.name, []).append(k)
    for dname in sorted(by_dtype):
        ks = by_dtype[dname]
        reduced = grouped_allreduce([sent[k] for k in ks], name=f"{name}.{dname}", op=op,
                                    prescale_factor=pre, postscale_factor=post,
                                    process_set=process_set)
        for k, r in zip(ks, reduced):
            out[idx[k]] = compression.decompress(r, ctxs[k])
    return out


def _scale_local(g, n):
    """A local (not reduced) gradient divided by size (Horovod's
    scale_local_gradients)."""
    if g is None:
        return None
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(g.values / tf.cast(n, g.values.dtype), g.indices, g.dense_shape)
    return g / tf.cast(n, g.dtype)


@_no_autograph
def reduce_gradients(grads, sources, local_ids=(), scale_local_gradients=True, **kwargs):
    """allreduce_gradients over the gradients whose source is not local
    (id(source) in local_ids); local ones stay on this rank, divided by size
    when scale_local_gradients (as Horovod's tapes and optimizers do)."""
    grads = list(grads)
    if not local_ids:
        return allreduce_gradients(grads, **kwargs)
    is_local = [id(s) in local_ids for s in sources]
    shared = [g for g, loc in zip(grads, is_local) if not loc]
    reduced = iter(allreduce_gradients(shared, **kwargs))
    n = _target(kwargs.get("process_set", global_process_set))[0].size()
    out = []
    for g, loc in zip(grads, is_local):
        if loc:
            out.append(_scale_local(g, n) if scale_local_gradients else g)
        else:
            out.append(next(reduced))
    return out


class DistributedGradientTape:
    """Wraps a tf.GradientTape: gradient() returns gradients averaged (op)
    over all ranks, except those of sources registered with
    register_local_source. Every other attribute is the wrapped tape's.

    Horovod's arguments: device_dense and device_sparse are accepted and
    ignored (host memory); num_groups and groups are accepted and change
    nothing (hvd already reduces all dense gradients of one dtype as one
    grouped, fused allreduce)."""

    def __init__(self, gradtape, device_dense="", device_sparse="",
                 compression=Compression.none, sparse_as_dense=False, op=Average,
                 gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 process_set=global_process_set, scale_local_gradients=True,
                 name="DistributedGradientTape"):
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        _target(process_set)  # a registered set this rank is in
        self._process_set = process_set
        self._tape = gradtape
        self._compression = compression
        self._sparse_as_dense = sparse_as_dense
        self._op = _ops.check_op(op)
        self._predivide = gradient_predivide_factor
        self._name = name
        self._local_ids = set()
        self._local_keep = []  # keeps the registered sources (and so their ids) alive
        self.scale_local_gradients = scale_local_gradients

    def register_local_source(self, source):
        """Marks a variable as local to this rank: its gradient is not reduced
        (only divided by size, unless scale_local_gradients=False)."""
        self._local_ids.add(id(source))
        self._local_keep.append(source)

    @_no_autograph
    def gradient(self, target, sources, output_gradients=None, use_generic_names=False,
                 **kwargs):
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients, **kwargs)
        nested = tf.nest.is_nested(grads)
        flat = tf.nest.flatten(grads) if nested else [grads]
        flat_sources = tf.nest.flatten(sources) if tf.nest.is_nested(sources) else [sources]
        reduced = reduce_gradients(flat, flat_sources, self._local_ids,
                                   self.scale_local_gradients, op=self._op,
                                   compression=self._compression,
                                   gradient_predivide_factor=self._predivide,
                                   name=self._name, sparse_as_dense=self._sparse_as_dense,
                                   process_set=self._process_set)
        if nested:
            return tf.nest.pack_sequence_as(grads, reduced)
        return reduced[0]

    def __getattr__(self, item):
        return getattr(self._tape, item)

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)


def _local_layer_variables(local_layers):
    import keras
    if local_layers is None:
        return []
    if isinstance(local_layers, keras.layers.Layer):
        local_layers = [local_layers]
    local_layers = list(local_layers)
    if not all(isinstance(layer, keras.layers.Layer) for layer in local_layers):
        raise ValueError("All local layers must be of keras.layers.Layer type.")
    return [v for layer in local_layers for v in layer.trainable_weights]


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set,
                                   local_layers=None, scale_local_gradients=True):
    """DistributedGradientTape whose gradients for the trainable weights of
    local_layers (Keras layers) are not reduced: each rank keeps its own
    (divided by size unless scale_local_gradients=False)."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients)
    for v in _local_layer_variables(local_layers):
        tape.register_local_source(v)
    return tape


class _DistributedOptimizer(tf.compat.v1.train.Optimizer):
    """A tf.compat.v1.train.Optimizer whose compute_gradients reduces the
    gradients over all ranks (TensorFlow 1 graphs, tf.function, eagerly).

    backward_passes_per_step = n > 1 (Horovod's semantics): compute_gradients
    adds each gradient to a local accumulator (non-trainable variables in
    tf.compat.v1.GraphKeys.LOCAL_VARIABLES in a TF1 graph, as Horovod's, so
    run tf.compat.v1.local_variables_initializer(); variables of their own
    eagerly and in tf.function) and counts the pass; at the n-th pass it
    returns the accumulated sums reduced over the ranks (divided by n with
    average_aggregated_gradients) and clears the accumulators and the count,
    at the others this pass's own gradients. apply_gradients applies only
    after a reduction (the count back at 0); the other passes only advance
    global_step, if one is given."""

    def __init__(self, optimizer, name=None, use_locking=False, compression=Compression.none,
                 sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0,
                 process_set=global_process_set, backward_passes_per_step=1,
                 average_aggregated_gradients=False, scale_local_gradients=True):
        if name is None:
            name = f"Distributed{type(optimizer).__name__}"
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._hvd_args = dict(op=_ops.check_op(op), compression=compression,
                              gradient_predivide_factor=gradient_predivide_factor,
                              sparse_as_dense=sparse_as_dense, name=name,
                              process_set=process_set)
        self._sparse_as_dense = bool(sparse_as_dense)
        self._bpps = int(backward_passes_per_step)
        self._average_aggregated = bool(average_aggregated_gradients)
        self._scale_local = bool(scale_local_gradients)
        self._local_ids = set()
        self._local_keep = []  # keeps the registered variables (and so their ids) alive
        self._aggregation = {}  # graph (None eagerly) -> (counter, {variable ref: accumulator})

    def register_local_var(self, var):
        """Marks a variable as local to this rank: its gradient is not reduced
        (only divided by size, unless scale_local_gradients=False)."""
        self._local_ids.add(id(var))
        self._local_keep.append(var)

    def _reduce(self, grads, variables):
        return reduce_gradients(grads, variables, self._local_ids, self._scale_local,
                                **self._hvd_args)

    def compute_gradients(self, *args, **kwargs):
        gradients = self._optimizer.compute_gradients(*args, **kwargs)
        grads, variables = zip(*gradients) if gradients else ((), ())
        if self._bpps == 1:
            reduced = self._reduce(list(grads), list(variables))
        else:
            reduced = self._aggregate(list(grads), list(variables))
        return list(zip(reduced, variables))

    def _aggregation_state(self, variables, grads):
        """The pass counter and the accumulators (one per variable with a
        gradient), made once per graph (the outermost: eagerly and in
        tf.function they are eager variables)."""
        with tf.init_scope():
            eager = tf.executing_eagerly()
            key = None if eager else tf.compat.v1.get_default_graph()
            counter, accums = self._aggregation.get(key, (None, {}))

            def variable(value, what):
                if eager:
                    return tf.Variable(value, trainable=False, name=f"{self._name}_{what}")
                return tf.compat.v1.Variable(
                    value, trainable=False, use_resource=True, name=f"{self._name}_{what}",
                    collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])

            if counter is None:
                counter = variable(tf.zeros([], tf.int32), "aggregation_counter")
            for v, g in zip(variables, grads):
                if g is not None and v.ref() not in accums:
                    accums[v.ref()] = variable(tf.zeros(v.shape, g.dtype), "aggregated_gradient")
            self._aggregation[key] = (counter, accums)
        return counter, accums

    @_no_autograph
    def _aggregate(self, grads, variables):
        dense = []
        for g in grads:
            if isinstance(g, tf.IndexedSlices):
                if not self._sparse_as_dense:
                    raise ValueError("IndexedSlices are not supported when "
                                     "`backward_passes_per_step` > 1 and `sparse_as_dense` is "
                                     "False.")
                g = tf.convert_to_tensor(g)
            dense.append(g)
        counter, accums = self._aggregation_state(variables, dense)
        present = [i for i, g in enumerate(dense) if g is not None]
        if not present:
            return dense
        adds = [accums[variables[i].ref()].assign_add(dense[i], use_locking=self._use_locking)
                for i in present]
        with tf.control_dependencies(adds):
            count = counter.assign_add(1, use_locking=True)
        n = self._bpps

        def communicate():
            sums = [accums[variables[i].ref()].read_value() for i in present]
            reduced = self._reduce(sums, [variables[i] for i in present])
            if self._average_aggregated:
                reduced = [r / tf.cast(n, r.dtype) for r in reduced]
            with tf.control_dependencies(reduced):
                clear = [accums[variables[i].ref()].assign(tf.zeros_like(r))
                         for i, r in zip(present, reduced)]
                clear.append(counter.assign(0, use_locking=True))
            with tf.control_dependencies(clear):
                return [tf.identity(r) for r in reduced]

        def pass_own():
            return [tf.identity(dense[i]) for i in present]

        with tf.control_dependencies([count]):
            out = tf.nest.flatten(tf.cond(tf.equal(tf.convert_to_tensor(count), n),
                                          communicate, pass_own))
        result = list(dense)
        for i, t in zip(present, out):
            result[i] = t
        return result

    @_no_autograph
    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = list(grads_and_vars)
        if self._bpps == 1:
            return self._optimizer.apply_gradients(grads_and_vars, global_step, name)
        with tf.init_scope():
            key = None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
        if key not in self._aggregation:
            raise ValueError("hvd.tensorflow.DistributedOptimizer: with backward_passes_per_step "
                             "> 1, apply_gradients needs the gradients of this optimizer's "
                             "compute_gradients (or use minimize)")
        counter = self._aggregation[key][0]

        def apply():
            op = self._optimizer.apply_gradients(grads_and_vars, global_step, name)
            return tf.no_op() if op is None else op

        def count_step():
            if global_step is None:
                return tf.no_op()
            return tf.compat.v1.assign_add(global_step, tf.constant(1, global_step.dtype.base_dtype),
                                           use_locking=True).op

        deps = [g for g, _ in grads_and_vars if g is not None]
        with tf.control_dependencies(deps):
            return tf.cond(tf.equal(counter.read_value(), 0), apply, count_step)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


class _DistributedAdasumOptimizer(tf.compat.v1.train.Optimizer):
    """A tf.compat.v1.train.Optimizer for op=Adasum, with Horovod's semantics:
    the parameter UPDATE is combined, not the gradient. compute_gradients
    gives this rank's own gradients; apply_gradients saves each variable
    (a slot, "adasum_start"), lets the wrapped optimizer take this rank's step
    (its state, e.g. momentum, stays local), and sets var = start +
    adasum(var - start) over the ranks (of process_set; deltas of one dtype
    in one grouped allreduce, each combined on its own), the same on every
    rank."""

    def __init__(self, optimizer, name=None, use_locking=False, compression=Compression.none,
                 process_set=global_process_set):
        if name is None:
            name = f"DistributedDelta{type(optimizer).__name__}"
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._hvd_args = dict(op=Adasum, compression=compression, name=name,
                              process_set=process_set)

    def compute_gradients(self, *args, **kwargs):
        return self._optimizer.compute_gradients(*args, **kwargs)

    @_no_autograph
    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = list(grads_and_vars)
        variables = [v for g, v in grads_and_vars if g is not None]
        if not variables:
            return self._optimizer.apply_gradients(grads_and_vars, global_step, name)
        starts = [self._zeros_slot(v, "adasum_start", self._name) for v in variables]
        saved = [s.assign(v.read_value(), use_locking=self._use_locking)
                 for s, v in zip(starts, variables)]
        with tf.control_dependencies(saved):
            olds = [s.read_value() for s in starts]
            local = self._optimizer.apply_gradients(grads_and_vars, global_step, name)
        with tf.control_dependencies([local]):
            deltas = [v.read_value() - old for old, v in zip(olds, variables)]
        combined = allreduce_gradients(deltas, **self._hvd_args)
        return tf.group(*[v.assign(old + d, use_locking=self._use_locking)
                          for old, v, d in zip(olds, variables, combined)])

    def get_slot(self, var, name):
        slot = super().get_slot(var, name)
        return slot if slot is not None else self._optimizer.get_slot(var, name)

    def get_slot_names(self):
        return super().get_slot_names() + self._optimizer.get_slot_names()

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",
                         device_sparse="", compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Horovod's hvd.tensorflow.DistributedOptimizer: a
    tf.compat.v1.train.Optimizer is wrapped so that compute_gradients reduces
    over ranks (of process_set; with backward_passes_per_step = n > 1 the
    gradients of n passes are accumulated locally, then reduced and applied
    once, see _DistributedOptimizer); a Keras optimizer becomes
    hvd.keras.DistributedOptimizer(...).
    op=hvd.Adasum combines the parameter update instead of the gradients
    (each rank steps with its own gradients, then var = old + adasum(new -
    old)), as Horovod's delta optimizer does."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    _target(process_set)  # a registered set this rank is in
    if _ops.check_op(op) == Adasum and average_aggregated_gradients:
        raise ValueError("Adasum does not support average_aggregated_gradients == True")
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        if (isinstance(backward_passes_per_step, bool)
                or int(backward_passes_per_step) != backward_passes_per_step
                or backward_passes_per_step < 1):
            raise ValueError("backward_passes_per_step must be an int >= 1, got "
                             f"{backward_passes_per_step!r}")
        if _ops.check_op(op) == Adasum:
            if backward_passes_per_step != 1:
                raise ValueError("hvd.tensorflow.DistributedOptimizer: backward_passes_per_step "
                                 "> 1 is not supported with op=Adasum for a "
                                 "tf.compat.v1.train.Optimizer (hvd.keras's optimizer has it)")
            return _DistributedAdasumOptimizer(optimizer, name, use_locking, compression,
                                               process_set)
        return _DistributedOptimizer(optimizer, name, use_locking, compression, sparse_as_dense,
                                     op, gradient_predivide_factor, process_set,
                                     backward_passes_per_step, average_aggregated_gradients,
                                     scale_local_gradients)
    import keras
    if isinstance(optimizer, keras.optimizers.Optimizer):
        from .. import keras as _hvd_keras
        return _hvd_keras.DistributedOptimizer(
            optimizer, name=name, compression=compression, sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor, op=op,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients,
            process_set=process_set, scale_local_gradients=scale_local_gradients)
    raise ValueError("Provided optimizer doesn't inherit from either legacy TensorFlow or Keras "
                     f"optimizer: {optimizer!r}")


# ---- SyncBatchNormalization ----------------------------------------------------------

_SYNC_BN = None


def _sync_batch_normalization_class():
    """Builds hvd.tensorflow.SyncBatchNormalization on first use (Keras is
    imported only then)."""
    global _SYNC_BN
    if _SYNC_BN is not None:
        return _SYNC_BN
    import keras

    class SyncBatchNormalization(keras.layers.BatchNormalization):
        """Horovod's SyncBatchNormalization: a Keras BatchNormalization whose
        training-time batch statistics are those of the global batch (every
        rank's, which may differ in size): per-channel sums, sums of squares
        and counts are summed over ranks in one allreduce, and the mean and
        variance come from them (var = E[x^2] - E[x]^2, as Horovod computes
        it). The allreduce is differentiable, so the backward pass is the
        one of BatchNormalization over the global batch. Every rank must call
        the layer in training alike (it runs a collective); inference uses
        the moving statistics, as BatchNormalization does."""

        def _moments(self, inputs, mask):
            x = tf.convert_to_tensor(inputs)
            axes = list(self._reduction_axes)
            if mask is None:
                ones = tf.ones_like(x)
            else:
                ones = tf.cast(tf.broadcast_to(tf.expand_dims(mask, -1), tf.shape(x)), x.dtype)
                x = x * ones
            local_sum = tf.reduce_sum(x, axis=axes)
            channels = tf.shape(local_sum)
            packed = tf.concat([tf.reshape(local_sum, [-1]),
                                tf.reshape(tf.reduce_sum(x * x, axis=axes), [-1]),
                                tf.reshape(tf.reduce_sum(ones, axis=axes), [-1])], 0)
            total = allreduce(packed, op=Sum, name=f"{self.name}.sync_batch_norm")
            s, ss, count = tf.split(total, 3)
            count = tf.maximum(count, tf.ones_like(count))
            mean = s / count
            variance = tf.maximum(ss / count - mean * mean, tf.zeros_like(mean))
            return tf.reshape(mean, channels), tf.reshape(variance, channels)

    _SYNC_BN = SyncBatchNormalization
    return _SYNC_BN


def __getattr__(name):
    if name == "SyncBatchNormalization":
        return _sync_batch_normalization_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
