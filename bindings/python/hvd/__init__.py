"""hvd: data-parallel collectives for deep learning (Horovod-style API).

    import hvd
    hvd.init()                       # hvdrun, torchrun, mpirun, Slurm -- or a world of one
    avg = hvd.allreduce(grad)        # numpy; hvd.torch / hvd.tensorflow / hvd.keras for frameworks
    hvd.shutdown()

Only numpy is required; ``hvd.torch`` needs torch and ``hvd.tensorflow`` /
``hvd.keras`` need TensorFlow. A Horovod script runs with its import line
changed (``import horovod.torch as hvd`` -> ``import hvd.torch as hvd``); see
docs/horovod.md for what carries over. The C library (libhvd.so) is loaded on first use
from HVD_LIBRARY_PATH, the package folder, the repository's build trees or the
system loader.
"""

from __future__ import annotations

import atexit as _atexit
import ctypes as _ctypes
import os as _os
import threading as _threading

from . import _c_api
from . import _ops
from . import _api
from ._api import (  # noqa: F401
    DEFAULT as _DEFAULT,
    Adasum,
    Average,
    Collectives as _Collectives,
    Context,
    Max,
    Min,
    ProcessSet,
    ProcessSetContext,
    Product,
    Sum,
    build_params as _build_params,
    global_process_set,
)
from ._c_api import (  # noqa: F401
    AbortedError,
    DuplicateNameError,
    HorovodInternalError,
    HvdError,
    HvdMemoryError,
    HvdTimeoutError,
    InternalError,
    InvalidArgumentError,
    LibraryNotFoundError,
    MembershipChangedError,
    MismatchError,
    NotFoundError,
    NotInitializedError,
    RendezvousError,
    TransportError,
    UnsupportedError,
    VersionError,
)
from ._ops import Handle, PerformanceWarning, poll, synchronize  # noqa: F401
from ._transports import available_transports, transports_report  # noqa: F401

__version__ = "0.1.0"

_lifecycle = _threading.Lock()
_init_refs = 0  # hvd.init() calls not yet matched by shutdown(), this process
_keepalive = []  # callbacks and communicators passed to init, per reference


# hvd_context_split's color for "join no process set" (hvd.Context.split).
UNDEFINED_COLOR = _c_api.HVD_UNDEFINED_COLOR


def init(comm=None, process_sets=None, **params):
    """Creates (or, if one exists, counts another reference to) the default context.

    comm: an mpi4py communicator (MPI transport on that communicator; rank and size
    come from it, so ``MPI.COMM_WORLD.Split(...)`` works).
    process_sets: Horovod's. A list of ProcessSet (or rank lists) registered in
    order once the context exists, as add_process_set does (every rank passes the
    same list); "dynamic" is accepted and changes nothing (hvd's sets can always
    be added and removed later). All of them or none: when registering one fails
    (on every rank: registering is collective), the sets this call registered
    already are removed again (collectively), this init's reference is released
    and the error raised.
    params: any hvd_params_t setting -- rank, size, local_rank, local_size, cross_rank,
    cross_size, transport, rendezvous_addr, secret, fusion_threshold_bytes, cycle_time_ms,
    cache_capacity, stall_warning_s, stall_shutdown_s, start_timeout_s, timeline_path,
    log_level (int or 'error'..'trace'), network_interface, transport_timeout_s,
    autotune (bool; the tuner's knobs stay HVD_AUTOTUNE_*), transport_path (':'-separated
    folders searched for transport plugins before libhvd.so's own), peer_timeout_s (how long
    a stopped or cut-off peer may stay silent before it is named; <= 0: off),
    oob_allgather (callable(bytes) -> bytes of all ranks), log_fn (callable(level, msg)).
    Unset settings come from HVD_* environment variables and the launcher's variables.

    Like hvd_init, init is reference counted: each call needs a shutdown()."""
    global _init_refs
    if isinstance(process_sets, str):
        if process_sets != "dynamic":
            raise ValueError(f"hvd.init: process_sets must be a list of ProcessSet or "
                             f"\"dynamic\", got {process_sets!r}")
        process_sets = None
    elif process_sets is not None:
        try:
            process_sets = list(process_sets)
        except TypeError:
            raise TypeError("hvd.init: process_sets must be a list of ProcessSet or "
                            f"\"dynamic\", got {type(process_sets).__name__}") from None
    p, keep = _build_params(comm, params)
    with _lifecycle:
        was = is_initialized()
        _c_api.call("hvd_init", _c_api.ctypes.byref(p))
        _init_refs += 1
        _keepalive.append(keep)
        if not was:
            _DEFAULT._namer.reset()
            _DEFAULT._mpi_comm = comm  # ProcessSet(mpi_comm) translates ranks to it
            _homogeneous.clear()
        global_process_set.ranks = list(range(size()))
    if process_sets:
        try:
            _DEFAULT._registry.add_all(process_sets)
        except BaseException:
            shutdown()
            raise


