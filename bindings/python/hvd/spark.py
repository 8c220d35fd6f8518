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
block; a failure to shut down is logged and never hides the function's own error,
and a function that raises fails the stage (and the job) with its exception. A
task whose collective was aborted by a peer's failure waits up to 5 s for Spark to
kill it before it raises, so the stage reports the first task's real error.

Needs pyspark, an active SparkContext (``SparkSession.builder...getOrCreate()``),
``num_proc`` free task slots at once, and ``hvd`` importable on the executors
(``spark.executorEnv.PYTHONPATH`` / ``HVD_LIBRARY_PATH``, or the package installed
there).
"""

from __future__ import annotations

import base64
import logging
import time

__all__ = ["run"]

_log = logging.getLogger("hvd.spark")

# How long a task whose collective was aborted by a peer waits before it reports
# its own failure (Spark kills it meanwhile when the peer's failure came first).
_SECONDARY_FAILURE_GRACE_S = 5.0


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


def _task(fn, args, kwargs, params):
    def body(_iterator):
        from pyspark import BarrierTaskContext

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
        hvd.init(**settings)
        try:
            result = fn(*args, **kwargs)
        except (hvd.AbortedError, hvd.TransportError):
            # Most likely an echo of another task's failure (it shut down or
            # died): give Spark time to register that task's error and kill
            # this worker, so the stage fails with the real error.
            _log.exception("hvd rank %d of %d: a collective was aborted", rank, size)
            time.sleep(_SECONDARY_FAILURE_GRACE_S)
            raise
        except BaseException:
            _log.exception("hvd rank %d of %d failed", rank, size)
            raise
        finally:
            try:
                hvd.shutdown()
            except Exception:  # logged, never raised over the function's own error
                _log.warning("hvd rank %d: shutdown failed", rank, exc_info=True)
        return [(rank, result)]

    return body


def run(fn, args=(), kwargs=None, num_proc=None, spark_context=None, **params):
    """Runs ``fn(*args, **kwargs)`` on ``num_proc`` Spark barrier tasks, each an hvd
    rank with ``hvd.init`` done, and returns the ``num_proc`` return values in
    rank order.

    num_proc: number of tasks (ranks); default: the context's defaultParallelism.
    spark_context: a SparkContext; default: the active one.
    params: further ``hvd.init`` settings for every rank (transport,
    start_timeout_s, fusion_threshold_bytes, log_level, ...). rank, size, the
    local/cross topology and the bootstrap are set here.

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
    if int(num_proc) != num_proc or num_proc < 1:
        raise ValueError(f"hvd.spark.run: num_proc must be a positive int, got {num_proc!r}")
    reserved = {"rank", "size", "local_rank", "local_size", "cross_rank", "cross_size",
                "oob_allgather"}
    clash = reserved.intersection(params)
    if clash:
        raise TypeError(f"hvd.spark.run sets {', '.join(sorted(clash))} itself")
    body = _task(fn, tuple(args), dict(kwargs or {}), dict(params))
    ranked = (sc.parallelize(range(num_proc), num_proc)
              .barrier()
              .mapPartitions(body)
              .collect())
    return [value for _, value in sorted(ranked, key=lambda t: t[0])]
