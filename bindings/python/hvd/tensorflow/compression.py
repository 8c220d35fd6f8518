"""hvd.tensorflow.compression: the names of Horovod's
horovod.tensorflow.compression (``from hvd.tensorflow.compression import
Compression``), hvd.tensorflow's own objects. Horovod's base class Compressor
is not here: hvd's compressors are plain classes without one."""

from hvd.tensorflow import Compression, FP16Compressor, NoneCompressor  # noqa: F401

__all__ = ["Compression", "FP16Compressor", "NoneCompressor"]
