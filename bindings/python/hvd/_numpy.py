"""numpy arrays as hvd buffers: zero-copy for C-contiguous arrays in native
byte order; anything else is copied once (with a PerformanceWarning)."""

from __future__ import annotations

import numpy as np

from . import _c_api as C
from ._ops import Buf, warn_copy

_TO_HVD = {
    np.dtype(np.uint8): C.HVD_UINT8,
    np.dtype(np.int8): C.HVD_INT8,
    np.dtype(np.uint16): C.HVD_UINT16,
    np.dtype(np.int16): C.HVD_INT16,
    np.dtype(np.int32): C.HVD_INT32,
    np.dtype(np.int64): C.HVD_INT64,
    np.dtype(np.float16): C.HVD_FLOAT16,
    np.dtype(np.float32): C.HVD_FLOAT32,
    np.dtype(np.float64): C.HVD_FLOAT64,
    np.dtype(np.bool_): C.HVD_BOOL,
}

SUPPORTED = ("uint8, int8, uint16, int16, int32, int64, float16, float32, float64, bool "
             "and bfloat16 (ml_dtypes)")


def hvd_dtype(dt: np.dtype) -> int:
    """hvd_dtype_t for a numpy dtype (any byte order); TypeError if unsupported."""
    native = dt.newbyteorder("=") if dt.byteorder not in ("=", "|") else dt
    code = _TO_HVD.get(native)
    if code is None and native.name == "bfloat16" and native.itemsize == 2:
        code = C.HVD_BFLOAT16  # ml_dtypes.bfloat16 (ships with TensorFlow / JAX)
    if code is None:
        raise TypeError(f"hvd: dtype {dt} is not supported; supported: {SUPPORTED}")
    return code


def _dlpack_device(x):
    """The DLPack device type of x (1: the CPU), or None where x has none."""
    fn = getattr(x, "__dlpack_device__", None)
    if fn is None:
        return None
    try:
        return int(fn()[0])
    except Exception:  # not a DLPack producer after all
        return None


class NumpyAdapter:
    name = "numpy"

    def buf(self, x, what, writable):
        if type(x) is np.ndarray:  # the common case, first
            return self._array_buf(x, what, writable)
        if not isinstance(x, np.ndarray) and (hasattr(x, "__cuda_array_interface__")
                                              or _dlpack_device(x) not in (None, 1)):
            raise C.UnsupportedError(
                C.HVD_ERR_UNSUPPORTED,
                f"hvd: {what} ({type(x).__module__}.{type(x).__name__}) is device memory; the "
                "numpy frontend moves host memory only: use hvd.torch for CUDA tensors, or copy "
                "it to the host first (e.g. cupy.asnumpy)")
        if isinstance(x, np.ndarray):
            arr = x
        elif writable:
            raise TypeError(f"hvd: in-place operations need a numpy array, got {type(x).__name__}")
        else:
            arr = np.asarray(x)
        return self._array_buf(arr, what, writable)

    def _array_buf(self, arr, what, writable):
        code = _TO_HVD.get(arr.dtype)
        if code is None:
            code = hvd_dtype(arr.dtype)
        if writable and not arr.flags.writeable:
            raise ValueError(f"hvd: {what} is read-only; an in-place operation must write to it")
        copied = False
        contig = arr
        if not arr.dtype.isnative:
            warn_copy(what, f"in non-native byte order ({arr.dtype.str})")
            contig = np.array(arr, dtype=arr.dtype.newbyteorder("="), order="C", copy=True)
            copied = True
        elif not arr.flags.c_contiguous:
            warn_copy(what, f"not C-contiguous (strides {arr.strides}, shape {arr.shape})")
            contig = np.array(arr, order="C", copy=True)
            copied = True
        ptr = contig.ctypes.data if contig.size else 0
        return Buf(ptr, code, contig.shape, contig, arr, copied, contig.nbytes)

    def empty(self, buf):
        out = np.empty(buf.shape, dtype=buf.contig.dtype)
        return out, (out.ctypes.data if out.size else 0)

    def owned(self, mem, buf, shape):
        dt = buf.contig.dtype
        if mem is None:
            return np.empty(shape, dtype=dt)
        a = np.asarray(mem)
        return a if mem.shaped else a.view(dt).reshape(shape)

    def writeback(self, buf, result):
        buf.orig[...] = result

    def splits(self, s):
        a = np.asarray(s)
        if a.ndim != 1 or not (np.issubdtype(a.dtype, np.integer) or a.size == 0):
            raise TypeError(f"hvd: alltoall splits must be a 1-d sequence of ints, got {s!r}")
        return [int(v) for v in a]

    def make_splits(self, values):
        return np.asarray(values, dtype=np.int64)


NUMPY = NumpyAdapter()
