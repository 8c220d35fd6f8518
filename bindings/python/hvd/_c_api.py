"""The ctypes layer over libhvd.so: one place that knows the C ABI.

Everything in include/hvd.h is mirrored here -- status codes, dtypes, reduce
ops, the two structs (hvd_tensor_t, hvd_params_t) and argtypes/restype for
every function -- and nothing else in the package calls the library directly.
Failures become ``HvdError`` (or one of its subclasses, chosen by status code)
carrying the library's last-error text, read on the calling thread right after
the failing call (the C library keeps that text per thread, and a ctypes call
runs on the calling thread).

Library search order (the first hit wins; a failure lists every place tried):
  1. ``HVD_LIBRARY_PATH``: a file, or a folder holding libhvd.so
  2. the package folder (a pip-installed wheel puts libhvd.so there)
  3. the repository's build trees: build/lib, then build-*/lib (newest first)
  4. the system's default loader (LD_LIBRARY_PATH, ldconfig cache)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import threading
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char_p,
    c_double,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint64,
    c_void_p,
)

# The major version this binding was written against: a library whose major
# version differs is refused (its ABI may differ).
BINDING_VERSION_MAJOR = 0

# ---------------------------------------------------------------------------
# Constants (numbers are frozen in hvd.h).
# ---------------------------------------------------------------------------
HVD_OK = 0
HVD_IN_PROGRESS = 1
HVD_ERR_INVALID_ARGUMENT = -1
HVD_ERR_NOT_INITIALIZED = -2
HVD_ERR_NO_MEMORY = -3
HVD_ERR_TIMEOUT = -4
HVD_ERR_MISMATCH = -5
HVD_ERR_TRANSPORT = -6
HVD_ERR_UNSUPPORTED = -7
HVD_ERR_NOT_FOUND = -8
HVD_ERR_ABORTED = -9
HVD_ERR_DUPLICATE_NAME = -10
HVD_ERR_VERSION = -11
HVD_ERR_RENDEZVOUS = -12
HVD_ERR_INTERNAL = -13
HVD_ERR_MEMBERSHIP_CHANGED = -14

HVD_UINT8 = 0
HVD_INT8 = 1
HVD_UINT16 = 2
HVD_INT16 = 3
HVD_INT32 = 4
HVD_INT64 = 5
HVD_FLOAT16 = 6
HVD_BFLOAT16 = 7
HVD_FLOAT32 = 8
HVD_FLOAT64 = 9
HVD_BOOL = 10

HVD_SUM = 0
HVD_AVERAGE = 1
HVD_MIN = 2
HVD_MAX = 3
HVD_PRODUCT = 4
HVD_ADASUM = 5

HVD_DEVICE_CPU = -1
HVD_MAX_NDIM = 32
HVD_UNDEFINED_COLOR = -1  # hvd_context_split: join no process set

HVD_LOG_ERROR = 0
HVD_LOG_WARNING = 1
HVD_LOG_INFO = 2
HVD_LOG_DEBUG = 3
HVD_LOG_TRACE = 4

HVD_PARAM_RANK = 1 << 0
HVD_PARAM_SIZE = 1 << 1
HVD_PARAM_LOCAL_RANK = 1 << 2
HVD_PARAM_LOCAL_SIZE = 1 << 3
HVD_PARAM_CROSS_RANK = 1 << 4
HVD_PARAM_CROSS_SIZE = 1 << 5
HVD_PARAM_TRANSPORT = 1 << 6
HVD_PARAM_RENDEZVOUS_ADDR = 1 << 7
HVD_PARAM_SECRET = 1 << 8
HVD_PARAM_OOB = 1 << 9
HVD_PARAM_FUSION_THRESHOLD = 1 << 10
HVD_PARAM_CYCLE_TIME = 1 << 11
HVD_PARAM_CACHE_CAPACITY = 1 << 12
HVD_PARAM_STALL_WARNING = 1 << 13
HVD_PARAM_STALL_SHUTDOWN = 1 << 14
HVD_PARAM_START_TIMEOUT = 1 << 15
HVD_PARAM_TIMELINE = 1 << 16
HVD_PARAM_LOG_FN = 1 << 17
HVD_PARAM_LOG_LEVEL = 1 << 18
HVD_PARAM_NETWORK_INTERFACE = 1 << 19
HVD_PARAM_MPI_COMM = 1 << 20
HVD_PARAM_TRANSPORT_TIMEOUT = 1 << 21
HVD_PARAM_AUTOTUNE = 1 << 22
HVD_PARAM_TRANSPORT_PATH = 1 << 23
HVD_PARAM_PEER_TIMEOUT = 1 << 24
HVD_PARAM_ALL_ = (1 << 25) - 1

# hvd_metrics formats
HVD_METRICS_JSON = 0
HVD_METRICS_PROMETHEUS = 1

# ---------------------------------------------------------------------------
# Errors.
# ---------------------------------------------------------------------------


class HvdError(RuntimeError):
    """A failed hvd call. ``status`` is the hvd_status_t code (negative),
    ``message`` the library's text for it."""

    def __init__(self, status: int, message: str = ""):
        self.status = int(status)
        self.message = message or status_string(status)
        super().__init__(f"{self.message} [{status_name(self.status)}]")

    def __reduce__(self):  # picklable (Ray, multiprocessing): rebuilt from status and message
        return type(self), (self.status, self.message), self.__dict__