def shutdown():
    """Releases one init() reference; the last one destroys the default context
    (pending operations complete with AbortedError).

    Shutting down is not a failure: as MPI_Finalize, the last shutdown() waits
    until every rank has shut down (at most HVD_STALL_SHUTDOWN_TIME), so the
    other ranks' collectives without this rank (process sets it is not in)
    finish; theirs with it (the global set's, its sets') raise AbortedError
    naming it. A rank that exits without shutdown() (killed, os._exit) is a
    failure the others' collectives name. In an elastic job a rank that
    shuts down ends the epoch for every rank."""
    global _init_refs
    with _lifecycle:
        _c_api.call("hvd_shutdown")
        _init_refs = max(0, _init_refs - 1)
        last = not is_initialized()
        if last:
            _DEFAULT._registry.clear("was dropped when hvd.shutdown() destroyed the default "
                                     "context")
            _ops.reap_orphans(wait=True)
            _keepalive.clear()
            _DEFAULT._mpi_comm = None


@_atexit.register
def _shutdown_at_exit():
    # The library does not tear down a default context left at exit; do it, so
    # the background thread stops before the interpreter does.
    global _init_refs
    with _lifecycle:
        stopped = False
        while _init_refs > 0:
            _init_refs -= 1
            try:
                _c_api.lib().hvd_shutdown()
                stopped = True
            except Exception:
                break
        if stopped:
            try:  # the sets' contexts, once their parent stopped (that only frees them)
                if not is_initialized():
                    _DEFAULT._registry.clear("was dropped at exit")
            except Exception:
                pass


def add_process_set(process_set):
    """Registers a process set (a ProcessSet, or a list of ranks) on the
    default context and returns the ProcessSet (Horovod's). Collective: every
    rank calls it, in the same order; the set's members get a context for it,
    the other ranks the same ProcessSet without one. Ranks are sorted, as
    Horovod's ProcessSet does; an empty list, duplicates or ranks out of range
    make every rank raise InvalidArgumentError, different lists on different
    ranks MismatchError; a set with the ranks of a registered one is refused
    (ValueError), as in Horovod."""
    return _DEFAULT.add_process_set(process_set)


def remove_process_set(process_set) -> bool:
    """Unregisters a process set (Horovod's): call it on every rank, in the same
    order as add_process_set. The set's members destroy its context together
    (pending operations on it complete with AbortedError); other ranks only
    forget it. Returns True; False (and does nothing) for the global set or a
    set that is not registered. Operations on the ProcessSet then raise
    ValueError."""
    return _DEFAULT.remove_process_set(process_set)


def is_initialized() -> bool:
    out = _c_api.ctypes.c_int(0)
    _c_api.call("hvd_is_initialized", _c_api.ctypes.byref(out))
    return bool(out.value)


def rank() -> int:
    """This process's rank in the default context."""
    return _c_api.get_int("hvd_rank")


def size() -> int:
    return _c_api.get_int("hvd_size")


def local_rank() -> int:
    """Rank among the processes on this host."""
    return _c_api.get_int("hvd_local_rank")


def local_size() -> int:
    return _c_api.get_int("hvd_local_size")


def cross_rank() -> int:
    """Index among the ranks that share this rank's local rank (one per host)."""
    return _c_api.get_int("hvd_cross_rank")


def cross_size() -> int:
    return _c_api.get_int("hvd_cross_size")


_homogeneous = _DEFAULT._homogeneous  # is_homogeneous()'s answer for the current default context


def is_homogeneous() -> bool:
    """True if every host runs the same number of ranks (Horovod's
    is_homogeneous). Each rank checks local_size() * cross_size() == size()
    -- which holds on every rank exactly when all hosts have the same number
    of ranks -- and the ranks agree with one allreduce (Min). Unlike
    Horovod's, whose answer is computed during init, the first call after
    init() is therefore a collective: every rank must make it. Later calls
    return the remembered answer without communicating."""
    if not _homogeneous:
        import numpy as np
        ok = int(local_size() * cross_size() == size())
        if size() > 1:
            ok = int(allreduce(np.array([ok], dtype=np.int32), name="hvd.is_homogeneous",
                               op=Min)[0])
        _homogeneous.append(bool(ok))
    return _homogeneous[0]


