"""Framework-neutral machinery under every frontend: handles, naming, and the
collectives written once over an *adapter* that maps a framework's arrays to
(pointer, dtype, shape) and back (numpy here, torch in hvd.torch).

Memory rules (hvd.h): the hvd_tensor_t descriptor is read during the *_async
call only, but the data buffers must stay valid until the operation
completes. A Handle therefore keeps every buffer it handed to the library
alive until the operation is over -- even when the caller drops the Handle
early (it then moves to an orphan list that is reaped as operations finish).
Results the library owns (allgather, alltoall, reducescatter) are not copied:
the returned array points into the handle's memory and releases the handle
when the array is garbage collected.
"""

from __future__ import annotations

import ctypes
import itertools
import re
import sys
import threading
import time
import warnings
from ctypes import byref, c_char_p, c_int32, c_int64, c_size_t, c_void_p

from . import _c_api as C

# How long one hvd_handle_wait call may block before control returns to
# Python (so Ctrl-C and timeouts are honoured); the op itself is not delayed.
_WAIT_SLICE_S = 0.5


def _waiting_on(message):
    """The part of a timed-out wait's library message that names the ranks
    that have not submitted the tensor ("; ranks [2] have not submitted 'x'"),
    or "" when the library does not know them yet."""
    m = re.search(r"ranks \[[0-9, ]*\] have not submitted '.*'$", message or "")
    return "; " + m.group(0) if m else ""


class PerformanceWarning(UserWarning):
    """An input had to be copied (non-contiguous, or not in native byte order)."""


# ---------------------------------------------------------------------------
# Buffers as the C library sees them.
# ---------------------------------------------------------------------------


class Buf:
    """One contiguous buffer handed to the library.

    ptr/dtype/shape describe the memory; ``contig`` is the object that owns
    it (kept alive while the op runs); ``orig`` is what the caller passed
    (differs from contig when a copy was needed: in-place ops write back).
    device/stream: HVD_DEVICE_CPU and None for host memory, else the CUDA
    device ordinal and the cudaStream_t (an int; 0 = the legacy default
    stream) the data is ordered on."""

    __slots__ = ("ptr", "dtype", "shape", "contig", "orig", "copied", "nbytes", "device",
                 "stream", "out", "inplace", "ad")

    def __init__(self, ptr, dtype, shape, contig, orig, copied, nbytes,
                 device=C.HVD_DEVICE_CPU, stream=None):
        self.ptr = ptr
        self.dtype = dtype
        self.shape = tuple(shape)  # ints: a numpy shape or a torch.Size
        self.contig = contig
        self.orig = orig
        self.copied = copied
        self.nbytes = nbytes
        self.device = int(device)
        self.stream = stream
        # An op whose result is written into this buffer, or into `out`
        # (allreduce, broadcast): see result().
        self.out = None
        self.inplace = False
        self.ad = None

    def result(self):
        """The result of the op written into this buffer (in place: into the
        caller's own, copied back where the input was copied) or into `out`."""
        if not self.inplace:
            return self.out
        if self.copied:
            self.ad.writeback(self, self.contig)
        return self.orig

    def descriptor(self):
        """(HvdTensor, shape array): both must live until the C call returns."""
        shape = self.shape
        ndim = len(shape)
        if ndim > C.HVD_MAX_NDIM:
            raise ValueError(f"hvd: tensors may have at most {C.HVD_MAX_NDIM} dimensions, "
                             f"got {ndim}")
        shape_arr = _SHAPE_ARRAYS[ndim](*shape)
        t = C.HvdTensor()
        t.data = self.ptr or None
        t.dtype = self.dtype
        t.ndim = ndim
        t.shape = shape_arr  # the array's address (ctypes converts, without a cast)
        t.device = self.device
        t.stream = self.stream or None
        return t, shape_arr


# The shape array type of each rank (a scalar's holds one unused entry).
_SHAPE_ARRAYS = tuple(c_int64 * max(n, 1) for n in range(C.HVD_MAX_NDIM + 1))

_PACKAGE_DIR = __file__.rsplit("/", 1)[0] + "/"


