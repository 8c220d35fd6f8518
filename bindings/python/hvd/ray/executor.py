"""RayExecutor: Horovod's ``horovod.ray.RayExecutor`` over hvd (docs/ray.md).

One Ray actor per rank, all in one placement group; the driver hosts the job's
rendezvous store (with a fresh secret) and gives every actor the HVD_*
variables hvdrun would, so ``hvd.init()`` inside the functions it runs joins
the job. With ``min_workers``/``max_workers`` the job is elastic: the driver
forms the epochs as hvdrun's elastic driver does, and the workers' hvd.elastic
State objects carry training over a lost actor or node.
"""

from __future__ import annotations

import logging
import time

from . import _store
from ._elastic import ElasticDriver
from ._nodes import NodeProbe, driver_node_ip
from ._topology import assign_ranks, visible_gpus, worker_env
from ._worker import Worker

_log = logging.getLogger("hvd.ray")

# How long run() waits, after a worker's exception, for the others' results:
# the first exception that is not an echo (an hvd error caused by that worker
# leaving) is the one raised.
_ECHO_GRACE_S = 5.0
# Longer while every error so far is an echo and a worker has not answered:
# its node answers the probe (below), so Ray is left to report its dead actor,
# which a loaded raylet took more than 5 s to do (cluster.ray_hosts, at a load
# of 7: the worker killed, its host's raylet killed 7 s later).
_SILENT_GRACE_S = 15.0
# How long a worker may stay silent, after its peers failed (or, elastic,
# asked to join the next epoch without it), before its node is dialled.
_SILENT_S = 1.0
_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


class WorkerLostError(RuntimeError):
    """A worker's actor (or its node) died: ``rank``, ``node_ip`` and
    ``node_id`` name it."""

    def __init__(self, message, rank=None, node_ip=None, node_id=None):
        super().__init__(message)
        self.rank, self.node_ip, self.node_id = rank, node_ip, node_id


class Settings:
    """What create_settings returns: the job's timeouts (and Horovod's ssh and
    nics fields, which Ray makes unnecessary and hvd.ray does not use)."""

    def __init__(self, timeout_s=30, ssh_identity_file=None, ssh_str=None,
                 placement_group_timeout_s=100, nics=None, elastic_timeout=600):
        if not timeout_s > 0 or not placement_group_timeout_s > 0:
            raise ValueError("hvd.ray: timeout_s and placement_group_timeout_s must be > 0")
        self.timeout_s = float(timeout_s)
        self.ssh_identity_file = ssh_identity_file
        self.ssh_str = ssh_str
        self.placement_group_timeout_s = float(placement_group_timeout_s)
        self.nics = set(nics) if nics else None
        self.elastic_timeout = float(elastic_timeout)


def create_settings(timeout_s=30, ssh_identity_file=None, ssh_str=None,
                    placement_group_timeout_s=100, nics=None):
    """Horovod's RayExecutor.create_settings: timeout_s bounds the start of the
    job (every rank joining: HVD_START_TIMEOUT), placement_group_timeout_s the
    wait for Ray to place the workers. nics: the one interface the ranks use
    (HVD_NETWORK_INTERFACE); ssh_*: accepted and unused (Ray starts the
    processes)."""
    return Settings(timeout_s, ssh_identity_file, ssh_str, placement_group_timeout_s, nics)


def _ray():
    try:
        import ray
    except ImportError as e:
        raise ImportError("hvd.ray needs Ray: pip install 'hvd[ray]' (or pip install ray)") from e
    return ray


class _Member:
    """One worker as the driver sees it."""

    def __init__(self, index, actor, node):
        self.index = index
        self.actor = actor
        self.node_id, self.node_ip, self.gpus, self.pid, self.hostname = node
        self.rank = None
        self.wid = None  # elastic worker id
        self.lost = None  # why it is gone

    def describe(self):
        rank = "a worker" if self.rank is None else f"rank {self.rank}"
        return (f"{rank} (Ray actor pid {self.pid}) on node {self.node_ip} "
                f"[{self.hostname}, node id {self.node_id[:12]}]")


