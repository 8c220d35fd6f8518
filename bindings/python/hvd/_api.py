"""The public collectives, written once and bound to a context and an array
adapter: ``hvd`` binds them to the default context and numpy, ``hvd.torch``
to the default context and torch, and ``hvd.Context`` to its own context."""

from __future__ import annotations

import ctypes
import pickle
import sys
import threading
import traceback
import types

import numpy as np

from . import _c_api as C
from . import _ops
from ._numpy import NUMPY

Sum = C.HVD_SUM
Average = C.HVD_AVERAGE
Min = C.HVD_MIN
Max = C.HVD_MAX
Product = C.HVD_PRODUCT
# Adaptive summation (Horovod's Adasum): float16/bfloat16/float32/float64,
# allreduce and grouped allreduce only; see include/hvd.h.
Adasum = C.HVD_ADASUM

_LOG_LEVELS = {"error": C.HVD_LOG_ERROR, "warning": C.HVD_LOG_WARNING, "info": C.HVD_LOG_INFO,
               "debug": C.HVD_LOG_DEBUG, "trace": C.HVD_LOG_TRACE}


def _resolve_op(op, average, default=Average):
    if op is not None and average is not None:
        raise ValueError("hvd: pass op or (deprecated) average, not both")
    if op is None:
        op = default if average is None else (Average if average else Sum)
    return _ops.check_op(op)