def transport() -> str:
    """Name of the default context's transport ("local", "gloo", "mpi", ...)."""
    out = _c_api.ctypes.c_char_p()
    _c_api.call("hvd_context_transport", None, _c_api.ctypes.byref(out))
    return out.value.decode() if out.value else ""


def start_timeline(file_path, mark_cycles=False):
    """Horovod's: records the timeline (a Chrome trace, chrome://tracing or
    Perfetto) into file_path from now on. Every rank calls it; rank 0 writes
    the file, the other ranks only check the arguments. A timeline being
    written is closed first. mark_cycles: an instant event at every cycle of
    the background thread. Raises what opening the file raised (on rank 0)."""
    if not file_path:
        raise InvalidArgumentError(_c_api.HVD_ERR_INVALID_ARGUMENT, "start_timeline: file_path is empty")
    _c_api.call("hvd_timeline_start", None, _os.fsencode(file_path), 1 if mark_cycles else 0)


def stop_timeline():
    """Horovod's: stops recording the timeline and closes its file (complete
    JSON). Nothing is being recorded: does nothing."""
    _c_api.call("hvd_timeline_stop", None)


def flight_recorder_dump(path=None):
    """Writes this rank's flight record (its last operations, as JSON) to
    path, or to HVD_FLIGHT_RECORDER_DIR/rank-<r>.json when path is None
    (docs/flight-recorder.md; read them with ``python -m hvd.trace DIR``).
    Any rank, any time, alone. Raises UnsupportedError where the recorder is
    off (HVD_FLIGHT_RECORDER_SIZE=0)."""
    if path is not None and not path:
        raise InvalidArgumentError(_c_api.HVD_ERR_INVALID_ARGUMENT, "flight_recorder_dump: path is empty")
    _c_api.call("hvd_flight_recorder_dump", None, None if path is None else _os.fsencode(path))


class _MpiNotEnabledError(UnsupportedError, ValueError):
    pass


def mpi_threads_supported() -> bool:
    """True if the default context runs on MPI at MPI_THREAD_MULTIPLE.
    Raises UnsupportedError when its transport is not MPI, NotInitializedError
    before init(); both are ValueErrors too, as in Horovod."""
    try:
        return bool(_c_api.get_int("hvd_mpi_threads_supported", None))
    except UnsupportedError as e:
        raise _MpiNotEnabledError(e.status, e.message) from None


# ---------------------------------------------------------------------------
# What this build and this run have (Horovod's capability queries).
# ---------------------------------------------------------------------------

_plugin_cache = {}


def _plugin_built(name):
    """Whether a transport plugin libhvd_transport_<name>.so is found where the
    library looks for one (HVD_TRANSPORT_PATH's folders, then libhvd.so's) and
    loads as an hvd plugin. Loading it also loads what it needs (the MPI
    library, for MPI), once per process."""
    dirs = [d for d in _os.environ.get("HVD_TRANSPORT_PATH", "").split(":") if d]
    dirs.append(_os.path.dirname(library_path()))
    key = (name, tuple(dirs))
    if key not in _plugin_cache:
        built = False
        for d in dirs:
            path = _os.path.join(d, f"libhvd_transport_{name}.so")
            if not _os.path.isfile(path):
                continue
            try:
                plugin = _ctypes.CDLL(path, mode=_ctypes.RTLD_LOCAL)
            except OSError:  # not a library, or what it needs is missing
                continue
            if hasattr(plugin, "hvd_transport_plugin"):  # HVD_TRANSPORT_PLUGIN_SYMBOL
                built = True
                break
        _plugin_cache[key] = built
    return _plugin_cache[key]


def mpi_built() -> bool:
    """True if the MPI transport plugin is present and loads (no init needed)."""
    return _plugin_built("mpi")


def gloo_built() -> bool:
    """True if the Gloo transport plugin is present and loads (no init needed)."""
    return _plugin_built("gloo")


def nccl_built():
    """As Horovod: the NCCL version code (e.g. 22304 for 2.23.4) when hvd's NCCL
    transport plugin is found where the library looks for plugins and loads
    (loading it loads libnccl), else False (== 0, Horovod's "no NCCL")."""
    if not _plugin_built("nccl"):
        return False
    if "nccl_version" not in _plugin_cache:
        version = 0
        try:
            nccl = _ctypes.CDLL("libnccl.so.2", mode=_ctypes.RTLD_LOCAL)
            out = _ctypes.c_int(0)
            if nccl.ncclGetVersion(_ctypes.byref(out)) == 0:
                version = out.value
        except (OSError, AttributeError):
            pass
        _plugin_cache["nccl_version"] = version
    return _plugin_cache["nccl_version"] or True