def warn_copy(what, reason):
    # Point the warning at the caller's line, outside this package.
    level, f = 2, sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_PACKAGE_DIR):
        level += 1
        f = f.f_back
    warnings.warn(
        f"hvd: {what} is {reason}; it is copied once into a contiguous buffer for this "
        "operation (pass a C-contiguous array in native byte order to avoid the copy)",
        PerformanceWarning, stacklevel=level)


_E = "<" if sys.byteorder == "little" else ">"
# The numpy type string of each dtype whose result numpy and torch view as
# it is (bfloat16 has none in numpy, uint16 none in every torch: those are
# viewed as bytes and cast by the frontend).
_TYPESTR = {C.HVD_UINT8: "|u1", C.HVD_INT8: "|i1", C.HVD_INT16: _E + "i2",
            C.HVD_INT32: _E + "i4", C.HVD_INT64: _E + "i8", C.HVD_FLOAT16: _E + "f2",
            C.HVD_FLOAT32: _E + "f4", C.HVD_FLOAT64: _E + "f8", C.HVD_BOOL: "|b1"}
_ITEMSIZE = {C.HVD_UINT8: 1, C.HVD_INT8: 1, C.HVD_UINT16: 2, C.HVD_INT16: 2, C.HVD_INT32: 4,
             C.HVD_INT64: 8, C.HVD_FLOAT16: 2, C.HVD_BFLOAT16: 2, C.HVD_FLOAT32: 4,
             C.HVD_FLOAT64: 8, C.HVD_BOOL: 1}


class HandleMemory:
    """Memory owned by a completed hvd handle; releases the handle when
    collected. Exposes it through the numpy array interface: as the
    result's dtype and shape where those are given (``shaped``), else as
    its bytes."""

    __slots__ = ("_raw", "_ptr", "_nbytes", "_typestr", "_shape", "__weakref__")

    def __init__(self, raw, ptr, nbytes, typestr=None, shape=None):
        self._raw = raw
        self._ptr = ptr
        self._nbytes = nbytes
        self._typestr = typestr
        self._shape = shape

    @property
    def shaped(self):
        """Whether the array interface has the result's dtype and shape."""
        return self._typestr is not None

    @property
    def __array_interface__(self):
        if self._typestr is not None:
            return {"shape": self._shape, "typestr": self._typestr, "data": (self._ptr, False),
                    "version": 3}
        return {"shape": (self._nbytes,), "typestr": "|u1", "data": (self._ptr, False),
                "version": 3}

    def __del__(self):
        raw, self._raw = self._raw, None
        if raw:
            try:
                C.lib().hvd_handle_release(raw)
            except Exception:  # interpreter shutdown
                pass


class HandleDeviceMemory(HandleMemory):
    """A completed handle's result in CUDA device memory (a transport that
    takes CUDA memory left it there); exposes it through the CUDA array
    interface, so frameworks view it without a copy. The result is complete
    when the handle is: no stream to synchronize with."""

    __slots__ = ()

    @property
    def __array_interface__(self):
        raise AttributeError("device memory has no host array interface")

    @property
    def __cuda_array_interface__(self):
        return {"shape": (self._nbytes,), "typestr": "|u1", "data": (self._ptr, False),
                "version": 3, "stream": None}


# ---------------------------------------------------------------------------
# Handles.
# ---------------------------------------------------------------------------

_orphans_lock = threading.Lock()
_orphans = []  # (raw handle, keep-alive objects) of dropped, still-running ops


def reap_orphans(wait=False):
    """Releases dropped handles whose operation finished (all, after waiting,
    when wait=True: used at shutdown, after pending ops were aborted)."""
    with _orphans_lock:
        if not _orphans:
            return
        pending = list(_orphans)
        _orphans.clear()
    keep = []
    lib = C.lib()
    for raw, objs in pending:
        if wait:
            lib.hvd_handle_wait(raw, -1.0)
        if lib.hvd_handle_poll(raw) == C.HVD_IN_PROGRESS:
            keep.append((raw, objs))
        else:
            lib.hvd_handle_release(raw)
    if keep:
        with _orphans_lock:
            _orphans.extend(keep)


# Set by a frontend whose tensors may be CUDA memory (hvd.torch): device
# ordinal -> the cudaStream_t (an int) that code waiting on a handle goes on
# with. With stream-ordered completion (HVD_CUDA_ASYNC_COMPLETION=1) a
# CUDA result is ordered on the stream it was submitted on; the waiting
# code's stream is made to wait for it (no host block). Without it the call
# has nothing to do.
consumer_stream = None