class InvalidArgumentError(HvdError, ValueError):
    pass


class NotInitializedError(HvdError, ValueError):
    """No context (hvd.init() not called, or shut down). Also a ValueError, as
    Horovod raises ValueError for calls before init."""


class HvdMemoryError(HvdError, MemoryError):
    pass


class HvdTimeoutError(HvdError, TimeoutError):
    pass


class MismatchError(HvdError):
    pass


class HorovodInternalError(HvdError):
    """The context can no longer communicate: a peer died or went silent, or the
    transport failed. Every later operation on that context fails the same
    way; shut it down (and start a new job). Horovod's name for this error."""


class TransportError(HorovodInternalError):
    pass


class UnsupportedError(HvdError):
    pass


class NotFoundError(HvdError):
    pass


class AbortedError(HvdError):
    pass


class DuplicateNameError(HvdError, ValueError):
    """A second operation with the name of one still in flight. Also a
    ValueError, as in Horovod."""


class VersionError(HvdError):
    pass


class RendezvousError(HvdError):
    pass


class InternalError(HvdError):
    pass


class MembershipChangedError(HorovodInternalError):
    """An elastic job's membership changed (a peer left, or the launcher
    changed the hosts): pending and later operations of the context fail with
    it until hvd_context_reset forms the job again. hvd.elastic.run catches it
    (as Horovod's HorovodInternalError), restores the last committed state and
    resets."""


_ERROR_CLASSES = {
    HVD_ERR_INVALID_ARGUMENT: InvalidArgumentError,
    HVD_ERR_NOT_INITIALIZED: NotInitializedError,
    HVD_ERR_NO_MEMORY: HvdMemoryError,
    HVD_ERR_TIMEOUT: HvdTimeoutError,
    HVD_ERR_MISMATCH: MismatchError,
    HVD_ERR_TRANSPORT: TransportError,
    HVD_ERR_UNSUPPORTED: UnsupportedError,
    HVD_ERR_NOT_FOUND: NotFoundError,
    HVD_ERR_ABORTED: AbortedError,
    HVD_ERR_DUPLICATE_NAME: DuplicateNameError,
    HVD_ERR_VERSION: VersionError,
    HVD_ERR_RENDEZVOUS: RendezvousError,
    HVD_ERR_INTERNAL: InternalError,
    HVD_ERR_MEMBERSHIP_CHANGED: MembershipChangedError,
}

_STATUS_NAMES = {
    v: k
    for k, v in dict(globals()).items()
    if (k.startswith("HVD_ERR_") or k in ("HVD_OK", "HVD_IN_PROGRESS")) and isinstance(v, int)
}


def status_name(status: int) -> str:
    return _STATUS_NAMES.get(int(status), f"status {int(status)}")


# The core's words for a context that a transport failure has broken (any
# status: a silent peer gives HVD_ERR_TIMEOUT): such errors are also
# HorovodInternalError.
_BROKEN_CONTEXT = "the context can no longer communicate"
_broken_classes = {}


def _broken_class(cls):
    if issubclass(cls, HorovodInternalError):
        return cls
    out = _broken_classes.get(cls)
    if out is None:
        out = type(cls.__name__, (cls, HorovodInternalError),
                   {"__module__": cls.__module__, "__doc__": cls.__doc__,
                    "__qualname__": cls.__qualname__})
        _broken_classes[cls] = out
    return out


