"""hvd.tensorflow.compression: the names of Horovod's
horovod.tensorflow.compression (``from hvd.tensorflow.compression import
Compression``), hvd.tensorflow's own objects: the base class Compressor,
from which NoneCompressor and FP16Compressor derive, and Compression."""

from ._compression import Compression, Compressor, FP16Compressor, NoneCompressor  # noqa: F401

__all__ = ["Compression", "Compressor", "FP16Compressor", "NoneCompressor"]