class Collectives:
    """Every collective, on one context (ptr None = the default context) and
    one array adapter."""

    def __init__(self, context, adapter):
        self._context = context
        self._ad = adapter

    # -- allreduce -----------------------------------------------------------
    def allreduce_async(self, tensor, average=None, name=None, op=None, prescale_factor=1.0,
                        postscale_factor=1.0):
        """Starts an allreduce into a new output; returns a Handle (synchronize() gives
        the result). op defaults to Average, as in Horovod."""
        c = self._context
        return _ops.allreduce_async(c._ptr, self._ad, tensor, _resolve_op(op, average),
                                    c._namer("allreduce", name), prescale_factor,
                                    postscale_factor, inplace=False)

    def allreduce(self, tensor, average=None, name=None, op=None, prescale_factor=1.0,
                  postscale_factor=1.0):
        """Reduces tensor over all ranks; returns a new tensor (default op Average)."""
        return self.allreduce_async(tensor, average, name, op, prescale_factor,
                                    postscale_factor).wait()

    def allreduce_async_(self, tensor, average=None, name=None, op=None, prescale_factor=1.0,
                         postscale_factor=1.0):
        """In-place allreduce: tensor is overwritten with the result."""
        c = self._context
        return _ops.allreduce_async(c._ptr, self._ad, tensor, _resolve_op(op, average),
                                    c._namer("allreduce", name), prescale_factor,
                                    postscale_factor, inplace=True)

    def allreduce_(self, tensor, average=None, name=None, op=None, prescale_factor=1.0,
                   postscale_factor=1.0):
        return self.allreduce_async_(tensor, average, name, op, prescale_factor,
                                     postscale_factor).wait()

    # -- grouped allreduce ----------------------------------------------------
    def grouped_allreduce_async(self, tensors, average=None, name=None, op=None,
                                prescale_factor=1.0, postscale_factor=1.0):
        """Allreduces a list of tensors (one dtype) negotiated and fused as one unit.
        Tensor i is named f"{name}.{i}"."""
        c = self._context
        return _ops.grouped_allreduce_async(c._ptr, self._ad, tensors, _resolve_op(op, average),
                                            c._namer("grouped_allreduce", name), prescale_factor,
                                            postscale_factor, inplace=False)

    def grouped_allreduce(self, tensors, average=None, name=None, op=None, prescale_factor=1.0,
                          postscale_factor=1.0):
        return self.grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                            postscale_factor).wait()

    def grouped_allreduce_async_(self, tensors, average=None, name=None, op=None,
                                 prescale_factor=1.0, postscale_factor=1.0):
        c = self._context
        return _ops.grouped_allreduce_async(c._ptr, self._ad, tensors, _resolve_op(op, average),
                                            c._namer("grouped_allreduce", name), prescale_factor,
                                            postscale_factor, inplace=True)

    def grouped_allreduce_(self, tensors, average=None, name=None, op=None, prescale_factor=1.0,
                           postscale_factor=1.0):
        return self.grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                             postscale_factor).wait()

    # -- allgather --------------------------------------------------------------
    def allgather_async(self, tensor, name=None):
        """Concatenates every rank's tensor along the first dimension (which may differ
        between ranks)."""
        c = self._context
        return _ops.allgather_async(c._ptr, self._ad, tensor, c._namer("allgather", name))

    def allgather(self, tensor, name=None):
        return self.allgather_async(tensor, name).wait()

    # -- broadcast --------------------------------------------------------------
    def broadcast_async(self, tensor, root_rank, name=None):
        """Root's tensor, returned as a new tensor on every rank."""
        c = self._context
        return _ops.broadcast_async(c._ptr, self._ad, tensor, root_rank,
                                    c._namer("broadcast", name), inplace=False)

    def broadcast(self, tensor, root_rank, name=None):
        return self.broadcast_async(tensor, root_rank, name).wait()

    def broadcast_async_(self, tensor, root_rank, name=None):
        """In-place broadcast: tensor is overwritten with root's."""
        c = self._context
        return _ops.broadcast_async(c._ptr, self._ad, tensor, root_rank,
                                    c._namer("broadcast", name), inplace=True)

    def broadcast_(self, tensor, root_rank, name=None):
        return self.broadcast_async_(tensor, root_rank, name).wait()

    # -- alltoall ---------------------------------------------------------------
    def alltoall_async(self, tensor, splits=None, name=None):
        """Sends splits[j] rows to rank j (even split when splits is None). The result
        is the received rows in rank order; with splits given, (result, received_splits)."""
        c = self._context
        return _ops.alltoall_async(c._ptr, self._ad, tensor, splits, c._namer("alltoall", name),
                                   c.size())

    def alltoall(self, tensor, splits=None, name=None):
        return self.alltoall_async(tensor, splits, name).wait()

    # -- reducescatter ----------------------------------------------------------
    def reducescatter_async(self, tensor, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0):
        """Reduces over ranks (default op Average); rank r keeps its block of rows
        (the first shape[0] % size ranks get one extra row)."""
        c = self._context
        return _ops.reducescatter_async(c._ptr, self._ad, tensor, _resolve_op(op, None),
                                        c._namer("reducescatter", name), prescale_factor,
                                        postscale_factor)

    def reducescatter(self, tensor, name=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0):
        return self.reducescatter_async(tensor, name, op, prescale_factor,
                                        postscale_factor).wait()

    # -- grouped allgather and reducescatter --------------------------------------
    def grouped_allgather_async(self, tensors, name=None):
        """Allgathers each tensor of a list (as allgather does); returns one Handle whose
        result is the list of gathered tensors. Tensor i is named f"{name}.{i}"; the
        members are negotiated one by one (the C API has no grouped allgather)."""
        c = self._context
        return _ops.grouped_allgather_async(c._ptr, self._ad, tensors,
                                            c._namer("grouped_allgather", name))

    def grouped_allgather(self, tensors, name=None):
        return self.grouped_allgather_async(tensors, name).wait()

    def grouped_reducescatter_async(self, tensors, name=None, op=None, prescale_factor=1.0,
                                    postscale_factor=1.0):
        """Reducescatters each tensor of a list (as reducescatter does, default op
        Average); one Handle for all, its result the list of outputs. Tensor i is named
        f"{name}.{i}"; the members are negotiated one by one."""
        c = self._context
        return _ops.grouped_reducescatter_async(c._ptr, self._ad, tensors,
                                                _resolve_op(op, None),
                                                c._namer("grouped_reducescatter", name),
                                                prescale_factor, postscale_factor)

    def grouped_reducescatter(self, tensors, name=None, op=None, prescale_factor=1.0,
                              postscale_factor=1.0):
        return self.grouped_reducescatter_async(tensors, name, op, prescale_factor,
                                                postscale_factor).wait()

    # -- barrier and join ----------------------------------------------------------
    def barrier_async(self):
        return _ops.barrier_async(self._context._ptr)

    def barrier(self):
        """Returns once every rank has called barrier()."""
        self.barrier_async().wait()

    def join_async(self, device=-1):
        _check_device(device)
        return _ops.join_async(self._context._ptr)

    def join(self, device=-1):
        """Marks this rank as out of data; until every rank joined, it contributes
        zeros to the others' allreduces. Returns once every rank has joined.

        device: accepted for Horovod's signature and ignored: hvd keeps every
        tensor in host memory, so the zeros a joined rank contributes are on the
        CPU whatever device is named. Returns None (Horovod returns the rank that
        joined last)."""
        self.join_async(device).wait()

    # -- Python objects ---------------------------------------------------------------
    def broadcast_object(self, obj, root_rank=0, name=None):
        """Root's picklable object, unpickled on every rank (size first, then bytes)."""
        c = self._context
        name = c._namer("broadcast_object", name)
        if c.rank() == root_rank:
            payload = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL),
                                    dtype=np.uint8).copy()
            size = np.array([payload.size], dtype=np.int64)
        else:
            payload = None
            size = np.zeros(1, dtype=np.int64)
        _ops.broadcast_async(c._ptr, NUMPY, size, root_rank, name + ".size", True).wait()
        if payload is None:
            payload = np.empty(int(size[0]), dtype=np.uint8)
        _ops.broadcast_async(c._ptr, NUMPY, payload, root_rank, name + ".data", True).wait()
        return pickle.loads(payload.tobytes())

    def allgather_object(self, obj, name=None):
        """Every rank's picklable object, as a list in rank order."""
        c = self._context
        name = c._namer("allgather_object", name)
        payload = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL),
                                dtype=np.uint8).copy()
        sizes = _ops.allgather_async(c._ptr, NUMPY, np.array([payload.size], dtype=np.int64),
                                     name + ".sizes").wait()
        data = _ops.allgather_async(c._ptr, NUMPY, payload, name + ".data").wait()
        out, off = [], 0
        for s in sizes.tolist():
            out.append(pickle.loads(data[off:off + s].tobytes()))
            off += s
        return out