def make_error(status: int, message: str) -> HvdError:
    cls = _ERROR_CLASSES.get(int(status), HvdError)
    if message and _BROKEN_CONTEXT in message:
        cls = _broken_class(cls)
    return cls(status, message)


class LibraryNotFoundError(ImportError):
    """libhvd.so could not be found or loaded; the message says where we looked."""


# ---------------------------------------------------------------------------
# Structs (layouts mirror hvd.h exactly; tests compare offsets with a C compiler).
# ---------------------------------------------------------------------------
# C enums are passed as int on every ABI hvd targets.
hvd_status_t = c_int
hvd_dtype_t = c_int
hvd_reduce_op_t = c_int
hvd_context_t = c_void_p  # opaque struct hvd_context_s *
hvd_handle_t = c_void_p  # opaque struct hvd_handle_s *

OOB_ALLGATHER_FN = CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_void_p)
LOG_FN = CFUNCTYPE(None, c_int, c_char_p, c_void_p)


class HvdTensor(Structure):
    _fields_ = [
        ("data", c_void_p),
        ("dtype", hvd_dtype_t),
        ("ndim", c_int32),
        ("shape", POINTER(c_int64)),
        ("device", c_int32),
        ("stream", c_void_p),
    ]


class HvdParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("mask", c_uint64),
        ("rank", c_int32),
        ("size", c_int32),
        ("local_rank", c_int32),
        ("local_size", c_int32),
        ("cross_rank", c_int32),
        ("cross_size", c_int32),
        ("transport", c_char_p),
        ("rendezvous_addr", c_char_p),
        ("secret", c_char_p),
        ("oob_allgather", OOB_ALLGATHER_FN),
        ("oob_user", c_void_p),
        ("fusion_threshold_bytes", c_int64),
        ("cycle_time_ms", c_double),
        ("cache_capacity", c_int32),
        ("stall_warning_s", c_double),
        ("stall_shutdown_s", c_double),
        ("start_timeout_s", c_double),
        ("timeline_path", c_char_p),
        ("log_fn", LOG_FN),
        ("log_user", c_void_p),
        ("log_level", c_int32),
        ("network_interface", c_char_p),
        ("mpi_comm", c_void_p),
        ("transport_timeout_s", c_double),
        ("autotune", c_int32),
        ("transport_path", c_char_p),
        ("peer_timeout_s", c_double),
    ]

    def __init__(self):  # HVD_PARAMS_INIT
        super().__init__()
        self.struct_size = ctypes.sizeof(HvdParams)
        self.mask = 0


class HvdMembership(Structure):
    """hvd_membership_t (hvd_context_membership): struct_size first."""
    _fields_ = [
        ("struct_size", c_size_t),
        ("elastic", c_int32),
        ("hosts_updated", c_int32),
        ("epoch", c_int64),
    ]

    def __init__(self):
        super().__init__()
        self.struct_size = ctypes.sizeof(HvdMembership)


# field name -> (mask bit, kind) for the settings a Python caller may pass.
PARAM_FIELDS = {
    "rank": (HVD_PARAM_RANK, "int"),
    "size": (HVD_PARAM_SIZE, "int"),
    "local_rank": (HVD_PARAM_LOCAL_RANK, "int"),
    "local_size": (HVD_PARAM_LOCAL_SIZE, "int"),
    "cross_rank": (HVD_PARAM_CROSS_RANK, "int"),
    "cross_size": (HVD_PARAM_CROSS_SIZE, "int"),
    "transport": (HVD_PARAM_TRANSPORT, "str"),
    "rendezvous_addr": (HVD_PARAM_RENDEZVOUS_ADDR, "str"),
    "secret": (HVD_PARAM_SECRET, "str"),
    "fusion_threshold_bytes": (HVD_PARAM_FUSION_THRESHOLD, "int"),
    "cycle_time_ms": (HVD_PARAM_CYCLE_TIME, "float"),
    "cache_capacity": (HVD_PARAM_CACHE_CAPACITY, "int"),
    "stall_warning_s": (HVD_PARAM_STALL_WARNING, "float"),
    "stall_shutdown_s": (HVD_PARAM_STALL_SHUTDOWN, "float"),
    "start_timeout_s": (HVD_PARAM_START_TIMEOUT, "float"),
    "timeline_path": (HVD_PARAM_TIMELINE, "str"),
    "log_level": (HVD_PARAM_LOG_LEVEL, "int"),
    "network_interface": (HVD_PARAM_NETWORK_INTERFACE, "str"),
    "transport_timeout_s": (HVD_PARAM_TRANSPORT_TIMEOUT, "float"),
    "autotune": (HVD_PARAM_AUTOTUNE, "bool"),
    "transport_path": (HVD_PARAM_TRANSPORT_PATH, "str"),
    "peer_timeout_s": (HVD_PARAM_PEER_TIMEOUT, "float"),
}

