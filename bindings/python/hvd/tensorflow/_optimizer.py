"""hvd.tensorflow.DistributedOptimizer: a tf.compat.v1.train.Optimizer
whose gradients are reduced over the ranks (with local accumulation over
backward passes, or Adasum of the updates); a Keras optimizer goes to
hvd.keras's DistributedOptimizer (hvd/tensorflow/_keras_optimizer.py)."""

from __future__ import annotations

import tensorflow as tf

from .. import _ops
from .. import Adasum, Average, global_process_set
from ._compression import Compression
from ._execution import _no_autograph, _target
from ._gradients import allreduce_gradients, reduce_gradients


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
        self._aggregation = {}  # graph (None eagerly) -> (counter, {id(variable): accumulator})
        self._aggregated_vars = []  # the variables those ids are of

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
            # keyed by identity, not Variable.ref() (Keras 3 variables have none)
            for v, g in zip(variables, grads):
                if g is not None and id(v) not in accums:
                    accums[id(v)] = variable(tf.zeros(v.shape, g.dtype), "aggregated_gradient")
                    self._aggregated_vars.append(v)  # keeps id(v) this variable's
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
        adds = [accums[id(variables[i])].assign_add(dense[i], use_locking=self._use_locking)
                for i in present]
        with tf.control_dependencies(adds):
            count = counter.assign_add(1, use_locking=True)
        n = self._bpps

        def communicate():
            sums = [accums[id(variables[i])].read_value() for i in present]
            reduced = self._reduce(sums, [variables[i] for i in present])
            if self._average_aggregated:
                reduced = [r / tf.cast(n, r.dtype) for r in reduced]
            with tf.control_dependencies(reduced):
                clear = [accums[id(variables[i])].assign(tf.zeros_like(r))
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
    import keras  # loaded only for a Keras optimizer
    if isinstance(optimizer, keras.optimizers.Optimizer):
        from . import _keras_optimizer
        return _keras_optimizer.DistributedOptimizer(
            optimizer, name=name, compression=compression, sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor, op=op,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients,
            process_set=process_set, scale_local_gradients=scale_local_gradients)
    raise ValueError("Provided optimizer doesn't inherit from either legacy TensorFlow or Keras "
                     f"optimizer: {optimizer!r}")
