"""Gradient compression for hvd.tensorflow (Horovod's
horovod.tensorflow.compression): the base class Compressor, from which
NoneCompressor and FP16Compressor derive, and Compression."""

from __future__ import annotations

import tensorflow as tf

from .. import _ops


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