# ---------------------------------------------------------------------------
# Every function of hvd.h: name -> (restype, argtypes).
# ---------------------------------------------------------------------------
_S = hvd_status_t
_P_INT = POINTER(c_int)
FUNCTIONS = {
    # library
    "hvd_version": (_S, [_P_INT, _P_INT, _P_INT]),
    "hvd_status_string": (c_char_p, [hvd_status_t]),
    "hvd_last_error": (c_char_p, []),
    "hvd_clear_last_error": (None, []),
    "hvd_dtype_size": (_S, [hvd_dtype_t, POINTER(c_size_t)]),
    # explicit contexts
    "hvd_context_create": (_S, [POINTER(HvdParams), POINTER(hvd_context_t)]),
    "hvd_context_destroy": (_S, [hvd_context_t]),
    "hvd_context_rank": (_S, [hvd_context_t, _P_INT]),
    "hvd_context_size": (_S, [hvd_context_t, _P_INT]),
    "hvd_context_local_rank": (_S, [hvd_context_t, _P_INT]),
    "hvd_context_local_size": (_S, [hvd_context_t, _P_INT]),
    "hvd_context_cross_rank": (_S, [hvd_context_t, _P_INT]),
    "hvd_context_cross_size": (_S, [hvd_context_t, _P_INT]),
    "hvd_context_transport": (_S, [hvd_context_t, POINTER(c_char_p)]),
    "hvd_transport_probe": (_S, [c_char_p, c_char_p]),
    "hvd_mpi_threads_supported": (_S, [hvd_context_t, _P_INT]),
    # process sets
    "hvd_context_split": (_S, [hvd_context_t, c_int, c_int, POINTER(hvd_context_t)]),
    "hvd_process_set_create": (
        _S, [hvd_context_t, c_int32, POINTER(c_int32), POINTER(hvd_context_t)]),
    "hvd_context_parent_ranks": (_S, [hvd_context_t, POINTER(c_int32), c_int32]),
    "hvd_timeline_start": (_S, [hvd_context_t, c_char_p, c_int]),
    "hvd_timeline_stop": (_S, [hvd_context_t]),
    "hvd_metrics": (_S, [hvd_context_t, c_int, c_char_p, c_size_t, POINTER(c_size_t)]),
    "hvd_flight_recorder_dump": (_S, [hvd_context_t, c_char_p]),
    # elastic jobs
    "hvd_context_reset": (_S, [hvd_context_t]),
    "hvd_context_membership": (_S, [hvd_context_t, POINTER(HvdMembership)]),
    # default context
    "hvd_init": (_S, [POINTER(HvdParams)]),
    "hvd_shutdown": (_S, []),
    "hvd_is_initialized": (_S, [_P_INT]),
    "hvd_default_context": (_S, [POINTER(hvd_context_t)]),
    "hvd_rank": (_S, [_P_INT]),
    "hvd_size": (_S, [_P_INT]),
    "hvd_local_rank": (_S, [_P_INT]),
    "hvd_local_size": (_S, [_P_INT]),
    "hvd_cross_rank": (_S, [_P_INT]),
    "hvd_cross_size": (_S, [_P_INT]),
    # asynchronous collectives
    "hvd_allreduce_async": (
        _S,
        [hvd_context_t, c_char_p, POINTER(HvdTensor), c_void_p, hvd_reduce_op_t, c_double,
         c_double, POINTER(hvd_handle_t)],
    ),
    "hvd_grouped_allreduce_async": (
        _S,
        [hvd_context_t, c_int32, POINTER(c_char_p), POINTER(HvdTensor), POINTER(c_void_p),
         hvd_reduce_op_t, c_double, c_double, POINTER(hvd_handle_t)],
    ),
    "hvd_allgather_async": (
        _S, [hvd_context_t, c_char_p, POINTER(HvdTensor), POINTER(hvd_handle_t)]),
    "hvd_broadcast_async": (
        _S,
        [hvd_context_t, c_char_p, POINTER(HvdTensor), c_void_p, c_int32, POINTER(hvd_handle_t)],
    ),
    "hvd_alltoall_async": (
        _S,
        [hvd_context_t, c_char_p, POINTER(HvdTensor), POINTER(c_int64), POINTER(hvd_handle_t)],
    ),
    "hvd_reducescatter_async": (
        _S,
        [hvd_context_t, c_char_p, POINTER(HvdTensor), hvd_reduce_op_t, c_double, c_double,
         POINTER(hvd_handle_t)],
    ),
    "hvd_barrier_async": (_S, [hvd_context_t, POINTER(hvd_handle_t)]),
    "hvd_join_async": (_S, [hvd_context_t, POINTER(hvd_handle_t)]),
    # blocking conveniences
    "hvd_allreduce": (
        _S, [hvd_context_t, c_char_p, POINTER(HvdTensor), c_void_p, hvd_reduce_op_t]),
    "hvd_broadcast": (_S, [hvd_context_t, c_char_p, POINTER(HvdTensor), c_void_p, c_int32]),
    "hvd_barrier": (_S, [hvd_context_t]),
    # handles
    "hvd_handle_wait": (_S, [hvd_handle_t, c_double]),
    "hvd_handle_poll": (_S, [hvd_handle_t]),
    "hvd_handle_release": (_S, [hvd_handle_t]),
    "hvd_handle_output": (_S, [hvd_handle_t, POINTER(c_void_p), POINTER(c_size_t)]),
    "hvd_handle_output_device": (
        _S, [hvd_handle_t, POINTER(c_void_p), POINTER(c_size_t), POINTER(c_int32)]),
    "hvd_handle_output_shape": (_S, [hvd_handle_t, POINTER(c_int64), c_int32, POINTER(c_int32)]),
    "hvd_handle_recv_splits": (_S, [hvd_handle_t, POINTER(c_int64), c_int32]),
    "hvd_handle_cuda_event": (_S, [hvd_handle_t, POINTER(c_void_p)]),
    "hvd_handle_stream_wait": (_S, [hvd_handle_t, c_void_p]),
}