def _cuda_device_of(keep):
    """The CUDA device of the first device buffer among an op's keep-alive
    objects, or None."""
    if isinstance(keep, Buf):
        keep = (keep,)
    for k in keep or ():
        if isinstance(k, Buf):
            if k.device != C.HVD_DEVICE_CPU:
                return k.device
        elif isinstance(k, (tuple, list)):
            d = _cuda_device_of(k)
            if d is not None:
                return d
    return None


_UNKNOWN = object()  # a handle's device not given: found among its buffers when needed


class Handle:
    """A pending collective. ``synchronize(handle)`` (or ``handle.wait()``)
    waits and returns its result; ``poll(handle)`` tells whether it is done.

    The handle keeps the operation's buffers alive until it completes."""

    __slots__ = ("_raw", "_keep", "_finish", "_state", "_result", "_error", "_what", "_lock",
                 "_device", "_kind")

    def __init__(self, raw, keep, finish, what, device=_UNKNOWN, kind=None):
        """keep: what the op's memory belongs to; finish(raw) -> (result,
        the result took the handle over), or None for a Buf's result();
        what: the operation in words, or with kind its name (worded when
        needed); device: the CUDA device of its buffers, None for host
        memory. As few objects as can be: a handle lives for a training
        step, and every object that does costs Python's collector."""
        self._raw = raw
        self._keep = keep
        self._finish = finish
        self._state = 0  # 0 pending, 1 done ok, 2 failed
        self._result = None
        self._error = None
        self._what = what
        self._lock = threading.Lock()
        self._device = device
        self._kind = kind

    @property
    def what(self):
        return self._what if self._kind is None else f"{self._kind} '{self._what}'"

    def __repr__(self):
        state = ("pending", "done", "failed")[self._state]
        return f"<hvd.Handle {self.what} {state}>"

    def poll(self) -> bool:
        """True once the operation completed (successfully or not)."""
        if self._state:
            return True
        return C.lib().hvd_handle_poll(self._raw) != C.HVD_IN_PROGRESS

    def wait(self, timeout=None):
        """Waits for completion and returns the result; raises the op's error.
        timeout (seconds) raises HvdTimeoutError and leaves the handle usable."""
        with self._lock:
            if self._state == 0:
                self._wait_raw(timeout)
            if self._state == 2:
                raise self._error
            return self._result

    def _wait_raw(self, timeout):
        lib = C.lib()
        wait = lib.hvd_handle_wait
        raw = self._raw
        if timeout is None:
            # In slices, so that Ctrl-C is seen between them.
            st = wait(raw, _WAIT_SLICE_S)
            while st == C.HVD_ERR_TIMEOUT and lib.hvd_handle_poll(raw) == C.HVD_IN_PROGRESS:
                st = wait(raw, _WAIT_SLICE_S)
        else:
            deadline = time.monotonic() + float(timeout)
            while True:
                slice_s = max(0.0, min(_WAIT_SLICE_S, deadline - time.monotonic()))
                st = wait(raw, slice_s)
                if st == C.HVD_ERR_TIMEOUT and lib.hvd_handle_poll(raw) == C.HVD_IN_PROGRESS:
                    # Our wait slice ran out, not the operation.
                    if time.monotonic() >= deadline:
                        raise C.HvdTimeoutError(
                            C.HVD_ERR_TIMEOUT,
                            f"{self.what} did not complete within {timeout} s (still pending; "
                            f"wait again or synchronize){_waiting_on(C.last_error())}")
                    continue
                break
        self._raw = None
        try:
            if st < 0:
                self._error = C.make_error(st, C.last_error() or C.status_string(st))
                self._state = 2
                return
            try:
                if consumer_stream is not None:
                    device = self._device
                    if device is _UNKNOWN:
                        device = _cuda_device_of(self._keep)
                    if device is not None and "hvd_handle_stream_wait" not in C.MISSING:
                        C.check_call(lib.hvd_handle_stream_wait(raw, consumer_stream(device)
                                                                or None))
                if self._finish is None:
                    result, transferred = self._keep.result(), False
                else:
                    result, transferred = self._finish(raw)
            except BaseException as e:  # noqa: B902 - recorded and re-raised by wait()
                self._error, self._state, transferred = e, 2, False
                return
            self._result, self._state = result, 1
            if transferred:
                raw = None  # the result owns the handle now (HandleMemory)
        finally:
            self._keep = None
            self._finish = None
            if raw:
                lib.hvd_handle_release(raw)

    def __del__(self):
        raw = getattr(self, "_raw", None)
        if not raw:
            return
        try:
            lib = C.lib()
            if lib.hvd_handle_poll(raw) == C.HVD_IN_PROGRESS:
                with _orphans_lock:
                    _orphans.append((raw, self._keep))
            else:
                lib.hvd_handle_release(raw)
        except Exception:  # interpreter shutdown
            pass


