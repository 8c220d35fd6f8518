"""hvd.keras.DistributedOptimizer and PartialDistributedOptimizer: a copy
of a Keras optimizer whose updates use gradients reduced over the ranks. It
lives in hvd.tensorflow so that hvd.tensorflow.DistributedOptimizer can hand a
Keras optimizer to it without importing hvd.keras (which imports
hvd.tensorflow)."""

from __future__ import annotations

import types

import keras
import tensorflow as tf

import hvd as _hvd
from .. import _ops
from .. import Adasum, Average, global_process_set
from ._compression import Compression
from ._gradients import _local_layer_variables, allreduce_gradients
from ._gradients import reduce_gradients as _reduce_gradients


def _in_xla():
    try:
        from tensorflow.python.framework import ops as _tf_ops
        from tensorflow.python.ops import control_flow_util
        return control_flow_util.GraphOrParentsInXlaContext(_tf_ops.get_default_graph())
    except Exception:  # private API moved: skip the check
        return False


# ---------------------------------------------------------------------------
# DistributedOptimizer.
# ---------------------------------------------------------------------------


def _set(obj, **attrs):
    # Past Keras' attribute tracking: a list of the model's variables kept
    # here must not become optimizer variables.
    for k, v in attrs.items():
        object.__setattr__(obj, k, v)


class _DistributedOptimizerMixin:
    """Overrides apply() (model.fit goes through apply_gradients -> apply):
    gradients are reduced over ranks before the wrapped optimizer's update.

    With backward_passes_per_step = n > 1, each step adds its gradients to
    local accumulators (optimizer variables "hvd_accum" and a step counter
    "hvd_step"); every n-th step the sums (divided by n with
    average_aggregated_gradients) are reduced over ranks and applied, and
    the accumulators are reset. The other steps only count the step in
    `iterations`, as Horovod's Keras optimizer does."""

    def build(self, variables):
        super().build(variables)
        if self._hvd_bpps > 1 and not self._hvd_accums:
            step = self.add_variable(shape=(), initializer="zeros", dtype="int64",
                                     name="hvd_step")
            accums = [self.add_variable_from_reference(v, name="hvd_accum") for v in variables]
            _set(self, _hvd_step=step, _hvd_accums=accums)

    def register_local_var(self, var):
        """Marks a variable as local to this rank: its gradient is not reduced
        (only divided by size, unless scale_local_gradients=False)."""
        self._hvd_local_ids.add(id(var))
        self._hvd_local_keep.vars.append(var)

    def _hvd_reduce(self, grads, variables):
        return _reduce_gradients(grads, variables, self._hvd_local_ids,
                                 self._hvd_scale_local, op=self._hvd_op,
                                 compression=self._hvd_compression,
                                 gradient_predivide_factor=self._hvd_predivide,
                                 name=self._hvd_name, sparse_as_dense=self._hvd_sparse_as_dense,
                                 process_set=self._hvd_process_set)

    def apply(self, grads, trainable_variables=None):
        if _in_xla():
            raise RuntimeError(
                "hvd.keras.DistributedOptimizer: the train step is XLA-compiled, which cannot "
                "run hvd's collectives; compile the model with jit_compile=False")
        grads = list(grads)
        if not grads:
            return None
        if trainable_variables is not None:
            trainable_variables = list(trainable_variables)
            if not self.built:
                with keras.name_scope(self.name, caller=self):
                    self.build(trainable_variables)
                self.built = True
        elif not self.built:
            return super().apply(grads, None)  # Keras' own error
        variables = (trainable_variables if trainable_variables is not None
                     else list(self._trainable_variables))
        parent = super()
        if self._hvd_bpps == 1:
            return self._hvd_apply_reduced(parent, grads, variables, trainable_variables)
        return self._hvd_apply_aggregated(parent, grads, variables, trainable_variables)

    def _hvd_apply_reduced(self, parent, grads, variables, trainable_variables):
        if self._hvd_op != Adasum:
            return parent.apply(self._hvd_reduce(grads, variables), trainable_variables)
        # Adasum (Horovod's delta optimizer): this rank's own step, then
        # var = start + adasum(var - start) over the ranks. Local variables
        # keep their own step. Reads and assignments of a variable run in
        # program order (eagerly, and by tf.function's automatic control
        # dependencies).
        shared = [v for v, g in zip(variables, grads)
                  if g is not None and id(v) not in self._hvd_local_ids]
        starts = [tf.identity(tf.convert_to_tensor(v)) for v in shared]
        parent.apply(grads, trainable_variables)
        deltas = [tf.convert_to_tensor(v) - s for v, s in zip(shared, starts)]
        combined = allreduce_gradients(deltas, op=Adasum, compression=self._hvd_compression,
                                       name=self._hvd_name, process_set=self._hvd_process_set)
        for v, s, d in zip(shared, starts, combined):
            v.assign(s + d)
        return None

    def _hvd_apply_aggregated(self, parent, grads, variables, trainable_variables):
        n = self._hvd_bpps
        index = {id(v): i for i, v in enumerate(self._trainable_variables)}
        accums = [self._hvd_accums[index[id(v)]] for v in variables]
        for acc, g in zip(accums, grads):
            if g is not None:
                acc.assign_add(tf.convert_to_tensor(g))
        self._hvd_step.assign_add(1)
        present = [g is not None for g in grads]

        def communicate():
            sums = [tf.convert_to_tensor(acc) if p else None for acc, p in zip(accums, present)]
            if self._hvd_average_aggregated:
                sums = [s / n if s is not None else None for s in sums]
            self._hvd_apply_reduced(parent, sums, variables, trainable_variables)
            for acc in accums:
                acc.assign(tf.zeros_like(acc))

        def count_only():
            self._iterations.assign_add(1)

        tf.cond(tf.equal(tf.math.floormod(tf.convert_to_tensor(self._hvd_step), n), 0),
                communicate, count_only)
        return None


