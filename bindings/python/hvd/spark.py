"""Run a Python function on Spark barrier tasks with hvd initialised.

    import hvd, hvd.spark

    def train(lr):
        import numpy as np
        grad = np.full(4, hvd.rank() + 1.0)
        return hvd.allreduce(grad, op=hvd.Sum, name="grad")

    results = hvd.spark.run(train, args=(0.1,), num_proc=2)   # one result per rank, rank order

Each of the ``num_proc`` tasks of one barrier stage (``rdd.barrier().mapPartitions``)
becomes one hvd rank: rank = partition id, size = number of tasks, local rank =
index among the stage's tasks on the same host. hvd's default context is
bootstrapped through its out-of-band allgather implemented with
``BarrierTaskContext.allGather``: task 0 hosts the rendezvous store, and its
address and a fresh secret reach the other tasks through Spark, so nothing has to
be configured or opened on the driver. ``hvd.shutdown()`` runs in a ``finally``
block; a failure to shut down is logged and never hides the function's own error.

Before the job is submitted, ``run`` checks that the cluster has ``num_proc``
task slots (Spark's own count, the one its barrier check uses), waiting up to
``spark.hvd.slotWaitTimeout`` (default 120 s) for executors that are still
registering; when it cannot have them it raises :class:`InsufficientSlotsError`
at once, where Spark would retry for about ten minutes.

The executors need no setup for hvd: ``run`` ships the driver's ``hvd`` package
(its Python files, zipped, through ``SparkContext.addPyFile``) and tells the tasks
where the driver's ``libhvd.so`` is. A task uses, in order: ``HVD_LIBRARY_PATH``
in the executor's environment, the driver's library file if the executor sees it
at the same path (one machine, a shared file system, the same image), or a
``libhvd.so`` inside an ``hvd`` package installed on the executor.

A function that raises fails the stage, and ``run`` raises the same exception on
the driver: same type (``hvd.MismatchError``, ``ValueError``, ...), same message,
with the task's traceback as a note and Spark's error as its ``__cause__``.

Resuming after a failure (docs/elastic.md, "Spark"): Spark never retries a failed
barrier *result* stage, so by default a failure ends the job. With
``run(..., resumable=True)`` the barrier stage is followed by a shuffle, which
makes it a shuffle-map stage: when one of its tasks fails, Spark kills the others
and runs the whole stage again (a new hvd job: new tasks, ranks and rendezvous),
up to ``spark.stage.maxConsecutiveAttempts`` attempts (default 4). The function
goes on from its last commit with a :class:`Checkpoint`: rank 0 writes the state
to a path at each commit, every rank of the next attempt starts from it, and the
driver can read it.

    def train(path):
        ckpt = hvd.spark.Checkpoint(path)
        state = ckpt.load(default={"step": 0, "w": w0})   # rank 0's file, on every rank
        while state["step"] < steps:
            ...                                             # collectives
            state["step"] += 1
            if state["step"] % 10 == 0:
                ckpt.commit(state)                          # rank 0 writes it
        return state

    hvd.spark.run(train, args=(path,), num_proc=4, resumable=True)
"""

from __future__ import annotations

import atexit
import base64
import logging
import os
import pickle
import re
import shutil
import sys
import tempfile
import threading
import time
import traceback
import zipfile

__all__ = ["run", "Checkpoint", "InsufficientSlotsError", "TaskFailedError"]

_log = logging.getLogger("hvd.spark")

# How long a task whose collective was aborted by a peer waits before it reports
# its own failure (Spark kills it meanwhile when the peer's failure came first).
_SECONDARY_FAILURE_GRACE_S = 5.0

# Spark setting: how long run() waits for executors to register.
SLOT_WAIT_KEY = "spark.hvd.slotWaitTimeout"
SLOT_WAIT_DEFAULT_S = 120.0


class InsufficientSlotsError(RuntimeError):
    """The job asks for more ranks than the cluster has task slots.

    ``requested``: the ranks asked for; ``available``: the slots the cluster has
    (or will have once every executor it asked for has registered)."""

    def __init__(self, requested, available, message):
        super().__init__(message)
        self.requested = requested
        self.available = available