def synchronize(handle):
    """Waits for an async operation and returns its result (raises its error)."""
    if not isinstance(handle, Handle):
        raise TypeError(f"hvd.synchronize: expected an hvd Handle, got {type(handle).__name__}")
    return handle.wait()


def poll(handle) -> bool:
    """True if the async operation has completed (synchronize() then returns at once)."""
    if not isinstance(handle, Handle):
        raise TypeError(f"hvd.poll: expected an hvd Handle, got {type(handle).__name__}")
    return handle.poll()


# ---------------------------------------------------------------------------
# Names: deterministic across ranks (a per-op counter per context), as long
# as the ranks issue their unnamed operations in the same order -- which
# unnamed operations require anyway.
# ---------------------------------------------------------------------------


class Namer:
    def __init__(self):
        self._lock = threading.Lock()
        self._counters = {}

    def reset(self):
        with self._lock:
            self._counters.clear()

    def __call__(self, op, name=None):
        if name is not None:
            if not isinstance(name, str) or not name:
                raise ValueError(f"hvd: name must be a non-empty str, got {name!r}")
            return name
        with self._lock:
            c = self._counters.setdefault(op, itertools.count())
            return f"{op}.noname.{next(c)}"


# ---------------------------------------------------------------------------
# The collectives, over an adapter.
#
# An adapter provides:
#   buf(x, what, writable) -> Buf          (copies once if it must, warns)
#   empty(buf) -> (obj, ptr)                 output like buf
#   owned(mem: HandleMemory|None, buf, shape) -> obj   wraps handle-owned memory
#   writeback(buf, result)                  for in-place ops on copied input
#   splits(x) -> list[int]                  alltoall splits as ints
#   make_splits(np_int64_array) -> obj      received splits in the framework's type
# ---------------------------------------------------------------------------

_VALID_OPS = {C.HVD_SUM, C.HVD_AVERAGE, C.HVD_MIN, C.HVD_MAX, C.HVD_PRODUCT, C.HVD_ADASUM}


def check_op(op):
    if op.__class__ is int and op in _VALID_OPS:
        return op
    try:
        o = int(op)
    except (TypeError, ValueError):
        o = None
    if o not in _VALID_OPS or isinstance(op, bool):
        raise ValueError("hvd: op must be one of hvd.Sum, Average, Min, Max, Product, Adasum; "
                         f"got {op!r}")
    return o


class Compressor:
    """Horovod's base class of the compressors: compress(tensor) -> (tensor,
    ctx) before the collective, decompress(tensor, ctx) -> tensor after it.
    A custom compressor derives from it and overrides both. Shared by
    hvd.torch and hvd.tensorflow (it touches no framework)."""

    @staticmethod
    def compress(tensor):
        """Compresses a tensor; returns it and the context decompress needs."""
        raise NotImplementedError("Compressor.compress: a compressor overrides it")

    @staticmethod
    def decompress(tensor, ctx):
        """Decompresses a tensor with the context compress returned."""
        raise NotImplementedError("Compressor.decompress: a compressor overrides it")


class NoneCompressor(Compressor):
    """Leaves the tensor as it is."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


def handle_average_backwards_compatibility(op, average):
    """Horovod's helper, in hvd.tensorflow and hvd.torch alike: the reduction
    op from op and the deprecated average flag (ValueError for both;
    average=True means Average, False Sum; neither means Average), warning
    when average is used."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                      DeprecationWarning, stacklevel=2)
        return C.HVD_AVERAGE if average else C.HVD_SUM
    return C.HVD_AVERAGE if op is None else op