def _make_distributed(optimizer, name, compression, sparse_as_dense, gradient_predivide_factor,
                      op, backward_passes_per_step, average_aggregated_gradients,
                      scale_local_gradients, local_variables, process_set):
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError("hvd.keras.DistributedOptimizer: expected a keras optimizer, got "
                        f"{type(optimizer).__name__}")
    _hvd._np._target(process_set)  # a registered set this rank is in
    op = _ops.check_op(op)
    if op == Adasum and average_aggregated_gradients:
        raise ValueError("Adasum does not support average_aggregated_gradients == True")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if int(backward_passes_per_step) != backward_passes_per_step or backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be an int >= 1, got "
                         f"{backward_passes_per_step!r}")
    cls = type(optimizer.__class__.__name__, (_DistributedOptimizerMixin, optimizer.__class__),
               {})
    opt = cls.from_config(optimizer.get_config())
    _set(opt, _hvd_bpps=int(backward_passes_per_step), _hvd_accums=None, _hvd_op=op,
         _hvd_compression=compression, _hvd_predivide=float(gradient_predivide_factor),
         _hvd_sparse_as_dense=bool(sparse_as_dense),
         _hvd_average_aggregated=bool(average_aggregated_gradients),
         _hvd_scale_local=bool(scale_local_gradients), _hvd_process_set=process_set,
         _hvd_name=name or f"DistributedOptimizer.{optimizer.name}",
         _hvd_local_ids=set(), _hvd_local_keep=types.SimpleNamespace(vars=[]))
    for v in local_variables:
        opt.register_local_var(v)
    return opt


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """A copy of optimizer (same class and config) whose updates use gradients
    reduced (op, default Average) over all ranks, or over process_set's ranks
    only (Horovod's process_set; a rank outside the set cannot build one).

    backward_passes_per_step: reduce and apply every that many steps, the
    gradients of the steps between accumulated locally (divided by their
    number with average_aggregated_gradients=True). op=hvd.Adasum combines
    the parameter update instead of the gradients, as hvd.torch's and
    Horovod's TensorFlow delta optimizer do: each rank applies its own step
    (the optimizer's state stays local), then every variable becomes
    old + adasum(new - old) over the ranks (variables registered as local
    keep their own step). sparse_as_dense: reduce
    tf.IndexedSlices gradients as dense tensors (else as Horovod does, by
    allgathers). gradient_predivide_factor: with op=Average, gradients are
    scaled by 1/factor before the sum and factor/size after it.
    device_dense, device_sparse (host memory only), num_groups and groups
    (all dense gradients of one dtype already form one grouped allreduce)
    are accepted and change nothing."""
    return _make_distributed(optimizer, name, compression, sparse_as_dense,
                             gradient_predivide_factor, op, backward_passes_per_step,
                             average_aggregated_gradients, scale_local_gradients, [],
                             process_set)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=Average,
                                backward_passes_per_step=1, average_aggregated_gradients=False,
                                groups=None, process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """DistributedOptimizer whose gradients for the trainable weights of
    local_layers (Keras layers) are not reduced: each rank applies its own
    (divided by size unless scale_local_gradients=False)."""
    return _make_distributed(optimizer, name, compression, sparse_as_dense,
                             gradient_predivide_factor, op, backward_passes_per_step,
                             average_aggregated_gradients, scale_local_gradients,
                             _local_layer_variables(local_layers), process_set)
