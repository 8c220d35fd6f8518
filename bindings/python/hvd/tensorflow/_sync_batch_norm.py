"""hvd.tensorflow.SyncBatchNormalization (Horovod's
horovod.tensorflow.sync_batch_norm): a Keras BatchNormalization with the
statistics of the global batch. hvd.tensorflow and hvd.keras import this
module on first use of the name, so that `import hvd.tensorflow` does not load
Keras."""

from __future__ import annotations

import keras
import tensorflow as tf

from .. import Sum
from ._collectives import allreduce


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """Horovod's SyncBatchNormalization: a Keras BatchNormalization whose
    training-time batch statistics are those of the global batch (every
    rank's, which may differ in size): per-channel sums, sums of squares
    and counts are summed over ranks in one allreduce, and the mean and
    variance come from them (var = E[x^2] - E[x]^2, as Horovod computes
    it). The allreduce is differentiable, so the backward pass is the
    one of BatchNormalization over the global batch. Every rank must call
    the layer in training alike (it runs a collective); inference uses
    the moving statistics, as BatchNormalization does. fused (a Keras 2
    argument that Keras 3 no longer has; Horovod's tests build the layer with
    fused=False) is accepted and ignored."""

    def __init__(self, *args, fused=None, **kwargs):
        super().__init__(*args, **kwargs)

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
