"""Shared by the elastic tests, importing no framework: a fake default
context for hvd.elastic's unit tests (test_elastic.py, test_elastic_tf.py),
and what the real jobs need (test_mp_elastic.py, test_mp_elastic_tf.py)."""

import copy
import os
import subprocess

import pytest

import harness
import hvd._c_api as C
import hvd._ops as _ops
import hvd.elastic as E
from hvd._process_sets import Registry


def changed(msg="peer 2 left"):
    return C.MembershipChangedError(C.HVD_ERR_MEMBERSHIP_CHANGED, msg)


class FakeSetCtx:
    def __init__(self, ranks, log):
        self.ranks = list(ranks)
        self.closed = False
        self._log = log

    def close(self):
        self.closed = True
        self._log.append(("close", tuple(self.ranks)))


class FakeRoot:
    """The root context a Registry needs: rank(), size(), _make_set(ranks)."""

    def __init__(self, backend):
        self.b = backend

    def rank(self):
        return self.b.r

    def size(self):
        return self.b.n

    def _make_set(self, ranks):
        self.b.log.append(("make_set", tuple(ranks)))
        if self.b.make_set_errors:
            raise self.b.make_set_errors.pop(0)
        return FakeSetCtx(ranks, self.b.log) if self.b.r in ranks else None


class FakeBackend:
    """One rank of a fake elastic job. resets: what each reset does, in
    order: (rank, size) forms the next epoch, an exception is raised.
    others_hosts_updated: what the other ranks read (any() ORs it in).
    root_objects: name -> rank 0's object (broadcast_object returns it; a
    name not there returns this rank's own object). others_objects: name ->
    the other ranks' objects for allgather_object."""

    def __init__(self, rank=0, size=3, elastic=True):
        self.r, self.n = rank, size
        self.elastic = elastic
        self.epoch = 0
        self.hosts_updated = False
        self.others_hosts_updated = False
        self.resets = []
        self.make_set_errors = []
        self.root_objects = {}
        self.others_objects = {}
        self.log = []
        self._registry = Registry(FakeRoot(self))

    def membership(self):
        self.log.append(("membership",))
        return E.Membership(self.elastic, self.hosts_updated, self.epoch)

    def reset(self):
        self.log.append(("reset",))
        # the real reset completes every pending operation of the old epoch
        # (with HVD_ERR_MEMBERSHIP_CHANGED); here: wait for the dropped ones
        _ops.reap_orphans(wait=True)
        step = self.resets.pop(0)
        if isinstance(step, BaseException):
            raise step
        self.r, self.n = step
        self.epoch += 1
        self.hosts_updated = False

    def rank(self):
        return self.r

    def size(self):
        return self.n

    def any(self, flag, name):
        self.log.append(("any", name, bool(flag)))
        return bool(flag) or self.others_hosts_updated

    def broadcast_object(self, obj, root_rank=0, name=None):
        assert root_rank == 0
        self.log.append(("bcast", name))
        return copy.deepcopy(self.root_objects.get(name, obj))

    def allgather_object(self, obj, name=None):
        self.log.append(("allgather", name))
        return [copy.deepcopy(obj)] + copy.deepcopy(self.others_objects.get(name, []))

    def registry(self):
        return self._registry

    def after_reset(self):
        self.log.append(("after_reset", self.r, self.n))


@pytest.fixture
def fake(monkeypatch):
    b = FakeBackend()
    monkeypatch.setattr(E, "_backend", b)
    return b


def names(log, *kinds):
    return [e for e in log if e[0] in kinds]


# ---------------------------------------------------------------------------
# Real elastic jobs.
# ---------------------------------------------------------------------------

EXAMPLE_DIR = os.path.join(harness.REPO, "examples", "elastic")
DISCOVER = os.path.join(EXAMPLE_DIR, "discover_hosts.sh")
JOB_TIMEOUT = 300  # seconds for a whole hvdrun job


def elastic_missing():
    """Why elastic jobs cannot run here (the loaded libhvd or hvdrun lacks
    them), or None."""
    C.lib()
    missing = [n for n in ("hvd_context_reset", "hvd_context_membership") if n in C.MISSING]
    if missing:
        return f"{C.library_path()} has no {', '.join(missing)} (a libhvd without elastic jobs)"
    hvdrun = harness.find_hvdrun()
    if hvdrun is None:
        return "no hvdrun executable (build the hvdrun target or set HVD_HVDRUN)"
    out = subprocess.run([hvdrun, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=30).stdout.decode("utf-8", "replace")
    if "--host-discovery-script" not in out or "not available" in out:
        return f"{hvdrun} has no elastic mode (--min-np / --host-discovery-script)"
    return None