def _check_device(device):
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"hvd.join: device must be an int (-1 for the CPU), got {device!r}")


ELASTIC_MESSAGE = (
    "elastic training is not available yet in hvd; {what} cannot be used. Run a fixed-size "
    "job (hvdrun -np N ...) and restart it from a checkpoint when a rank fails "
    "(docs/horovod.md)")


class UnavailableModule(types.ModuleType):
    """A module that exists so that Horovod scripts import it, and whose every
    public attribute raises NotImplementedError saying why (hvd.elastic and the
    frameworks' .elastic). Dunder names behave as on any module."""

    def __init__(self, name, message):
        super().__init__(name, f"Not available in hvd: {message.format(what=name)}")
        self.__dict__["_hvd_message"] = message

    def __getattr__(self, attr):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        raise NotImplementedError(self.__dict__["_hvd_message"].format(
            what=f"{self.__name__}.{attr}"))

    def __dir__(self):
        return [k for k in self.__dict__ if k.startswith("__")]


def unavailable_module(name):
    """The elastic placeholder for module name ("hvd.torch.elastic"), registered in
    sys.modules so that `import hvd.torch.elastic` finds it."""
    mod = sys.modules.get(name)
    if not isinstance(mod, UnavailableModule):
        mod = UnavailableModule(name, ELASTIC_MESSAGE)
        sys.modules[name] = mod
    return mod


def build_params(comm, params):
    """(HvdParams, keep-alive list) from init()'s keyword arguments."""
    p = C.HvdParams()
    keep = []
    params = dict(params)
    if comm is not None:
        _apply_comm(p, keep, comm, params)
    for key, value in params.items():
        if value is None:
            continue
        if key == "oob_allgather":
            if params.get("size") is None:
                raise TypeError("hvd.init: oob_allgather needs size= (and rank=) as well")
            fn = _wrap_oob(value, int(params["size"]))
            keep.append(fn)
            p.oob_allgather = fn
            p.mask |= C.HVD_PARAM_OOB
            continue
        if key == "log_fn":
            fn = _wrap_log(value)
            keep.append(fn)
            p.log_fn = fn
            p.mask |= C.HVD_PARAM_LOG_FN
            continue
        if key == "log_level" and isinstance(value, str):
            if value.lower() not in _LOG_LEVELS:
                raise ValueError(f"hvd.init: log_level {value!r} is not one of "
                                 f"{', '.join(_LOG_LEVELS)}")
            value = _LOG_LEVELS[value.lower()]
        if key not in C.PARAM_FIELDS:
            known = ", ".join(sorted(list(C.PARAM_FIELDS) + ["oob_allgather", "log_fn"]))
            raise TypeError(f"hvd.init: unknown setting {key!r}; known: {known}")
        bit, kind = C.PARAM_FIELDS[key]
        if kind == "str":
            b = str(value).encode("utf-8")
            keep.append(b)
            setattr(p, key, b)
        elif kind == "int":
            if isinstance(value, bool) or int(value) != value:
                raise TypeError(f"hvd.init: {key} must be an int, got {value!r}")
            setattr(p, key, int(value))
        elif kind == "bool":
            if not isinstance(value, (bool, int)):
                raise TypeError(f"hvd.init: {key} must be a bool, got {value!r}")
            setattr(p, key, int(value))  # the library refuses anything but 0 and 1
        else:
            setattr(p, key, float(value))
        p.mask |= bit
    return p, keep


