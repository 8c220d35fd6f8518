"""hvd's TensorFlow kernels (_tf_kernels.cc; their op definitions in
_tf_ops.cc): built against the installed TensorFlow on first use, cached,
loaded, and bound to the libhvd.so this package loaded.

hvd.tensorflow runs its collectives in graphs (tf.function, Keras' compiled
train step, tf.compat.v1 Session.run) through these kernels: asynchronous
TensorFlow kernels that never hold one of TensorFlow's threads while waiting
for other ranks (why that matters: the comment at the top of the .cc file).

The build takes tens of seconds, once per TensorFlow version and compiler:
the library is cached under $HVD_TF_KERNELS_DIR, else
$XDG_CACHE_HOME/hvd/tf-kernels (~/.cache/hvd/tf-kernels). Ranks that start
together build it once (a file lock). Build it ahead of time with

    python -m hvd._tf_kernels

HVD_TF_KERNELS=0 skips the kernels: graph-mode ops then run in a
tf.py_function, which blocks a TensorFlow thread per pending op and can
deadlock a graph that runs more independent hvd ops at once than TensorFlow
has inter-op threads. When the build fails (no C++ compiler, no TensorFlow
headers) hvd.tensorflow warns once and uses tf.py_function the same way.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import tensorflow as tf

from . import _c_api as C

_HERE = os.path.dirname(os.path.abspath(__file__))
# The kernels and the op definitions, built into one library.
SOURCES = [os.path.join(_HERE, "_tf_kernels.cc"), os.path.join(_HERE, "_tf_ops.cc")]
SOURCE = SOURCES[0]
LIB_NAME = "hvd_tf_kernels.so"
BUILD_TIMEOUT_S = 900.0  # the compiler run
LOCK_TIMEOUT_S = 1200.0  # waiting for another process's build

_lock = threading.Lock()
_state = {"module": None, "error": None, "tried": False, "so": None}


class KernelBuildError(RuntimeError):
    """The kernels could not be built or loaded; the message says why."""


def disabled() -> bool:
    return os.environ.get("HVD_TF_KERNELS", "").strip().lower() in ("0", "off", "false", "no")


def cache_dir() -> str:
    d = os.environ.get("HVD_TF_KERNELS_DIR")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "hvd", "tf-kernels")


def _compiler():
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or \
        shutil.which("clang++")
    if not cxx:
        raise KernelBuildError("no C++ compiler found (set CXX, or install g++)")
    return shlex.split(cxx)


def _command(out_path):
    cflags = tf.sysconfig.get_compile_flags()
    lflags = tf.sysconfig.get_link_flags()
    return (_compiler() + ["-shared", "-fPIC", "-O2", "-w", "-fvisibility=hidden", *SOURCES,
                           "-o", out_path] + cflags + lflags + ["-ldl", "-pthread"])


def _key():
    """What the built library depends on: the source, TensorFlow, the
    compiler and its flags."""
    h = hashlib.sha256()
    for source in SOURCES:
        with open(source, "rb") as f:
            h.update(f.read())
    cxx = _compiler()
    try:
        version = subprocess.run(cxx + ["--version"], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise KernelBuildError(f"cannot run the C++ compiler {cxx[0]!r}: {e}") from e
    for part in (tf.__version__, tf.sysconfig.get_lib(), " ".join(_command("OUT")), version):
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:20]


def _flock(path, timeout):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise
        if time.monotonic() >= deadline:
            os.close(fd)
            raise KernelBuildError(f"waited {timeout:.0f} s for another process building the "
                                   f"kernels (lock {path}); remove it if no build is running")
        time.sleep(0.2)


def build(verbose=False) -> str:
    """The path of the built library, building it if the cache lacks it."""
    key = _key()
    d = os.path.join(cache_dir(), key)
    lib = os.path.join(d, LIB_NAME)
    if os.path.isfile(lib):
        return lib
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as e:
        raise KernelBuildError(f"cannot create the kernel cache {d}: {e}") from e
    fd = _flock(os.path.join(d, "build.lock"), LOCK_TIMEOUT_S)
    try:
        if os.path.isfile(lib):  # built by the process we waited for
            return lib
        fd_tmp, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=d)
        os.close(fd_tmp)
        cmd = _command(tmp)
        if verbose:
            print(" ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise KernelBuildError(f"compiling {SOURCE} took over {BUILD_TIMEOUT_S:.0f} s") from e
        except OSError as e:
            raise KernelBuildError(f"cannot run {cmd[0]!r}: {e}") from e
        if p.returncode != 0:
            out = p.stdout.decode("utf-8", "replace")
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise KernelBuildError(f"compiling {SOURCE} failed (exit {p.returncode}):\n"
                                   f"{out[-3000:]}\ncommand: {' '.join(cmd)}")
        os.replace(tmp, lib)
        return lib
    finally:
        os.close(fd)


def _bind(path):
    so = ctypes.CDLL(path)  # the library tf.load_op_library just loaded
    fn = so.hvd_tf_kernels_bind
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    fn.restype = ctypes.c_int
    err = ctypes.create_string_buffer(1024)
    libhvd = os.path.realpath(C.library_path())
    if fn(libhvd.encode(), err, len(err)) != 0:
        raise KernelBuildError(f"binding {path} to {libhvd}: "
                               f"{err.value.decode('utf-8', 'replace')}")
    set_ctx = so.hvd_tf_kernels_set_context
    set_ctx.argtypes = [ctypes.c_int64, ctypes.c_void_p]
    set_ctx.restype = None
    return set_ctx


def load():
    """The loaded op module, or None (disabled, or the build failed:
    error() then says why). Tries once per process."""
    with _lock:
        if _state["tried"]:
            return _state["module"]
        _state["tried"] = True
        if disabled():
            _state["error"] = "HVD_TF_KERNELS=0"
            return None
        try:
            path = build()
            module = tf.load_op_library(path)
            _state["so"] = _bind(path)
        except (KernelBuildError, tf.errors.OpError, OSError) as e:
            _state["error"] = str(e)
            return None
        _run_independently(OP_TYPES)
        _state["module"] = module
        return module


OP_TYPES = ("HvdAllreduce", "HvdGroupedAllreduce", "HvdBroadcast", "HvdAllgather",
            "HvdReducescatter", "HvdAlltoall")


def _run_independently(op_types):
    """Inside a tf.function TensorFlow chains stateful ops that take no
    resource in program order (automatic control dependencies). Collectives
    must not be chained: ranks that build independent hvd ops in different
    orders would each wait for an op the other submits only later. The ops
    are stateful (never folded, merged or pruned); this adds their types to
    TensorFlow's own set of ops that must run but in any order (the TPU
    infeed ops are there). A private set: where it is missing, the ops stay
    chained, which is still correct when every rank builds them in the same
    order."""
    try:
        from tensorflow.python.framework import auto_control_deps as acd
        current = acd.MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS
        acd.MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS = frozenset(current) | frozenset(op_types)
    except (ImportError, AttributeError, TypeError):
        pass


def set_context(process_set_id, ptr):
    """Tells the loaded kernels the context of a process set of the default
    context (ptr None: forget it; done before the set is destroyed). Does
    nothing when the kernels are not loaded."""
    fn = _state["so"]
    if fn is not None:
        fn(int(process_set_id), ptr)


def error():
    """Why load() returned None (None if it did not, or was not called)."""
    return _state["error"]


def main():
    try:
        path = build(verbose=True)
        tf.load_op_library(path)
        _bind(path)
    except KernelBuildError as e:
        print(f"hvd: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
