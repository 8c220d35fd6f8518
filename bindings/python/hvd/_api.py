"""The public collectives, written once and bound to a context and an array
adapter: ``hvd`` binds them to the default context and numpy, ``hvd.torch``
to the default context and torch, and ``hvd.Context`` to its own context."""

from __future__ import annotations

import ctypes
import pickle
import sys
import threading
import traceback

import numpy as np

from . import _c_api as C
from . import _ops
from . import _process_sets
from ._numpy import NUMPY
from ._process_sets import ProcessSet  # noqa: F401  (re-exported by hvd)

# Horovod's global process set: the whole default context (id 0). Its
# registry is the default context's, attached below.
global_process_set = _process_sets.global_process_set

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
    one array adapter. Each takes process_set= (Horovod's; default the global
    set, i.e. the whole context): a registered ProcessSet runs the operation
    on the set's own context, among its members; broadcast roots are then
    still ranks of the whole context (hvd.rank()), as in Horovod."""

    def __init__(self, context, adapter):
        self._context = context
        self._ad = adapter

    def _target(self, process_set):
        """(context to run on, the ProcessSet or None for the whole context)."""
        if process_set is None:
            return self._context, None
        bind = getattr(process_set, "_hvd_bind", None)
        if bind is None:
            raise TypeError(f"hvd: process_set must be an hvd.ProcessSet, got "
                            f"{type(process_set).__name__}")
        return bind(self._context)

    @staticmethod
    def _root(ps, root_rank):
        return root_rank if ps is None else ps._set_rank_of(root_rank)

    # -- allreduce -----------------------------------------------------------
    def allreduce_async(self, tensor, average=None, name=None, op=None, prescale_factor=1.0,
                        postscale_factor=1.0, process_set=global_process_set):
        """Starts an allreduce into a new output; returns a Handle (synchronize() gives
        the result). op defaults to Average, as in Horovod."""
        c, _ = self._target(process_set)
        return _ops.allreduce_async(c._ptr, self._ad, tensor, _resolve_op(op, average),
                                    c._namer("allreduce", name), prescale_factor,
                                    postscale_factor, inplace=False)

    def allreduce(self, tensor, average=None, name=None, op=None, prescale_factor=1.0,
                  postscale_factor=1.0, process_set=global_process_set):
        """Reduces tensor over all ranks (of process_set); returns a new tensor
        (default op Average)."""
        return self.allreduce_async(tensor, average, name, op, prescale_factor,
                                    postscale_factor, process_set).wait()

    def allreduce_async_(self, tensor, average=None, name=None, op=None, prescale_factor=1.0,
                         postscale_factor=1.0, process_set=global_process_set):
        """In-place allreduce: tensor is overwritten with the result."""
        c, _ = self._target(process_set)
        return _ops.allreduce_async(c._ptr, self._ad, tensor, _resolve_op(op, average),
                                    c._namer("allreduce", name), prescale_factor,
                                    postscale_factor, inplace=True)

    def allreduce_(self, tensor, average=None, name=None, op=None, prescale_factor=1.0,
                   postscale_factor=1.0, process_set=global_process_set):
        return self.allreduce_async_(tensor, average, name, op, prescale_factor,
                                     postscale_factor, process_set).wait()

    # -- grouped allreduce ----------------------------------------------------
    def grouped_allreduce_async(self, tensors, average=None, name=None, op=None,
                                prescale_factor=1.0, postscale_factor=1.0,
                                process_set=global_process_set):
        """Allreduces a list of tensors (one dtype) negotiated and fused as one unit.
        Tensor i is named f"{name}.{i}"."""
        c, _ = self._target(process_set)
        return _ops.grouped_allreduce_async(c._ptr, self._ad, tensors, _resolve_op(op, average),
                                            c._namer("grouped_allreduce", name), prescale_factor,
                                            postscale_factor, inplace=False)

    def grouped_allreduce(self, tensors, average=None, name=None, op=None, prescale_factor=1.0,
                          postscale_factor=1.0, process_set=global_process_set):
        return self.grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                            postscale_factor, process_set).wait()

    def grouped_allreduce_async_(self, tensors, average=None, name=None, op=None,
                                 prescale_factor=1.0, postscale_factor=1.0,
                                 process_set=global_process_set):
        c, _ = self._target(process_set)
        return _ops.grouped_allreduce_async(c._ptr, self._ad, tensors, _resolve_op(op, average),
                                            c._namer("grouped_allreduce", name), prescale_factor,
                                            postscale_factor, inplace=True)

    def grouped_allreduce_(self, tensors, average=None, name=None, op=None, prescale_factor=1.0,
                           postscale_factor=1.0, process_set=global_process_set):
        return self.grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                             postscale_factor, process_set).wait()

    # -- allgather --------------------------------------------------------------
    def allgather_async(self, tensor, name=None, process_set=global_process_set):
        """Concatenates every rank's tensor along the first dimension (which may differ
        between ranks), in rank order (within process_set)."""
        c, _ = self._target(process_set)
        return _ops.allgather_async(c._ptr, self._ad, tensor, c._namer("allgather", name))

    def allgather(self, tensor, name=None, process_set=global_process_set):
        return self.allgather_async(tensor, name, process_set).wait()

    # -- broadcast --------------------------------------------------------------
    def broadcast_async(self, tensor, root_rank, name=None, process_set=global_process_set):
        """Root's tensor, returned as a new tensor on every rank. root_rank is a rank
        of the whole context (hvd.rank()), one of process_set's ranks."""
        c, ps = self._target(process_set)
        return _ops.broadcast_async(c._ptr, self._ad, tensor, self._root(ps, root_rank),
                                    c._namer("broadcast", name), inplace=False)

    def broadcast(self, tensor, root_rank, name=None, process_set=global_process_set):
        return self.broadcast_async(tensor, root_rank, name, process_set).wait()

    def broadcast_async_(self, tensor, root_rank, name=None, process_set=global_process_set):
        """In-place broadcast: tensor is overwritten with root's."""
        c, ps = self._target(process_set)
        return _ops.broadcast_async(c._ptr, self._ad, tensor, self._root(ps, root_rank),
                                    c._namer("broadcast", name), inplace=True)

    def broadcast_(self, tensor, root_rank, name=None, process_set=global_process_set):
        return self.broadcast_async_(tensor, root_rank, name, process_set).wait()

    # -- alltoall ---------------------------------------------------------------
    def alltoall_async(self, tensor, splits=None, name=None, process_set=global_process_set):
        """Sends splits[j] rows to rank j (even split when splits is None; j counts the
        ranks of process_set). The result is the received rows in rank order; with
        splits given, (result, received_splits)."""
        c, _ = self._target(process_set)
        return _ops.alltoall_async(c._ptr, self._ad, tensor, splits, c._namer("alltoall", name),
                                   c.size())

    def alltoall(self, tensor, splits=None, name=None, process_set=global_process_set):
        return self.alltoall_async(tensor, splits, name, process_set).wait()

    # -- reducescatter ----------------------------------------------------------
    def reducescatter_async(self, tensor, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
        """Reduces over ranks (default op Average); rank r (within process_set) keeps
        its block of rows (the first shape[0] % size ranks get one extra row)."""
        c, _ = self._target(process_set)
        return _ops.reducescatter_async(c._ptr, self._ad, tensor, _resolve_op(op, None),
                                        c._namer("reducescatter", name), prescale_factor,
                                        postscale_factor)

    def reducescatter(self, tensor, name=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
        return self.reducescatter_async(tensor, name, op, prescale_factor,
                                        postscale_factor, process_set).wait()

    # -- grouped allgather and reducescatter --------------------------------------
    def grouped_allgather_async(self, tensors, name=None, process_set=global_process_set):
        """Allgathers each tensor of a list (as allgather does); returns one Handle whose
        result is the list of gathered tensors. Tensor i is named f"{name}.{i}"; the
        members are negotiated one by one (the C API has no grouped allgather)."""
        c, _ = self._target(process_set)
        return _ops.grouped_allgather_async(c._ptr, self._ad, tensors,
                                            c._namer("grouped_allgather", name))

    def grouped_allgather(self, tensors, name=None, process_set=global_process_set):
        return self.grouped_allgather_async(tensors, name, process_set).wait()

    def grouped_reducescatter_async(self, tensors, name=None, op=None, prescale_factor=1.0,
                                    postscale_factor=1.0, process_set=global_process_set):
        """Reducescatters each tensor of a list (as reducescatter does, default op
        Average); one Handle for all, its result the list of outputs. Tensor i is named
        f"{name}.{i}"; the members are negotiated one by one."""
        c, _ = self._target(process_set)
        return _ops.grouped_reducescatter_async(c._ptr, self._ad, tensors,
                                                _resolve_op(op, None),
                                                c._namer("grouped_reducescatter", name),
                                                prescale_factor, postscale_factor)

    def grouped_reducescatter(self, tensors, name=None, op=None, prescale_factor=1.0,
                              postscale_factor=1.0, process_set=global_process_set):
        return self.grouped_reducescatter_async(tensors, name, op, prescale_factor,
                                                postscale_factor, process_set).wait()

    # -- barrier and join ----------------------------------------------------------
    def barrier_async(self, process_set=global_process_set):
        c, _ = self._target(process_set)
        return _ops.barrier_async(c._ptr)

    def barrier(self, process_set=global_process_set):
        """Returns once every rank (of process_set) has called barrier()."""
        self.barrier_async(process_set).wait()

    def join_async(self, device=-1, process_set=global_process_set):
        _check_device(device)
        c, ps = self._target(process_set)
        return _ops.join_async(c._ptr, None if ps is None else list(ps.ranks))

    def join(self, device=-1, process_set=global_process_set):
        """Marks this rank as out of data; until every rank joined, it contributes
        zeros to the others' allreduces. Returns once every rank has joined, the
        rank that joined last (as Horovod; joins seen in one negotiation count in
        rank order), the same on every rank.

        device: accepted for Horovod's signature and ignored: hvd keeps every
        tensor in host memory, so the zeros a joined rank contributes are on the
        CPU whatever device is named. process_set (not in Horovod's join): join
        within a set; the rank returned is then a rank of the job."""
        return self.join_async(device, process_set).wait()

    # -- Python objects ---------------------------------------------------------------
    def broadcast_object(self, obj, root_rank=0, name=None, process_set=global_process_set):
        """Root's picklable object, unpickled on every rank (size first, then bytes)."""
        c, ps = self._target(process_set)
        root = self._root(ps, root_rank)
        name = c._namer("broadcast_object", name)
        if c.rank() == root:
            payload = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL),
                                    dtype=np.uint8).copy()
            size = np.array([payload.size], dtype=np.int64)
        else:
            payload = None
            size = np.zeros(1, dtype=np.int64)
        _ops.broadcast_async(c._ptr, NUMPY, size, root, name + ".size", True).wait()
        if payload is None:
            payload = np.empty(int(size[0]), dtype=np.uint8)
        _ops.broadcast_async(c._ptr, NUMPY, payload, root, name + ".data", True).wait()
        return pickle.loads(payload.tobytes())

    def allgather_object(self, obj, name=None, process_set=global_process_set):
        """Every rank's picklable object (of process_set), as a list in rank order."""
        c, _ = self._target(process_set)
        name = c._namer("allgather_object", name)
        return _allgather_pickled(c._ptr, name, obj)