def _submit(fn_name, *args):
    """Calls an *_async function; returns the raw handle."""
    if _orphans:
        reap_orphans()
    h = c_void_p()
    ret = getattr(C.lib(), fn_name)(*args, byref(h))
    if ret < 0:
        C.check_call(ret)
    return h.value


def _encode(name):
    return name.encode("utf-8")


def _output(ad, buf, inplace):
    """Where an op writes its result (into buf itself when in place); its pointer."""
    buf.ad = ad
    buf.inplace = inplace
    if inplace:
        return buf.ptr
    buf.out, ptr = ad.empty(buf)
    return ptr


def allreduce_async(ctx, ad, x, op, name, prescale, postscale, inplace):
    op = check_op(op)
    buf = ad.buf(x, "allreduce input", writable=inplace)
    out_ptr = _output(ad, buf, inplace)
    desc, shape_arr = buf.descriptor()
    raw = _submit("hvd_allreduce_async", ctx, _encode(name), byref(desc), out_ptr or None, op,
                  float(prescale), float(postscale))
    return Handle(raw, buf, None, name, None if buf.device == C.HVD_DEVICE_CPU else buf.device,
                  "allreduce")


def grouped_allreduce_async(ctx, ad, xs, op, name, prescale, postscale, inplace):
    op = check_op(op)
    xs = list(xs)
    if not xs:
        raise ValueError("hvd: grouped_allreduce needs at least one tensor")
    bufs = [ad.buf(x, f"grouped_allreduce input {i}", writable=inplace) for i, x in enumerate(xs)]
    outs = []
    out_ptrs = []
    for b in bufs:
        if inplace:
            outs.append(b.contig)
            out_ptrs.append(b.ptr)
        else:
            o, p = ad.empty(b)
            outs.append(o)
            out_ptrs.append(p)
    n = len(bufs)
    names = [_encode(f"{name}.{i}") for i in range(n)]
    names_arr = (c_char_p * n)(*names)
    descs = (C.HvdTensor * n)()
    shapes = []
    for i, b in enumerate(bufs):
        d, s = b.descriptor()
        descs[i] = d
        shapes.append(s)
    outs_arr = (c_void_p * n)(*[p or None for p in out_ptrs])
    raw = _submit("hvd_grouped_allreduce_async", ctx, n, names_arr, descs, outs_arr, op,
                  float(prescale), float(postscale))

    def finish(_raw):
        if inplace:
            for b in bufs:
                if b.copied:
                    ad.writeback(b, b.contig)
            return [b.orig for b in bufs], False
        return outs, False

    return Handle(raw, (bufs, outs), finish, f"grouped allreduce '{name}'")


def broadcast_async(ctx, ad, x, root, name, inplace):
    buf = ad.buf(x, "broadcast input", writable=inplace)
    out_ptr = _output(ad, buf, inplace)
    desc, shape_arr = buf.descriptor()
    raw = _submit("hvd_broadcast_async", ctx, _encode(name), byref(desc), out_ptr or None,
                  int(root))
    return Handle(raw, buf, None, name, None if buf.device == C.HVD_DEVICE_CPU else buf.device,
                  "broadcast")


