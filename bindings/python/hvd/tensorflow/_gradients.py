"""Reducing gradients over the ranks: allreduce_gradients,
reduce_gradients (local sources kept), DistributedGradientTape and
PartialDistributedGradientTape."""

from __future__ import annotations

import tensorflow as tf

from .. import _ops
from .. import Average, Sum, global_process_set
from ._collectives import _sparse_allreduce, grouped_allreduce
from ._compression import Compression
from ._execution import _no_autograph, _target


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
