"""The elastic driver of a Ray job: what hvdrun's elastic driver does
(docs/elastic.md, "Protocol between workers and hvdrun"), with Ray actors as
the workers and the driver's store (hvd.ray._store) as the job's store.

Workers join at hvd.init() and at every hvd.elastic reset; once every live
worker has asked, the driver answers them all at once (an epoch): ranks in
the previous epoch's order, workers new to the job after them. A worker the
executor finds dead (its actor or node is gone) is dropped: the epoch it was
in is marked failed so that survivors still forming it stop waiting, and the
next epoch forms without it. Below ``min_workers`` the driver waits up to the
elastic timeout for workers, then ends the job (every pending join gets
``exit``, which the workers raise as MembershipChangedError); so does a
reset beyond ``reset_limit``.
"""

from __future__ import annotations

import logging
import threading
import time

_log = logging.getLogger("hvd.ray")

TURN_S = 0.02


class ElasticDriver:
    """Forms the epochs of one elastic job. ``describe(worker_id)`` names a
    worker (rank, node) in messages; ``drop(worker_id)`` is called for a worker
    that did not join within ``start_timeout_s`` (the executor kills it)."""

    def __init__(self, store, min_workers, start_timeout_s, elastic_timeout_s, describe, drop,
                 reset_limit=None):
        self.store = store
        self.reset_limit = reset_limit
        self.min_workers = min_workers
        self.start_timeout_s = start_timeout_s
        self.elastic_timeout_s = elastic_timeout_s
        self._describe = describe
        self._drop = drop
        self._lock = threading.Lock()
        self._workers = {}  # id -> {"next": join number to answer, "alive": bool, "epoch": int}
        self._added = []  # ids in the order they were added
        self._order = []  # the last epoch's ranks: ids
        self.epoch = -1
        self.ended = None  # why the job ended (too few workers), or None
        self.lost = []  # (id, why) of every worker dropped, in order
        self._waiting_since = None
        self._stop = threading.Event()
        store.set("elastic/hosts_version", "0")
        self._thread = threading.Thread(target=self._loop, name="hvd-ray-elastic", daemon=True)
        self._thread.start()

    def add(self, wid):
        with self._lock:
            self._workers[wid] = {"next": 0, "alive": True, "epoch": -1}
            self._added.append(wid)

    def lose(self, wid, why):
        """A worker is gone (its actor died, or it was dropped)."""
        with self._lock:
            w = self._workers.get(wid)
            if w is None or not w["alive"]:
                return
            w["alive"] = False
            self.lost.append((wid, why))
            if w["epoch"] >= 0 and w["epoch"] == self.epoch:
                self.store.set(f"elastic/failed/{self.epoch}", f"{self._describe(wid)} {why}")
        _log.warning("hvd.ray elastic: %s %s", self._describe(wid), why)

    def live(self):
        with self._lock:
            return [w for w in self._added if self._workers[w]["alive"]]

    def waiting_on(self):
        """The live workers the next epoch still waits for (others asked to
        join), and how long it has waited; ([], 0) when none is forming."""
        with self._lock:
            if self._waiting_since is None:
                return [], 0.0
            live = [w for w in self._added if self._workers[w]["alive"]]
            missing = [w for w in live if not self._asked(w)]
            return missing, time.monotonic() - self._waiting_since

    def ranks(self):
        """The last epoch's workers, in rank order."""
        with self._lock:
            return list(self._order)

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self):
        while not self._stop.wait(TURN_S):
            try:
                self._turn()
            except Exception:  # the store is in-process: a bug, not a fault
                _log.exception("hvd.ray elastic driver")

    def _asked(self, wid):
        return self.store.get(f"elastic/join/{wid}/{self._workers[wid]['next']}") is not None

    def _turn(self):
        with self._lock:
            live = [w for w in self._added if self._workers[w]["alive"]]
            asked = [w for w in live if self._asked(w)]
            if not asked:
                self._waiting_since = None
                return
            now = time.monotonic()
            if self._waiting_since is None:
                self._waiting_since = now
            missing = [w for w in live if w not in asked]
            waited = now - self._waiting_since
        if missing and waited > self.start_timeout_s:
            for w in missing:
                self.lose(w, f"did not join within {self.start_timeout_s:g} s (start timeout)")
                self._drop(w)
            return
        if missing:
            return
        if len(asked) < self.min_workers:
            if waited > self.elastic_timeout_s:
                self._end(asked, f"{len(asked)} worker(s) left, fewer than min_workers="
                                 f"{self.min_workers}, after waiting {self.elastic_timeout_s:g} s")
            return
        if self.reset_limit is not None and self.epoch >= self.reset_limit:
            self._end(asked, f"the job was reset {self.epoch} time(s), the reset_limit")
            return
        self._form(asked)

    def _form(self, asked):
        with self._lock:
            order = [w for w in self._order if w in asked]
            order += [w for w in asked if w not in order]
            self.epoch += 1
            for rank, wid in enumerate(order):
                w = self._workers[wid]
                self.store.set(f"elastic/assign/{wid}/{w['next']}",
                               f"ok {self.epoch} {rank} {len(order)} 0")
                w["next"] += 1
                w["epoch"] = self.epoch
            self.store.set("elastic/epoch", str(self.epoch))
            self._order = order
            self._waiting_since = None
        _log.info("hvd.ray elastic: epoch %d formed, size %d", self.epoch, len(order))

    def _end(self, asked, why):
        with self._lock:
            self.ended = why
            for wid in asked:
                w = self._workers[wid]
                self.store.set(f"elastic/assign/{wid}/{w['next']}", f"exit {why}")
                w["next"] += 1
            self._waiting_since = None