# ---------------------------------------------------------------------------
# Finding and loading the library.
# ---------------------------------------------------------------------------
LIBRARY_NAME = "libhvd.so"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _repository_root():
    """bindings/python/hvd -> the repository root, if this is a source tree."""
    root = os.path.abspath(os.path.join(_PACKAGE_DIR, os.pardir, os.pardir, os.pardir))
    if os.path.isfile(os.path.join(root, "include", "hvd.h")):
        return root
    return None


def candidate_paths():
    """Every (description, path) the loader tries, in order."""
    out = []
    env = os.environ.get("HVD_LIBRARY_PATH", "")
    if env:
        if os.path.isdir(env):
            out.append(("HVD_LIBRARY_PATH", os.path.join(env, LIBRARY_NAME)))
        else:
            out.append(("HVD_LIBRARY_PATH", env))
    out.append(("package folder", os.path.join(_PACKAGE_DIR, LIBRARY_NAME)))
    root = _repository_root()
    if root is not None:
        out.append(("build tree", os.path.join(root, "build", "lib", LIBRARY_NAME)))
        others = glob.glob(os.path.join(root, "build-*", "lib", LIBRARY_NAME))
        others.sort(key=lambda p: os.path.getmtime(p) if os.path.exists(p) else 0, reverse=True)
        out.extend(("build tree", p) for p in others)
    return out


def _load():
    tried = []
    for what, path in candidate_paths():
        if not os.path.exists(path):
            tried.append(f"{path} ({what}: no such file)")
            continue
        try:
            return ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL), path
        except OSError as e:
            if what == "HVD_LIBRARY_PATH":
                raise LibraryNotFoundError(
                    f"HVD_LIBRARY_PATH names {path}, which cannot be loaded: {e}") from e
            tried.append(f"{path} ({what}: {e})")
    # Last: the system loader (LD_LIBRARY_PATH, ldconfig cache).
    for name in (LIBRARY_NAME, f"{LIBRARY_NAME}.{BINDING_VERSION_MAJOR}"):
        try:
            lib = ctypes.CDLL(name, mode=ctypes.RTLD_LOCAL)
            return lib, _loaded_path(lib) or name
        except OSError as e:
            tried.append(f"{name} (default loader: {e})")
    raise LibraryNotFoundError(
        "hvd: cannot find libhvd.so. Looked in:\n  " + "\n  ".join(tried) +
        "\nBuild it (cmake --build <dir> --target hvd), set HVD_LIBRARY_PATH to the file or its "
        "folder, or pip install the package.")