def _allgather_pickled(ptr, name, obj):
    """Every rank's picklable obj over the context ptr, in rank order: the
    pickled sizes, then the bytes (two allgathers named name.sizes, .data)."""
    payload = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL),
                            dtype=np.uint8).copy()
    sizes = _ops.allgather_async(ptr, NUMPY, np.array([payload.size], dtype=np.int64),
                                 name + ".sizes").wait()
    data = _ops.allgather_async(ptr, NUMPY, payload, name + ".data").wait()
    out, off = [], 0
    for s in sizes.tolist():
        out.append(pickle.loads(data[off:off + s].tobytes()))
        off += s
    return out


def _check_device(device):
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"hvd.join: device must be an int (-1 for the CPU), got {device!r}")


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


def _make_child(fn_name, parent, *args):
    """A process-set call on parent (collective over its ranks): the child's
    ProcessSetContext, or None on a rank outside it."""
    out = ctypes.c_void_p()
    C.call(fn_name, parent._ptr, *args, ctypes.byref(out))
    return ProcessSetContext(out.value, parent) if out.value else None


def _rank_list(ranks, what):
    try:
        ranks = list(ranks)
    except TypeError:
        raise TypeError(f"hvd: {what} takes a list of ranks, got {type(ranks).__name__}") from None
    for r in ranks:
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)):
            raise TypeError(f"hvd: {what}: ranks must be ints, got {r!r}")
    return (ctypes.c_int32 * max(len(ranks), 1))(*[int(r) for r in ranks]), len(ranks)