def _result_shape(raw, buf, nbytes):
    """The shape of the result of an op along the first dimension (allgather,
    reducescatter, alltoall): its other dimensions are the input's, so its
    rows follow from its bytes; asked of the handle where a row has none."""
    trailing = buf.shape[1:]
    row = _ITEMSIZE[buf.dtype]
    for d in trailing:
        row *= d
    if row > 0 and nbytes % row == 0:
        return (nbytes // row,) + tuple(trailing)
    ndim = c_int32(0)
    dims = (c_int64 * C.HVD_MAX_NDIM)()
    C.check_call(C.lib().hvd_handle_output_shape(raw, dims, C.HVD_MAX_NDIM, byref(ndim)))
    return tuple(dims[i] for i in range(ndim.value))


def _owned_result(raw, ad, buf):
    """(result object, transferred) for ops whose result the handle owns."""
    lib = C.lib()
    data = c_void_p()
    nbytes = c_size_t(0)
    if (buf.device != C.HVD_DEVICE_CPU and hasattr(ad, "owned_device")
            and "hvd_handle_output_device" not in C.MISSING):
        # A transport that takes CUDA memory leaves the result on the device:
        # viewed there, without the copy to host and back.
        device = c_int32(C.HVD_DEVICE_CPU)
        C.check_call(lib.hvd_handle_output_device(raw, byref(data), byref(nbytes), byref(device)))
        if device.value != C.HVD_DEVICE_CPU:
            shape = _result_shape(raw, buf, nbytes.value)
            if not data.value or nbytes.value == 0:
                return ad.owned(None, buf, shape), False
            mem = HandleDeviceMemory(raw, data.value, nbytes.value)
            return ad.owned_device(mem, buf, shape), True
    C.check_call(lib.hvd_handle_output(raw, byref(data), byref(nbytes)))
    n = nbytes.value
    shape = _result_shape(raw, buf, n)
    if not data.value or n == 0:
        return ad.owned(None, buf, shape), False
    # Viewed as the result's dtype and shape at once where numpy has the
    # dtype (no byte view, cast and reshape after it).
    mem = HandleMemory(raw, data.value, n, _TYPESTR.get(buf.dtype), shape)
    return ad.owned(mem, buf, shape), True


def _require_rows(buf, what):
    if len(buf.shape) == 0:
        raise ValueError(f"hvd: {what} needs a tensor with at least one dimension (it splits or "
                         "joins along the first); got a scalar")


def allgather_async(ctx, ad, x, name):
    buf = ad.buf(x, "allgather input", writable=False)
    _require_rows(buf, "allgather")
    desc, shape_arr = buf.descriptor()
    raw = _submit("hvd_allgather_async", ctx, _encode(name), byref(desc))
    return Handle(raw, (buf,), lambda r: _owned_result(r, ad, buf), f"allgather '{name}'")


def reducescatter_async(ctx, ad, x, op, name, prescale, postscale):
    op = check_op(op)
    buf = ad.buf(x, "reducescatter input", writable=False)
    _require_rows(buf, "reducescatter")
    desc, shape_arr = buf.descriptor()
    raw = _submit("hvd_reducescatter_async", ctx, _encode(name), byref(desc), op,
                  float(prescale), float(postscale))
    return Handle(raw, (buf,), lambda r: _owned_result(r, ad, buf), f"reducescatter '{name}'")


def alltoall_async(ctx, ad, x, splits, name, world_size, always_splits=False):
    """The result is the output, or (output, received splits) when splits were
    given or always_splits is set."""
    buf = ad.buf(x, "alltoall input", writable=False)
    _require_rows(buf, "alltoall")
    splits_arr = None
    if splits is not None:
        s = ad.splits(splits)
        if len(s) != world_size:
            raise ValueError(f"hvd: alltoall splits has {len(s)} entries, need one per rank "
                             f"({world_size})")
        splits_arr = (c_int64 * world_size)(*s)
    desc, shape_arr = buf.descriptor()
    raw = _submit("hvd_alltoall_async", ctx, _encode(name), byref(desc), splits_arr)

    def finish(r):
        recv = (c_int64 * world_size)()
        C.check_call(C.lib().hvd_handle_recv_splits(r, recv, world_size))
        out, transferred = _owned_result(r, ad, buf)
        if splits is None and not always_splits:
            return out, transferred
        return (out, ad.make_splits(list(recv))), transferred

    return Handle(raw, (buf, splits_arr), finish, f"alltoall '{name}'")


def barrier_async(ctx):
    raw = _submit("hvd_barrier_async", ctx)
    return Handle(raw, (), lambda r: (None, False), "barrier")


def join_async(ctx, ranks=None):
    """The handle's result: the rank that joined last (Horovod's join() value),
    mapped through `ranks` (a process set's job ranks) where given. A library
    whose join has no result (before it had one) gives None."""
    raw = _submit("hvd_join_async", ctx)

    def finish(r):
        lib = C.lib()
        data = c_void_p()
        nbytes = c_size_t(0)
        C.check_call(lib.hvd_handle_output(r, byref(data), byref(nbytes)))
        if not data.value or nbytes.value < 4:
            return None, False
        last = c_int32.from_address(data.value).value
        return (ranks[last] if ranks is not None and 0 <= last < len(ranks) else last), False

    return Handle(raw, (), finish, "join")


# ---------------------------------------------------------------------------
# Grouped allgather / reducescatter. The C API has no grouped form of these:
# every member is submitted as its own operation, named f"{name}.{i}" (as the
# members of a grouped allreduce are), and one GroupHandle stands for them all.
# The members are negotiated (and fused) independently, so unlike a grouped
# allreduce a member may complete before the others are submitted elsewhere.
# ---------------------------------------------------------------------------


class GroupHandle(Handle):
    """Several pending operations as one handle: ``wait()`` (``synchronize``)
    returns their results as a list, in member order (or combine(list) when
    combine is given); ``poll()`` is True once all have completed. When a member
    fails, the others are still waited for (none is left in flight) and the
    first error is raised."""

    __slots__ = ("_members", "_combine")

    def __init__(self, members, what, combine=None):
        super().__init__(None, None, None, what)
        self._members = list(members)
        self._combine = combine

    def poll(self) -> bool:
        return all(m.poll() for m in self._members)

    def wait(self, timeout=None):
        with self._lock:
            if self._state == 0:
                deadline = None if timeout is None else time.monotonic() + float(timeout)
                results, error = [], None
                for m in self._members:
                    left = None if deadline is None else max(0.0, deadline - time.monotonic())
                    try:
                        results.append(m.wait(left))
                    except C.HvdTimeoutError as e:
                        if not m.poll():  # our wait ran out: the group stays usable
                            raise C.HvdTimeoutError(
                                C.HVD_ERR_TIMEOUT,
                                f"{self.what} did not complete within {timeout} s (still "
                                f"pending; wait again or synchronize){_waiting_on(str(e))}") from e
                        error = error or e
                    except BaseException as e:  # noqa: B902 - re-raised below
                        error = error or e
                if error is None and self._combine is not None:
                    try:
                        results = self._combine(results)
                    except BaseException as e:  # noqa: B902 - re-raised below
                        error = e
                if error is not None:
                    self._error, self._state = error, 2
                else:
                    self._result, self._state = results, 1
                self._members, self._combine = [], None
            if self._state == 2:
                raise self._error
            return self._result


def _group_inputs(ad, xs, op_name):
    xs = list(xs)
    if not xs:
        raise ValueError(f"hvd: {op_name} needs at least one tensor")
    bufs = [ad.buf(x, f"{op_name} input {i}", writable=False) for i, x in enumerate(xs)]
    for b in bufs:
        _require_rows(b, op_name)
    return bufs


def grouped_allgather_async(ctx, ad, xs, name):
    """Allgathers every tensor of xs; member i is named f"{name}.{i}"."""
    bufs = _group_inputs(ad, xs, "grouped_allgather")  # all checked before any is submitted
    members = []
    for i, buf in enumerate(bufs):
        member = f"{name}.{i}"
        desc, shape_arr = buf.descriptor()
        raw = _submit("hvd_allgather_async", ctx, _encode(member), byref(desc))
        members.append(Handle(raw, (buf,), lambda r, b=buf: _owned_result(r, ad, b),
                              f"allgather '{member}'"))
    return GroupHandle(members, f"grouped allgather '{name}'")


def grouped_reducescatter_async(ctx, ad, xs, op, name, prescale, postscale):
    """Reducescatters every tensor of xs; member i is named f"{name}.{i}"."""
    op = check_op(op)
    bufs = _group_inputs(ad, xs, "grouped_reducescatter")
    members = []
    for i, buf in enumerate(bufs):
        member = f"{name}.{i}"
        desc, shape_arr = buf.descriptor()
        raw = _submit("hvd_reducescatter_async", ctx, _encode(member), byref(desc), op,
                      float(prescale), float(postscale))
        members.append(Handle(raw, (buf,), lambda r, b=buf: _owned_result(r, ad, b),
                              f"reducescatter '{member}'"))
    return GroupHandle(members, f"grouped reducescatter '{name}'")


def alltoall_recv_async(ctx, ad, x, splits, name, world_size):
    """alltoall whose result is always (output, received splits), also for an
    even split (splits None): what its gradient needs."""
    return alltoall_async(ctx, ad, x, splits, name, world_size, always_splits=True)
