"""hvd.tensorflow's collectives on tensors (Horovod's
horovod.tensorflow.mpi_ops and the ops of horovod.tensorflow): eagerly and in
graphs, with Horovod's gradients, and the topology ops (rank_op, ...)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

import hvd as _hvd
from .. import _c_api as _C
from .. import _ops
from .. import Average, Sum, global_process_set, local_rank, local_size, rank, size
from .._api import DEFAULT as _DEFAULT
from ._compression import Compression
from ._execution import (
    InvalidArgumentError,
    _kernels,
    _name,
    _no_autograph,
    _run,
    _scale,
    _set_id,
    _target,
)


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


def _check_sparse_scale(prescale, postscale):
    if prescale != 1.0 or postscale != 1.0:
        raise NotImplementedError("hvd.tensorflow: pre/postscale_factor is not supported with "
                                  "tf.IndexedSlices (they are reduced by allgathers, as in "
                                  "Horovod)")


def _sparse_allreduce(slices, op, name, ps=None):
    """Horovod's allreduce of tf.IndexedSlices: an allgather of the values and
    one of the indices (divided by size for Average); the result is
    IndexedSlices whose repeated indices add up. The dense shape is not
    needed (IndexedSlices made without one keep none)."""
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
    densely for other ops; prescale/postscale_factor with them raise
    NotImplementedError, as in Horovod. device_dense/device_sparse are accepted and
    ignored (hvd works in host memory); compression is a Compression class
    (Compression.fp16 sends float16); ignore_name_scope is accepted (hvd's
    names never include TensorFlow's name scopes)."""
    op = _ops.check_op(_op_of(op, average))
    name = _name("allreduce", name, process_set)
    ps = process_set
    if isinstance(tensor, tf.IndexedSlices):
        if op in (Sum, Average):
            _check_sparse_scale(prescale_factor, postscale_factor)
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
    """Allreduces a list of tensors as one fused unit (all of one dtype).
    tf.IndexedSlices among them are reduced as allreduce reduces them (for
    Sum and Average: allgathers named f"{name}.sparse.{i}"; no
    pre/postscale_factor), the dense tensors as one group."""
    op = _ops.check_op(_op_of(op, average))
    name = _name("grouped_allreduce", name, process_set)
    ps = process_set
    if op in (Sum, Average) and any(isinstance(t, tf.IndexedSlices) for t in tensors):
        _check_sparse_scale(prescale_factor, postscale_factor)
        return _grouped_with_slices(list(tensors), op, name, compression, ps)
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


def _grouped_with_slices(tensors, op, name, compression, ps):
    """grouped_allreduce of a list holding tf.IndexedSlices: each of them
    allgathered on its own, the dense tensors as one group."""
    out = list(tensors)
    dense = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            out[i] = _sparse_allreduce(t, op, f"{name}.sparse.{i}", ps)
    if dense:
        reduced = grouped_allreduce([tensors[i] for i in dense], op=op, compression=compression,
                                    name=f"{name}.dense", process_set=ps)
        for i, y in zip(dense, reduced):
            out[i] = y
    return out


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

    grads_made = []  # one per backward graph made (tf.gradients once per output, say)

    @tf.custom_gradient
    def _fn(*xs):
        ys = _grouped_allgather_raw(list(xs), name, ps)

        def grad(*dys):
            # every backward of this op gets names of its own: in a graph several
            # may run in one step, and two ops in flight may not share a name
            gname = name + ".grad" + (f".{len(grads_made)}" if grads_made else "")
            grads_made.append(gname)
            g = _average_by_dtype(_dense_grads(dys, ys), gname, ps)
            return _own_rows(g, xs, gname, ps)

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


# Horovod's helper, shared with hvd.torch.
handle_average_backwards_compatibility = _ops.handle_average_backwards_compatibility


def check_num_rank_power_of_2(num_rank):
    """Horovod's: whether num_rank is a positive power of 2."""
    return num_rank > 0 and (num_rank & (num_rank - 1)) == 0
