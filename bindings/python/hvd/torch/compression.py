"""hvd.torch.compression: the names of Horovod's horovod.torch.compression
(``from hvd.torch.compression import Compression``), hvd.torch's own objects."""

from ._compression import Compression, Compressor, FP16Compressor, NoneCompressor  # noqa: F401

__all__ = ["Compression", "Compressor", "FP16Compressor", "NoneCompressor"]