class TaskFailedError(RuntimeError):
    """A task failed with an exception that could not be rebuilt on the driver
    (its class cannot be imported or pickled here); the message names it."""


def _host(address):
    """The host part of a barrier task's "host:port" address."""
    a = (address or "").strip()
    if a.startswith("["):
        end = a.find("]")
        return a[1:end] if end > 0 else a
    if a.count(":") == 1:
        return a.rsplit(":", 1)[0]
    return a


def _topology(rank, addresses):
    """(local_rank, local_size, cross_rank, cross_size) from the tasks' addresses,
    in partition order, as hvdrun defines them."""
    hosts = [_host(a) for a in addresses]
    seen = {}
    local = []
    for h in hosts:
        local.append(seen.get(h, 0))
        seen[h] = local[-1] + 1
    same_local = [i for i, lr in enumerate(local) if lr == local[rank]]
    return local[rank], seen[hosts[rank]], same_local.index(rank), len(same_local)


# ---------------------------------------------------------------------------
# Task slots
# ---------------------------------------------------------------------------
_LOCAL = re.compile(r"local(?:\[\s*(\*|\d+)\s*(?:,\s*\d+\s*)?\])?$")
_LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]$")


def _expected_slots(master, conf_get):
    """The slots the application will have once every executor it asked for
    has registered, or None when the settings do not tell."""
    task_cpus = max(1, int(conf_get("spark.task.cpus", "1")))
    master = master.strip()
    m = _LOCAL.match(master)
    if m:
        n = m.group(1)
        cores = 1 if n is None else (os.cpu_count() or 1) if n == "*" else int(n)
        return cores // task_cpus
    m = _LOCAL_CLUSTER.match(master)
    if m:
        return int(m.group(1)) * (int(m.group(2)) // task_cpus)
    if conf_get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        return None
    inst, cores = conf_get("spark.executor.instances", None), conf_get("spark.executor.cores", None)
    if inst is not None and cores is not None:
        return int(inst) * (int(cores) // task_cpus)
    return None


def _slots_now(sc):
    """Task slots as Spark's barrier check counts them (maxNumConcurrentTasks)."""
    jsc = sc._jsc.sc()
    try:
        return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
    except Exception:  # an internal method: fall back to counting executors
        executors = len(jsc.statusTracker().getExecutorInfos())
        if not jsc.isLocal():
            executors -= 1  # the list includes the driver
        cores = int(sc.getConf().get("spark.executor.cores", "1"))
        return max(0, executors) * max(1, cores // max(1, int(sc.getConf().get("spark.task.cpus", "1"))))


def _time_s(text):
    m = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s|m|min|h)?\s*", str(text))
    if not m:
        raise ValueError(f"{SLOT_WAIT_KEY}: not a time: {text!r}")
    scale = {None: 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "min": 60.0, "h": 3600.0}[m.group(2)]
    return float(m.group(1)) * scale


def _await_slots(sc, requested):
    """Returns once the cluster has `requested` task slots; raises
    InsufficientSlotsError at once when it never can, or after the wait."""
    have = _slots_now(sc)
    if have >= requested:
        return
    conf = sc.getConf()
    master = sc.master
    expected = _expected_slots(master, conf.get)
    if expected is not None and _LOCAL.match(master.strip()):
        expected = have  # local mode: the driver's own executor, all there from the start
    wait_s = _time_s(conf.get(SLOT_WAIT_KEY, f"{SLOT_WAIT_DEFAULT_S:g}s"))
    setting = f"master {master}, spark.task.cpus={conf.get('spark.task.cpus', '1')}"
    if expected is not None and expected < requested:
        raise InsufficientSlotsError(requested, expected, (
            f"hvd.spark.run: num_proc={requested} needs {requested} barrier task slots at once, "
            f"but the cluster has {expected} ({setting}). Ask for at most {max(expected, 1)} "
            "ranks, or give the cluster more executors or cores."))
    t0 = time.monotonic()
    while time.monotonic() - t0 < wait_s:
        time.sleep(0.1)
        have = _slots_now(sc)
        if have >= requested:
            _log.info("hvd.spark.run: %d task slots after waiting %.1f s for executors", have,
                      time.monotonic() - t0)
            return
    of = "" if expected is None else f" of the {expected} expected"
    raise InsufficientSlotsError(requested, have, (
        f"hvd.spark.run: num_proc={requested} needs {requested} barrier task slots at once, but "
        f"the cluster has {have}{of} after waiting {wait_s:g} s ({SLOT_WAIT_KEY}) for executors "
        f"to register ({setting}). Ask for at most {max(have, 1)} ranks, or give the cluster "
        "more executors or cores."))


# ---------------------------------------------------------------------------
# Shipping the package
# ---------------------------------------------------------------------------
_shipped_lock = threading.Lock()
_shipped = {}  # application id -> (zip path, driver's libhvd.so path or None)


def _package_zip(dest_dir):
    """A zip of the hvd package's Python files (no native files: they cannot be
    loaded from a zip)."""
    import hvd

    pkg = os.path.dirname(os.path.abspath(hvd.__file__))
    path = os.path.join(dest_dir, "hvd.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for dirpath, dirnames, filenames in os.walk(pkg):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for f in filenames:
                if f.endswith(".py"):
                    full = os.path.join(dirpath, f)
                    z.write(full, os.path.join("hvd", os.path.relpath(full, pkg)))
    return path


def _ship(sc):
    """Ships the driver's hvd package to the executors (once per application);
    returns the driver's libhvd.so path (None when the driver cannot load it)."""
    app = sc.applicationId
    with _shipped_lock:
        if app in _shipped:
            return _shipped[app][1]
        import hvd

        try:
            lib = hvd.library_path()
        except Exception as e:  # the executors may still find their own
            _log.warning("hvd.spark: the driver cannot load libhvd.so (%s); the executors must "
                         "find it themselves (HVD_LIBRARY_PATH or an installed hvd)", e)
            lib = None
        tmp = tempfile.mkdtemp(prefix="hvd-spark-")
        atexit.register(shutil.rmtree, tmp, True)
        zpath = _package_zip(tmp)
        sc.addPyFile(zpath)
        _shipped[app] = (zpath, lib)
        return lib


def _choose_library(driver_lib):
    """On an executor: the libhvd.so this task should load (None: hvd's own search)."""
    if os.environ.get("HVD_LIBRARY_PATH"):
        return None
    if driver_lib and os.path.exists(driver_lib):
        return driver_lib
    for p in sys.path:  # an hvd package installed on the executor (the wheel carries libhvd.so)
        cand = os.path.join(p, "hvd", "libhvd.so")
        if p and os.path.isfile(cand):
            return cand
    return None


# ---------------------------------------------------------------------------
# Exceptions: task -> driver
# ---------------------------------------------------------------------------
_MARK = "[hvd.spark.exception:"
_MARK_RE = re.compile(re.escape(_MARK) + r"([A-Za-z0-9+/=]+)\]")
_MAX_BLOB = 256 * 1024


class _TaskException(Exception):
    """Raised by a failed task (chained to the function's exception): its message
    carries the exception, encoded, for run() to raise on the driver."""


def _encode_exception(e, rank, size):
    """The exception as a marker string: hvd's errors by class, status and message;
    others pickled (cloudpickle) when they survive a round trip, else by class
    name and message."""
    import hvd

    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    where = f"rank {rank} of {size}"
    if isinstance(e, hvd.HvdError):
        info = ("hvd", type(e).__name__, e.status, e.message, where, tb)
    else:
        info = None
        try:
            from pyspark import cloudpickle

            blob = cloudpickle.dumps(e)
            again = pickle.loads(blob)
            if type(again) is type(e) and str(again) == str(e) and len(blob) <= _MAX_BLOB:
                info = ("pickle", blob, where, tb)
        except Exception:
            pass
        if info is None:
            info = ("text", type(e).__module__, type(e).__qualname__, str(e), where, tb)
    return _MARK + base64.b64encode(pickle.dumps(info, protocol=4)).decode("ascii") + "]"


def _decode_exception(text):
    """The task's exception from Spark's error text, or None."""
    m = _MARK_RE.search(text or "")
    if not m:
        return None
    try:
        info = pickle.loads(base64.b64decode(m.group(1)))
    except Exception:
        return None
    kind = info[0]
    if kind == "hvd":
        import hvd

        _, name, status, message, where, tb = info
        cls = getattr(hvd, name, None)
        if not (isinstance(cls, type) and issubclass(cls, hvd.HvdError)):
            cls = hvd.HvdError
        exc = cls(status, message)
    elif kind == "pickle":
        _, blob, where, tb = info
        try:
            exc = pickle.loads(blob)
        except Exception as e:
            exc = TaskFailedError(f"a task failed and its exception cannot be rebuilt here ({e})")
    else:
        _, module, qualname, message, where, tb = info
        exc = TaskFailedError(f"{module}.{qualname}: {message}")
    if hasattr(exc, "add_note"):
        exc.add_note(f"raised by hvd.spark.run's task, {where}:\n{tb.rstrip()}")
    return exc


def _error_text(err):
    """Everything Spark's error says (py4j: the Java exception's message and causes)."""
    parts = [str(err)]
    jexc = getattr(err, "java_exception", None)
    while jexc is not None:
        try:
            parts.append(str(jexc.getMessage()))
            jexc = jexc.getCause()
        except Exception:
            break
    return "\n".join(parts)


# ---------------------------------------------------------------------------
# Checkpoints: resuming a retried stage
# ---------------------------------------------------------------------------
class Checkpoint:
    """The last committed state of a training run, in one file (pickled) that rank
    0 writes and the next attempt's ranks, and the driver, read.

    ``path`` must be reachable from the task that will be rank 0 in every attempt
    and from the driver: a shared file system, or any local path on a one-machine
    cluster. Give each run its own path (a file left by an earlier run is read as
    this run's last commit).

    In a task: ``load`` (collective) and ``commit`` (rank 0 writes; no
    collective). On the driver: ``read``."""

    def __init__(self, path):
        self.path = os.fspath(path)

    def read(self, default=None):
        """The last committed state, or ``default`` when nothing was committed.
        Anywhere (the driver, a task); not collective."""
        try:
            with open(self.path, "rb") as f:
                return pickle.load(f)
        except FileNotFoundError:
            return default

    def load(self, default=None):
        """Collective over the job's ranks: rank 0 reads the file (``default``
        when there is none) and every rank gets its state."""
        import hvd

        state = self.read(default) if hvd.rank() == 0 else None
        return hvd.broadcast_object(state, root_rank=0, name="hvd.spark.checkpoint")

    def commit(self, state):
        """Rank 0 writes ``state`` (pickled) to the path, atomically: a reader sees
        the previous commit or this one, never part of one, even when the task is
        killed while writing. Other ranks do nothing (their state is rank 0's in
        data-parallel training). Returns True on the rank that wrote."""
        import hvd

        if hvd.rank() != 0:
            return False
        d = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".hvd-checkpoint-", dir=d)
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return True


# ---------------------------------------------------------------------------
# The task
# ---------------------------------------------------------------------------
def _task(fn, args, kwargs, params, driver_lib):
    def body(_iterator):
        from pyspark import BarrierTaskContext

        lib = _choose_library(driver_lib)
        if lib is not None:
            os.environ["HVD_LIBRARY_PATH"] = lib

        import hvd

        ctx = BarrierTaskContext.get()
        rank = ctx.partitionId()
        addresses = [info.address for info in ctx.getTaskInfos()]
        size = len(addresses)
        local_rank, local_size, cross_rank, cross_size = _topology(rank, addresses)

        def oob_allgather(data):
            msgs = ctx.allGather(base64.b64encode(data).decode("ascii"))
            return b"".join(base64.b64decode(m) for m in msgs)

        settings = dict(params)
        settings.update(rank=rank, size=size, local_rank=local_rank, local_size=local_size,
                        cross_rank=cross_rank, cross_size=cross_size,
                        oob_allgather=oob_allgather)
        try:
            hvd.init(**settings)
            echo = False
            try:
                result = fn(*args, **kwargs)
            except (hvd.AbortedError, hvd.TransportError):
                echo = True
                _log.exception("hvd rank %d of %d: a collective was aborted", rank, size)
                raise
            finally:
                try:
                    hvd.shutdown()
                except Exception:  # logged, never raised over the function's own error
                    _log.warning("hvd rank %d: shutdown failed", rank, exc_info=True)
                if echo:
                    # Most likely an echo of another task's failure (it shut down
                    # or died). A shut-down rank waits for every rank's shutdown,
                    # so this one's came first: now give Spark time to register
                    # that task's error and kill this worker, so the stage fails
                    # with the real error.
                    time.sleep(_SECONDARY_FAILURE_GRACE_S)
        except Exception as e:
            _log.exception("hvd rank %d of %d failed", rank, size)
            raise _TaskException(_encode_exception(e, rank, size)) from e
        return [(rank, result)]

    return body


def run(fn, args=(), kwargs=None, num_proc=None, spark_context=None, resumable=False, **params):
    """Runs ``fn(*args, **kwargs)`` on ``num_proc`` Spark barrier tasks, each an hvd
    rank with ``hvd.init`` done, and returns the ``num_proc`` return values in
    rank order.

    num_proc: number of tasks (ranks); default: the context's defaultParallelism.
    spark_context: a SparkContext; default: the active one.
    params: further ``hvd.init`` settings for every rank (transport,
    start_timeout_s, fusion_threshold_bytes, log_level, ...). rank, size, the
    local/cross topology and the bootstrap are set here.

    resumable: when True, a failed attempt is run again by Spark as a whole (the
    barrier stage is followed by a shuffle: Spark retries a failed barrier
    shuffle-map stage, up to spark.stage.maxConsecutiveAttempts attempts, but
    never a barrier result stage); ``fn`` resumes from its :class:`Checkpoint`.
    Off by default: a failure then fails the job at once.

    Raises InsufficientSlotsError (before submitting) when the cluster cannot run
    ``num_proc`` tasks at once, and a failed task's own exception (same type and
    message) when the function raised (with resumable=True: in the last attempt).

    ``fn`` and its arguments are pickled to the executors (cloudpickle), and its
    return values back; it must finish its collectives before it returns.
    """
    try:
        from pyspark import SparkContext
    except ImportError as e:
        raise ImportError("hvd.spark needs pyspark (pip install pyspark)") from e
    sc = spark_context or SparkContext._active_spark_context
    if sc is None:
        raise RuntimeError("hvd.spark.run: no active SparkContext; create a SparkSession first")
    if num_proc is None:
        num_proc = sc.defaultParallelism
    if isinstance(num_proc, bool) or int(num_proc) != num_proc or num_proc < 1:
        raise ValueError(f"hvd.spark.run: num_proc must be a positive int, got {num_proc!r}")
    num_proc = int(num_proc)
    reserved = {"rank", "size", "local_rank", "local_size", "cross_rank", "cross_size",
                "oob_allgather"}
    clash = reserved.intersection(params)
    if clash:
        raise TypeError(f"hvd.spark.run sets {', '.join(sorted(clash))} itself")
    _await_slots(sc, num_proc)
    driver_lib = _ship(sc)
    body = _task(fn, tuple(args), dict(kwargs or {}), dict(params), driver_lib)
    rdd = sc.parallelize(range(num_proc), num_proc).barrier().mapPartitions(body)
    if resumable:
        # The shuffle makes the barrier stage a shuffle-map stage, which Spark
        # runs again as a whole when a task fails (a result stage it would not).
        rdd = rdd.repartition(1)
    try:
        ranked = rdd.collect()
    except Exception as err:
        exc = _decode_exception(_error_text(err))
        if exc is None:
            raise
        raise exc from err
    by_rank = dict(ranked)
    if sorted(by_rank) != list(range(num_proc)):
        raise RuntimeError(f"hvd.spark.run: results of ranks {sorted(by_rank)} came back, "
                           f"expected 0..{num_proc - 1}")
    return [by_rank[r] for r in range(num_proc)]