class RayExecutor:
    """Horovod's RayExecutor: start() places the workers, run/execute call a
    function on every one of them and return the results in rank order,
    shutdown() ends them."""

    create_settings = staticmethod(create_settings)

    def __init__(self, settings=None, num_workers=None, num_hosts=None,
                 num_workers_per_host=1, cpus_per_worker=1, use_gpu=False,
                 gpus_per_worker=None, use_current_placement_group=True, min_workers=None,
                 max_workers=None, reset_limit=None, cooldown_range=None, elastic_timeout=None,
                 override_discovery=True, placement_strategy=None):
        self.settings = settings or create_settings()
        self.elastic = min_workers is not None or max_workers is not None
        if num_workers is None and num_hosts is None:
            num_workers = max_workers if self.elastic else None
        if (num_workers is None) == (num_hosts is None):
            raise ValueError("hvd.ray.RayExecutor: give num_workers, or num_hosts (with "
                             "num_workers_per_host), not both")
        if num_hosts is not None:
            num_workers = int(num_hosts) * int(num_workers_per_host)
        self.num_workers = int(num_workers)
        self.min_workers = int(min_workers) if min_workers is not None else (
            1 if self.elastic else self.num_workers)
        self.max_workers = int(max_workers) if max_workers is not None else self.num_workers
        if not 1 <= self.min_workers <= self.num_workers <= self.max_workers:
            raise ValueError(f"hvd.ray.RayExecutor: need 1 <= min_workers ({self.min_workers}) "
                             f"<= num_workers ({self.num_workers}) <= max_workers "
                             f"({self.max_workers})")
        self.num_hosts = num_hosts
        self.num_workers_per_host = int(num_workers_per_host)
        self.cpus_per_worker = cpus_per_worker
        self.use_gpu = bool(use_gpu)
        self.gpus_per_worker = (gpus_per_worker if gpus_per_worker is not None
                                else (1 if use_gpu else 0))
        self.reset_limit = reset_limit
        self.elastic_timeout = (float(elastic_timeout) if elastic_timeout is not None
                                else self.settings.elastic_timeout)
        strategy = placement_strategy or ("STRICT_SPREAD" if num_hosts is not None else "PACK")
        if strategy not in _STRATEGIES:
            raise ValueError(f"hvd.ray.RayExecutor: placement_strategy {strategy!r} is not one "
                             f"of {', '.join(_STRATEGIES)}")
        self.placement_strategy = strategy
        self._members = []  # in rank order (elastic: the first epoch's order)
        self._pg = None
        self._store = None
        self._driver = None
        self.started_at = None  # time.monotonic() when start() began

    # -- start ----------------------------------------------------------------
    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None,
              extra_env_vars=None):
        """Places the workers, hosts the rendezvous store and gives every worker
        its HVD_* variables; with executable_cls, makes one instance of it in
        every worker (what execute() calls)."""
        ray = _ray()
        if self._members:
            raise RuntimeError("hvd.ray.RayExecutor.start: already started")
        self.started_at = time.monotonic()
        try:
            self._place(ray)
            self._members = self._ordered(ray)
            self._serve_store(ray)
            envs = self._envs(extra_env_vars)
            ray.get([m.actor.update_env.remote(env) for m, env in zip(self._members, envs)])
            if executable_cls is not None:
                ray.get([m.actor.start_executable.remote(executable_cls, executable_args,
                                                         executable_kwargs)
                         for m in self._members])
        except BaseException:
            self.shutdown()
            raise

    def _bundles(self):
        if self.num_hosts is not None:
            per_host = self.num_workers_per_host
            bundle = {"CPU": self.cpus_per_worker * per_host}
            if self.gpus_per_worker:
                bundle["GPU"] = self.gpus_per_worker * per_host
            return [dict(bundle) for _ in range(self.num_hosts)], per_host
        bundle = {"CPU": self.cpus_per_worker}
        if self.gpus_per_worker:
            bundle["GPU"] = self.gpus_per_worker
        return [dict(bundle) for _ in range(self.num_workers)], 1

    def _place(self, ray):
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundles, per_bundle = self._bundles()
        self._pg = placement_group(bundles, strategy=self.placement_strategy)
        timeout = self.settings.placement_group_timeout_s
        ready, _ = ray.wait([self._pg.ready()], timeout=timeout)
        if not ready:
            raise TimeoutError(
                f"hvd.ray.RayExecutor.start: Ray could not place {len(bundles)} bundle(s) of "
                f"{bundles[0]} ({self.placement_strategy}) within {timeout:g} s "
                f"(placement_group_timeout_s); the cluster has {ray.cluster_resources()}, "
                f"available now {ray.available_resources()}")
        remote = ray.remote(Worker)
        actors = []
        for i in range(self.num_workers):
            actors.append(remote.options(
                num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self._pg, placement_group_bundle_index=i // per_bundle)).remote())
        self._actors = actors

    def _ordered(self, ray):
        nodes = ray.get([a.node.remote() for a in self._actors],
                        timeout=self.settings.timeout_s + 60)
        members = [_Member(i, a, n) for i, (a, n) in enumerate(zip(self._actors, nodes))]
        order, slots = assign_ranks([(m.node_id, m.node_ip) for m in members],
                                    first_node=ray.get_runtime_context().get_node_id())
        self._slots = [slots[i] for i in order]
        self._gpu_ids = [members[i].gpus for i in order]
        ordered = [members[i] for i in order]
        for rank, m in enumerate(ordered):
            m.rank = rank
        return ordered

    def _serve_store(self, ray):
        self._secret = _store.new_secret()
        self._store = _store.StoreServer(self._secret)
        self._addr = f"{driver_node_ip(ray)}:{self._store.port}"
        self._probe = NodeProbe(ray, {m.node_id for m in self._members})
        if self.elastic:
            self._driver = ElasticDriver(
                self._store, self.min_workers, self.settings.timeout_s, self.elastic_timeout,
                describe=self._describe_wid, drop=self._drop_wid, reset_limit=self.reset_limit)

    def _envs(self, extra_env_vars):
        envs = []
        gpus = visible_gpus(self._slots, self._gpu_ids) if self.use_gpu else None
        for m, slot in zip(self._members, self._slots):
            env = worker_env(slot, self._addr, self._secret, self.settings.timeout_s)
            if self.settings.nics:
                env["HVD_NETWORK_INTERFACE"] = ",".join(sorted(self.settings.nics))
            if gpus is not None:
                env["CUDA_VISIBLE_DEVICES"] = gpus[m.rank]
            if self.elastic:
                m.wid = f"{m.node_ip}:{m.rank}:{m.pid}"
                self._driver.add(m.wid)
                for k in ("HVD_RANK", "HVD_SIZE", "HVD_LOCAL_RANK", "HVD_LOCAL_SIZE",
                          "HVD_CROSS_RANK", "HVD_CROSS_SIZE"):
                    env[k] = None  # an elastic worker's ranks come with each epoch
                env.update(HVD_ELASTIC="1", HVD_ELASTIC_WORKER=m.wid, HVD_ELASTIC_TIMEOUT=(
                    f"{self.elastic_timeout + self.settings.timeout_s + 5:g}"))
            env.update(extra_env_vars or {})
            envs.append(env)
        return envs

    def _by_wid(self, wid):
        return next(m for m in self._members if m.wid == wid)

    def _describe_wid(self, wid):
        return self._by_wid(wid).describe()

    def _drop_wid(self, wid):
        m = self._by_wid(wid)
        m.lost = m.lost or "dropped: it did not join the next epoch in time"
        _ray().kill(m.actor, no_restart=True)

    # -- run ------------------------------------------------------------------
    def _require_started(self, what):
        if not self._members:
            raise RuntimeError(f"hvd.ray.RayExecutor.{what}: call start() first")

    def _live(self, what):
        """The workers a call goes to: all of them (fixed size: a lost one fails
        every call, naming it), or the live ones (elastic)."""
        self._require_started(what)
        if self.elastic:
            if self._driver.ended:
                raise WorkerLostError(f"hvd.ray: the elastic job ended: {self._driver.ended}; "
                                      f"lost: {self._lost_text()}")
            return [m for m in self._members if m.lost is None]
        lost = [m for m in self._members if m.lost is not None]
        if lost:
            m = lost[0]
            raise WorkerLostError(f"hvd.ray.RayExecutor.{what}: {m.describe()} is gone "
                                  f"({m.lost}); the job cannot go on without it "
                                  "(give min_workers/max_workers for an elastic job)",
                                  m.rank, m.node_ip, m.node_id)
        return list(self._members)

    def _lost_text(self):
        return "; ".join(f"{m.describe()}: {m.lost}" for m in self._members if m.lost) or "none"

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        """fn(*args, **kwargs) on every worker; the results in rank order
        (elastic: of the workers still in the job, in their last epoch's order)."""
        members = self._live("run")
        refs = [m.actor.run.remote(fn, tuple(args or ()), dict(kwargs or {})) for m in members]
        return self._gather(members, refs, callbacks)

    def run_remote(self, fn, args=None, kwargs=None):
        """fn(*args, **kwargs) on every worker; Ray object refs, in rank order."""
        members = self._live("run_remote")
        return [m.actor.run.remote(fn, tuple(args or ()), dict(kwargs or {})) for m in members]

    def execute(self, fn, callbacks=None):
        """fn(executable) on every worker (the executable_cls instance given to
        start(), or None); the results in rank order."""
        members = self._live("execute")
        return self._gather(members, [m.actor.execute.remote(fn) for m in members], callbacks)

    def execute_single(self, fn):
        """fn(executable) on rank 0 only; its result."""
        members = self._live("execute_single")[:1]
        return self._gather(members, [members[0].actor.execute.remote(fn)], None)[0]

    def _gather(self, members, refs, callbacks):
        """The results of refs[i] (from members[i]), waiting on all of them.
        Raises the first worker's exception (its type, with a note naming the
        rank and node and the worker's traceback), or WorkerLostError."""
        ray = _ray()
        results, pending = {}, dict(zip(refs, members))
        first_error, error_at = None, None
        while pending:
            grace = _SILENT_GRACE_S if _is_echo(first_error) else _ECHO_GRACE_S
            if error_at is not None and time.monotonic() - error_at > grace:
                # The grace is over with an hvd error (likely an echo) and workers
                # still silent: their nodes are dialled once more, at once (a
                # killed host's raylet may have answered the last probe while its
                # processes were being killed, and a loaded driver probes seldom).
                lost = self._silent_lost(pending, error_at, fresh=True)
                if lost is not None and _is_echo(first_error):
                    lost.__cause__ = first_error
                    first_error = lost
                break
            done, _ = ray.wait(list(pending), num_returns=1, timeout=0.1)
            for ref in done:
                m = pending.pop(ref)
                try:
                    results[m.index] = ray.get(ref)
                    for cb in callbacks or ():
                        cb(results[m.index])
                except ray.exceptions.RayActorError as e:
                    # A lost worker is the cause of its peers' hvd errors, which
                    # can reach the driver first (cluster.ray_hosts: rank 0's
                    # "rank 1 ... connection lost" came before Ray reported the
                    # killed node's actor): it takes an echo's place.
                    err = self._on_lost(m, e)
                    if err is not None and (first_error is None or _is_echo(first_error)):
                        err.__cause__ = first_error
                        first_error, error_at = err, error_at or time.monotonic()
                except ray.exceptions.RayTaskError as e:
                    err = _worker_exception(m, e)
                    if first_error is None or (_is_echo(first_error) and not _is_echo(err)):
                        first_error = err
                        error_at = error_at or time.monotonic()
            lost = self._silent_lost(pending, error_at)
            if lost is not None and (first_error is None or _is_echo(first_error)):
                lost.__cause__ = first_error
                first_error, error_at = lost, error_at or time.monotonic()
        if self.elastic and self._driver.ended:
            raise WorkerLostError(f"hvd.ray: the elastic job ended: {self._driver.ended}; "
                                  f"lost: {self._lost_text()}") from first_error
        if first_error is not None:
            raise first_error
        order = self._driver.ranks() if self.elastic else []
        rank_of = {wid: r for r, wid in enumerate(order)}
        done_members = [m for m in members if m.index in results]
        done_members.sort(key=lambda m: rank_of.get(m.wid, m.rank))
        return [results[m.index] for m in done_members]

    def _silent_lost(self, pending, error_at, fresh=False):
        """Workers of `pending` (ref -> member) that went silent while the others
        failed (error_at: when the first error came) or, elastic, while the others
        asked to join the next epoch: their nodes are dialled (hvd.ray._nodes),
        and those on a lost node are taken out of `pending` as lost. Returns the
        error to raise for the first one (None: none, or elastic)."""
        if self.elastic:
            missing, waited = self._driver.waiting_on()
            if waited < _SILENT_S:
                return None
            suspects = {ref: m for ref, m in pending.items() if m.wid in missing}
        elif error_at is not None and time.monotonic() - error_at >= _SILENT_S:
            suspects = dict(pending)
        else:
            return None
        first = None
        for ref, m in suspects.items():
            why = self._probe.lost(m.node_id, fresh)
            if why is not None:
                del pending[ref]
                err = self._mark_lost(m, f"its node was lost: {why}")
                first = first or err
        return first

    def _on_lost(self, m, e):
        """A worker's actor died; the error to raise (None: elastic, go on)."""
        return self._mark_lost(
            m, f"its Ray actor died ({type(e).__name__}: {str(e).splitlines()[0][:300]})")

    def _mark_lost(self, m, why):
        m.lost = m.lost or why
        if self.elastic:
            self._driver.lose(m.wid, m.lost)
            return None
        return WorkerLostError(f"hvd.ray: {m.describe()} was lost: {m.lost}", m.rank, m.node_ip,
                               m.node_id)

    # -- shutdown ---------------------------------------------------------------
    def shutdown(self):
        """Ends the workers (their actors are killed), the placement group and
        the store. Safe to call more than once."""
        ray = _ray() if (self._members or self._pg is not None) else None
        for a in getattr(self, "_actors", []):
            try:
                ray.kill(a, no_restart=True)
            except Exception:
                pass
        self._actors = []
        self._members = []
        if self._pg is not None:
            try:
                from ray.util.placement_group import remove_placement_group

                remove_placement_group(self._pg)
            except Exception:
                _log.warning("hvd.ray: removing the placement group failed", exc_info=True)
            self._pg = None
        if self._driver is not None:
            self._driver.close()
            self._driver = None
        if self._store is not None:
            self._store.close()
            self._store = None

    # -- introspection (hvd additions) ------------------------------------------
    def workers(self):
        """Per worker, in rank order: dict(rank, node_ip, node_id, pid, lost)."""
        return [dict(rank=m.rank, node_ip=m.node_ip, node_id=m.node_id, pid=m.pid, lost=m.lost)
                for m in self._members]


def _is_echo(err):
    """An hvd error in a worker (AbortedError, TransportError, ...): most
    likely caused by another worker's exception or loss."""
    try:
        import hvd

        return isinstance(err, hvd.HvdError)
    except ImportError:
        return False


def _worker_exception(m, e):
    """The worker's own exception (the type it raised), noting the rank, node
    and traceback; the Ray error is its __cause__."""
    cause = getattr(e, "cause", None)
    exc = cause if isinstance(cause, BaseException) else e
    tb = getattr(e, "traceback_str", None) or str(e)
    if hasattr(exc, "add_note"):
        exc.add_note(f"raised by {m.describe()}:\n{tb.rstrip()}")
    if exc is not e:
        exc.__cause__ = e
    return exc


__all__ = ["RayExecutor", "Settings", "create_settings", "WorkerLostError"]