def _apply_comm(p, keep, comm, params):
    """An mpi4py communicator: the MPI transport on that communicator, with
    rank/size (and local/cross topology) taken from it, so a sub-communicator
    from Split works."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError("hvd.init(comm=...) needs mpi4py (pip install mpi4py)") from e
    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"hvd.init: comm must be an mpi4py communicator (MPI.Comm), got "
                        f"{type(comm).__name__}")
    keep.append(comm)
    p.mpi_comm = MPI._addressof(comm)  # a pointer to the MPI_Comm handle
    p.mask |= C.HVD_PARAM_MPI_COMM
    params.setdefault("transport", "mpi")
    if "rank" not in params and "size" not in params:
        params["rank"], params["size"] = comm.Get_rank(), comm.Get_size()
        local = comm.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            params.setdefault("local_rank", local.Get_rank())
            params.setdefault("local_size", local.Get_size())
            cross = comm.Split(local.Get_rank(), comm.Get_rank())
            try:
                params.setdefault("cross_rank", cross.Get_rank())
                params.setdefault("cross_size", cross.Get_size())
            finally:
                cross.Free()
        finally:
            local.Free()


def _wrap_oob(fn, size):
    """oob_allgather(data: bytes) -> bytes of every rank's data, in rank order."""
    if not callable(fn):
        raise TypeError("hvd.init: oob_allgather must be callable(bytes) -> bytes")

    def cb(send, recv, nbytes, _user):
        try:
            data = ctypes.string_at(send, nbytes) if nbytes else b""
            out = bytes(fn(data))
            # recv holds exactly size * nbytes bytes: never write past it.
            if len(out) != size * nbytes:
                raise ValueError(f"oob_allgather returned {len(out)} bytes, expected "
                                 f"{size} x {nbytes} = {size * nbytes}")
            ctypes.memmove(recv, out, len(out))
            return 0
        except BaseException:  # noqa: B902 - must not unwind through C
            traceback.print_exc(file=sys.stderr)
            return 1

    return C.OOB_ALLGATHER_FN(cb)


def _wrap_log(fn):
    if not callable(fn):
        raise TypeError("hvd.init: log_fn must be callable(level: int, message: str)")

    def cb(level, msg, _user):
        try:
            fn(int(level), msg.decode("utf-8", "replace") if msg else "")
        except BaseException:  # noqa: B902 - must not unwind through C
            traceback.print_exc(file=sys.stderr)

    return C.LOG_FN(cb)


class Context(Collectives):
    """An explicit communicator (hvd_context_create): any number per process,
    e.g. ranks as threads. Takes the same settings as hvd.init(). Use as a
    context manager, or call close()."""

    def __init__(self, comm=None, **params):
        p, self._keep = build_params(comm, params)
        out = ctypes.c_void_p()
        C.call("hvd_context_create", ctypes.byref(p), ctypes.byref(out))
        self._handle = out.value
        self._namer = _ops.Namer()
        self._lock = threading.Lock()
        super().__init__(self, NUMPY)

    def _require(self):
        if self._handle is None:
            raise C.NotInitializedError(C.HVD_ERR_NOT_INITIALIZED, "hvd.Context is closed")
        return self._handle

    # Never None (None would mean the default context to the C library).
    _ptr = property(_require)

    def close(self):
        with self._lock:
            ptr, self._handle = self._handle, None
        if ptr:
            C.call("hvd_context_destroy", ptr)
            _ops.reap_orphans()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def rank(self):
        return C.get_int("hvd_context_rank", self._require())

    def size(self):
        return C.get_int("hvd_context_size", self._require())

    def local_rank(self):
        return C.get_int("hvd_context_local_rank", self._require())

    def local_size(self):
        return C.get_int("hvd_context_local_size", self._require())

    def cross_rank(self):
        return C.get_int("hvd_context_cross_rank", self._require())

    def cross_size(self):
        return C.get_int("hvd_context_cross_size", self._require())

    def transport(self):
        out = ctypes.c_char_p()
        C.call("hvd_context_transport", self._require(), ctypes.byref(out))
        return out.value.decode() if out.value else ""

    def mpi_threads_supported(self):
        return bool(C.get_int("hvd_mpi_threads_supported", self._require()))


class DefaultContext:
    """The Horovod-style default context (hvd_init / hvd_shutdown)."""

    _ptr = None  # NULL: every C call resolves the default context itself

    def __init__(self):
        self._namer = _ops.Namer()

    def size(self):
        return C.get_int("hvd_size")

    def rank(self):
        return C.get_int("hvd_rank")


DEFAULT = DefaultContext()