class _Root:
    """What the default context and hvd.Context share: making and
    registering process sets."""

    _mpi_comm = None  # the mpi4py communicator the context was made on, if any

    def _make_set(self, ranks):
        arr, n = _rank_list(ranks, "a process set")
        return _make_child("hvd_process_set_create", self, n, arr)

    def _allgather_objects(self, obj, op):
        """Every rank's picklable obj, in rank order (collective over this
        context; the name comes from op and this context's counter)."""
        name = self._namer(op, None)
        return _allgather_pickled(self._ptr, name, obj)

    def add_process_set(self, process_set):
        """Registers a process set (a ProcessSet or a list of ranks) on this
        context and returns the ProcessSet. Collective: every rank calls it, in
        the same order; ranks outside the set get the same ProcessSet, without
        a context. Ranks are sorted (as Horovod's ProcessSet does); a list
        that is empty, has duplicates or ranks out of range makes every rank
        raise InvalidArgumentError, ranks passing different lists
        MismatchError. A set with the same ranks as a registered one is
        refused (ValueError), as in Horovod."""
        return self._registry.add(process_set)

    def remove_process_set(self, process_set):
        """Unregisters a process set (every rank calls it, in the same order as
        add_process_set): its members destroy its context together, the other
        ranks only forget it. Returns True, or False (doing nothing) for the
        global set and a set not registered here, as Horovod does. Using the
        ProcessSet afterwards raises ValueError."""
        return self._registry.remove(process_set)

    def process_sets(self):
        """The registered process sets, in id order (global set excluded)."""
        return self._registry.live()