def ddl_built() -> bool:
    """False: hvd has no IBM DDL support."""
    return False


def ccl_built() -> bool:
    """False: hvd has no oneCCL support."""
    return False


def cuda_built() -> bool:
    """True when the library can take CUDA tensors here: it loads the CUDA
    runtime at run time (HVD_CUDA_RUNTIME, else libcudart.so.13, .12, .so),
    as this checks, and stages device tensors through host memory or hands
    them to the NCCL transport (docs/gpu.md). No GPU is needed to answer,
    as in Horovod, where it says whether the build has CUDA."""
    if "cuda" not in _plugin_cache:
        env = _os.environ.get("HVD_CUDA_RUNTIME", "")
        names = [env] if env else ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
        found = False
        for name in names:
            try:
                _ctypes.CDLL(name, mode=_ctypes.RTLD_LOCAL)
                found = True
                break
            except OSError:
                continue
        _plugin_cache["cuda"] = found
    return _plugin_cache["cuda"]


def rocm_built() -> bool:
    """False: hvd has no ROCm transport."""
    return False


def _transport_enabled(name):
    # Like Horovod: False (not an error) before init() and after shutdown().
    if not is_initialized():
        return False
    try:
        return transport() == name
    except NotInitializedError:  # shut down meanwhile
        return False


def mpi_enabled() -> bool:
    """True if the initialized default context runs on the MPI transport."""
    return _transport_enabled("mpi")


def gloo_enabled() -> bool:
    """True if the initialized default context runs on the Gloo transport."""
    return _transport_enabled("gloo")


def library_path() -> str:
    """The libhvd.so this package loaded."""
    return _c_api.library_path()


def library_version():
    """(major, minor, patch) of the loaded libhvd.so."""
    return _c_api.library_version()


_np = _api.NUMPY_COLLECTIVES

allreduce = _np.allreduce
allreduce_async = _np.allreduce_async
allreduce_ = _np.allreduce_
allreduce_async_ = _np.allreduce_async_
grouped_allreduce = _np.grouped_allreduce
grouped_allreduce_async = _np.grouped_allreduce_async
grouped_allreduce_ = _np.grouped_allreduce_
grouped_allreduce_async_ = _np.grouped_allreduce_async_
allgather = _np.allgather
allgather_async = _np.allgather_async
broadcast = _np.broadcast
broadcast_async = _np.broadcast_async
broadcast_ = _np.broadcast_
broadcast_async_ = _np.broadcast_async_
alltoall = _np.alltoall
alltoall_async = _np.alltoall_async
reducescatter = _np.reducescatter
reducescatter_async = _np.reducescatter_async
grouped_allgather = _np.grouped_allgather
grouped_allgather_async = _np.grouped_allgather_async
grouped_reducescatter = _np.grouped_reducescatter
grouped_reducescatter_async = _np.grouped_reducescatter_async
barrier = _np.barrier
barrier_async = _np.barrier_async
join = _np.join
join_async = _np.join_async
broadcast_object = _np.broadcast_object
allgather_object = _np.allgather_object

# hvd.metrics(): this rank's metrics; hvd.metrics.serve(port): for Prometheus.
from . import metrics  # noqa: E402
# Horovod's hvd.elastic (run, State, ObjectState, HostsUpdatedInterrupt).
from . import elastic  # noqa: E402
from .elastic import HostsUpdatedInterrupt  # noqa: E402,F401

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "transport", "mpi_threads_supported", "mpi_built", "gloo_built",
    "available_transports", "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built",
    "mpi_enabled", "gloo_enabled", "is_homogeneous", "HorovodInternalError", "library_path",
    "library_version", "Sum", "Average", "Min", "Max", "Product", "Adasum", "Handle", "synchronize",
    "poll", "allreduce", "allreduce_async", "allreduce_", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_async", "grouped_allreduce_",
    "grouped_allreduce_async_", "allgather", "allgather_async", "broadcast", "broadcast_async",
    "broadcast_", "broadcast_async_", "alltoall", "alltoall_async", "reducescatter",
    "reducescatter_async", "grouped_allgather", "grouped_allgather_async",
    "grouped_reducescatter", "grouped_reducescatter_async", "barrier", "barrier_async", "join", "join_async",
    "broadcast_object", "allgather_object", "Context", "HvdError", "PerformanceWarning",
    "ProcessSet", "ProcessSetContext", "global_process_set", "add_process_set",
    "remove_process_set", "UNDEFINED_COLOR", "elastic", "HostsUpdatedInterrupt",
    "MembershipChangedError", "flight_recorder_dump", "metrics",
]
