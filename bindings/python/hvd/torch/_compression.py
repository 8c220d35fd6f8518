"""hvd.torch.compression: gradient compression for DistributedOptimizer
and the reducing ops (Horovod's horovod.torch.compression): the base class
Compressor, NoneCompressor, FP16Compressor, and Compression (none, fp16)."""

from __future__ import annotations

import torch

from .. import _ops

Compressor = _ops.Compressor
NoneCompressor = _ops.NoneCompressor


class FP16Compressor(Compressor):
    """Sends floating-point gradients as float16 (half the bytes); the sum is
    computed in float32 by the library and cast back to the original dtype."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != torch.float16:
            return tensor.to(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor


__all__ = ["Compression", "Compressor", "FP16Compressor", "NoneCompressor"]