class _ContextQueries:
    """rank/size/... of an explicit context (self._require() gives its pointer)."""

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


class Context(_Root, _ContextQueries, Collectives):
    """An explicit communicator (hvd_context_create): any number per process,
    e.g. ranks as threads. Takes the same settings as hvd.init(). Use as a
    context manager, or call close().

    Process sets on it: add_process_set(ranks) / remove_process_set(ps) and
    process_set= on its collectives (as hvd's module-level functions), or
    split(color, key) and process_set(ranks), which return the set's own
    context (a ProcessSetContext, with every collective; ranks and broadcast
    roots within it) on members and None elsewhere."""

    def __init__(self, comm=None, **params):
        p, self._keep = build_params(comm, params)
        out = ctypes.c_void_p()
        C.call("hvd_context_create", ctypes.byref(p), ctypes.byref(out))
        self._handle = out.value
        self._mpi_comm = comm
        self._namer = _ops.Namer()
        self._lock = threading.Lock()
        self._registry = _process_sets.Registry(self)
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
            try:
                C.call("hvd_context_destroy", ptr)
            finally:
                self._registry.clear("was dropped when its hvd.Context was closed")
                _ops.reap_orphans()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def split(self, color, key=0):
        """MPI_Comm_split over this context (hvd_context_split), collective over
        its ranks: ranks passing the same color >= 0 form one process set,
        ordered by (key, rank); color hvd.UNDEFINED_COLOR (-1) joins none.
        Returns this rank's set as a ProcessSetContext, or None. Close it when
        done (collective over its members)."""
        for what, v in (("color", color), ("key", key)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"hvd.Context.split: {what} must be an int, got {v!r}")
        return _make_child("hvd_context_split", self, int(color), int(key))

    def process_set(self, ranks):
        """A process set of the listed ranks (sorted ascending, no duplicates,
        the same list on every rank; hvd_process_set_create), collective over
        this context's ranks. Returns its ProcessSetContext on members, None
        elsewhere. An unsorted or otherwise bad list makes every rank raise
        InvalidArgumentError."""
        arr, n = _rank_list(ranks, "hvd.Context.process_set")
        return _make_child("hvd_process_set_create", self, n, arr)


    def mpi_threads_supported(self):
        return bool(C.get_int("hvd_mpi_threads_supported", self._require()))