def _loaded_path(lib):
    """The file a loaded CDLL came from (via dladdr on one of its symbols)."""
    try:
        class _DlInfo(Structure):
            _fields_ = [("dli_fname", c_char_p), ("dli_fbase", c_void_p),
                        ("dli_sname", c_char_p), ("dli_saddr", c_void_p)]
        libc = ctypes.CDLL(None)
        dladdr = libc.dladdr
        dladdr.argtypes = [c_void_p, POINTER(_DlInfo)]
        dladdr.restype = c_int
        info = _DlInfo()
        addr = ctypes.cast(lib.hvd_version, c_void_p)
        if dladdr(addr, ctypes.byref(info)) and info.dli_fname:
            return os.path.abspath(info.dli_fname.decode())
    except Exception:  # best effort: only used in messages
        pass
    return None


class _MissingFunction:
    """Stands in for a function hvd.h declares but this library does not
    export (an older or unfinished library): calling it raises
    UnsupportedError naming the function and the file."""

    def __init__(self, name, path):
        self.__name__ = name
        self._path = path
        self.argtypes = None
        self.restype = None

    def __call__(self, *args):
        raise UnsupportedError(
            HVD_ERR_UNSUPPORTED,
            f"{self.__name__}: not exported by {self._path} (the library predates it or does "
            "not implement it yet)")


_lock = threading.Lock()
_lib = None
_lib_path = None
MISSING = []  # names of hvd.h functions the loaded library lacks


def lib():
    """The loaded library (loaded and checked on first use)."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        raw, path = _load()

        class _Lib:
            pass

        wrapped = _Lib()
        for name, (restype, argtypes) in FUNCTIONS.items():
            try:
                fn = getattr(raw, name)
            except AttributeError:
                MISSING.append(name)
                setattr(wrapped, name, _MissingFunction(name, path))
                continue
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(wrapped, name, fn)
        if "hvd_version" in MISSING:
            raise LibraryNotFoundError(f"{path} is not libhvd (it has no hvd_version)")
        major, minor, patch = c_int(-1), c_int(-1), c_int(-1)
        wrapped.hvd_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
        if major.value != BINDING_VERSION_MAJOR:
            raise VersionError(
                HVD_ERR_VERSION,
                f"{path} is libhvd {major.value}.{minor.value}.{patch.value}, but this Python "
                f"package needs major version {BINDING_VERSION_MAJOR}; point HVD_LIBRARY_PATH at "
                "a matching build")
        wrapped.version = (major.value, minor.value, patch.value)
        wrapped.path = path
        _lib_path = path
        _lib = wrapped
        return _lib


def library_path():
    return lib().path


def library_version():
    return lib().version


def plugin_path(transport: str):
    """Where the transport plugin would be, next to the library (or None)."""
    p = os.path.join(os.path.dirname(library_path()), f"libhvd_transport_{transport}.so")
    return p if os.path.exists(p) else None


# ---------------------------------------------------------------------------
# Checked calls.
# ---------------------------------------------------------------------------


def status_string(status: int) -> str:
    try:
        return lib().hvd_status_string(int(status)).decode("utf-8", "replace")
    except Exception:
        return status_name(status)


def last_error() -> str:
    return lib().hvd_last_error().decode("utf-8", "replace")


def check_call(ret: int) -> int:
    """Raises the HvdError subclass for a negative status (with the calling
    thread's last-error text); returns non-negative statuses unchanged."""
    if ret < 0:
        msg = last_error() or status_string(ret)
        raise make_error(ret, msg)
    return ret


def call(name: str, *args) -> int:
    """lib().name(*args), checked."""
    return check_call(getattr(lib(), name)(*args))


def get_int(name: str, *args) -> int:
    out = c_int(0)
    call(name, *args, ctypes.byref(out))
    return out.value


def dtype_size(dtype: int) -> int:
    out = c_size_t(0)
    call("hvd_dtype_size", int(dtype), ctypes.byref(out))
    return out.value
