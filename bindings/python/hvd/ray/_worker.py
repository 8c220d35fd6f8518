"""The body of one hvd rank's Ray actor (RayExecutor makes it a remote class)."""

from __future__ import annotations

import logging
import os
import socket

_log = logging.getLogger("hvd.ray")


def _release_hvd():
    """Shuts the default context down where a function left it initialised and
    then raised, so that the other ranks' collectives fail at once (naming this
    rank) instead of waiting for it until their timeouts."""
    try:
        import hvd

        for _ in range(64):  # init is reference counted; bounded all the same
            if not hvd.is_initialized():
                return
            hvd.shutdown()
    except Exception:  # logged, never raised over the function's own error
        _log.warning("hvd.ray: shutting hvd down after a failure failed", exc_info=True)


class Worker:
    """One rank: runs the driver's functions in this process, with the HVD_*
    variables the driver gave it in os.environ (so hvd.init() in them joins
    the job)."""

    def __init__(self):
        self.executable = None

    def node(self):
        """(node id, node IP, GPU ids, pid, host name): where this actor runs."""
        import ray

        ctx = ray.get_runtime_context()
        try:
            gpus = [str(g) for g in ray.get_gpu_ids()]
        except Exception:
            gpus = []
        return (ctx.get_node_id(), ray.util.get_node_ip_address(), gpus, os.getpid(),
                socket.gethostname())

    def update_env(self, env):
        """Sets the variables (a None value removes one)."""
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = str(v)

    def start_executable(self, cls, args, kwargs):
        self.executable = cls(*(args or ()), **(kwargs or {}))

    def execute(self, fn):
        """fn(executable) (Horovod's execute: the executable_cls instance, or None)."""
        return self._guarded(fn, (self.executable,), {})

    def run(self, fn, args, kwargs):
        return self._guarded(fn, args or (), kwargs or {})

    def _guarded(self, fn, args, kwargs):
        try:
            return fn(*args, **kwargs)
        except BaseException:
            _release_hvd()
            raise

    def ping(self):
        return os.getpid()