class ProcessSetContext(_ContextQueries, Collectives):
    """A process set's own context (include/hvd.h, "Process sets"): every
    collective among the set's members, with ranks 0 .. size()-1 in the set's
    order (broadcast roots too) and names of its own. Made by Context.split /
    Context.process_set, and behind every registered ProcessSet on its
    members. close() (or leaving a with block) is collective over the
    members; sets of sets are not supported (UnsupportedError)."""

    def __init__(self, handle, parent):
        self._handle = handle
        self._parent = parent
        self._namer = _ops.Namer()
        self._lock = threading.Lock()
        super().__init__(self, NUMPY)

    def _require(self):
        if self._handle is None:
            raise C.AbortedError(C.HVD_ERR_ABORTED, "hvd: this process set was destroyed")
        return self._handle

    _ptr = property(_require)

    def close(self):
        """Destroys the set (collective over its members; returns once every
        member has); its pending operations complete with AbortedError."""
        with self._lock:
            ptr, self._handle = self._handle, None
        if ptr:
            try:
                C.call("hvd_context_destroy", ptr)
            finally:
                _ops.reap_orphans()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def split(self, color, key=0):
        raise C.UnsupportedError(C.HVD_ERR_UNSUPPORTED, "hvd: process sets of process sets are "
                                 "not supported; split the parent context instead")

    process_set = split

    def parent_ranks(self):
        """The parent's ranks of the members, in this set's rank order."""
        n = self.size()
        arr = (ctypes.c_int32 * max(n, 1))()
        C.call("hvd_context_parent_ranks", self._require(), arr, n)
        return [int(arr[i]) for i in range(n)]


class DefaultContext(_Root):
    """The Horovod-style default context (hvd_init / hvd_shutdown)."""

    _ptr = None  # NULL: every C call resolves the default context itself

    def __init__(self):
        self._namer = _ops.Namer()
        self._registry = _process_sets.Registry(self)
        self._homogeneous = []  # hvd.is_homogeneous()'s answer, until the world changes

    def size(self):
        return C.get_int("hvd_size")

    def rank(self):
        return C.get_int("hvd_rank")


DEFAULT = DefaultContext()
global_process_set._registry = DEFAULT._registry

# hvd's collectives on numpy arrays over the default context (hvd.allreduce, ...).
NUMPY_COLLECTIVES = Collectives(DEFAULT, NUMPY)
