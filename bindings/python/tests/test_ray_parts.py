"""hvd.ray's parts without Ray: the ranks of actors on nodes, the driver's
store (libhvd's own client joins it: two ranks as processes allreduce through
it), the elastic driver's epochs, and the probe of a worker's node."""

import os
import subprocess
import sys
import time

import pytest

import hvd
from hvd.ray import _elastic, _store, _topology

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(hvd.__file__)))


def test_ranks_are_contiguous_per_node():
    nodes = [("A", "10.0.0.1"), ("B", "10.0.0.2"), ("A", "10.0.0.1"), ("B", "10.0.0.2"),
             ("A", "10.0.0.1")]
    order, slots = _topology.assign_ranks(nodes)
    assert order == [0, 2, 4, 1, 3]
    by_rank = sorted(slots, key=lambda s: s.rank)
    assert [(s.rank, s.local_rank, s.local_size, s.node_id) for s in by_rank] == [
        (0, 0, 3, "A"), (1, 1, 3, "A"), (2, 2, 3, "A"), (3, 0, 2, "B"), (4, 1, 2, "B")]
    # cross rank: the node's index among nodes with that local rank
    assert [(s.cross_rank, s.cross_size) for s in by_rank] == [(0, 2), (0, 2), (0, 1), (1, 2),
                                                               (1, 2)]
    assert _topology.visible_gpus(slots, [["0"], ["1"], ["3"], ["0"], ["2"]]) == [
        "0,2,3", "0,1", "0,2,3", "0,1", "0,2,3"]
    # The driver's node first, wherever Ray put the first bundle.
    order, _ = _topology.assign_ranks(nodes, first_node="B")
    assert order == [1, 3, 0, 2, 4]


RANK = """
import numpy as np, hvd
hvd.init()
out = hvd.allreduce(np.array([hvd.rank() + 1.0]), op=hvd.Sum, name="x")
print("SUM", hvd.rank(), hvd.size(), out[0])
hvd.shutdown()
"""


def _ranks(store, secret, n=2, timeout=60):
    procs = []
    for r in range(n):
        slot = _topology.Slot(r, n, r, n, 0, 1, "A", "127.0.0.1")
        env = dict(os.environ, **_topology.worker_env(slot, f"127.0.0.1:{store.port}", secret, 10))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_DIR, env.get("PYTHONPATH")]))
        procs.append(subprocess.Popen([sys.executable, "-c", RANK], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outs = []
    for p in procs:
        try:
            outs.append((p.wait(timeout=timeout), p.stdout.read()))
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


def test_libhvd_joins_the_driver_store():
    secret = _store.new_secret()
    store = _store.StoreServer(secret)
    try:
        outs = _ranks(store, secret)
    finally:
        store.close()
    for rc, out in outs:
        assert rc == 0, out
    assert "SUM 0 2 3.0" in outs[0][1] and "SUM 1 2 3.0" in outs[1][1]


def test_a_wrong_secret_is_refused():
    store = _store.StoreServer(_store.new_secret(), auth_timeout_s=1)
    try:
        outs = _ranks(store, _store.new_secret())
    finally:
        store.close()
    for rc, out in outs:
        assert rc != 0
        assert "rendezvous" in out.lower(), out


class _Drops:
    def __init__(self):
        self.dropped = []

    def __call__(self, wid):
        self.dropped.append(wid)


def _wait_for(store, key, limit=5.0):
    deadline = time.monotonic() + limit
    while store.get(key) is None:
        assert time.monotonic() < deadline, f"no {key}"
        time.sleep(0.01)
    return store.get(key).decode()


def test_elastic_epochs_follow_the_live_workers():
    store = _store.StoreServer(_store.new_secret())
    drops = _Drops()
    d = _elastic.ElasticDriver(store, 1, 5.0, 1.0, describe=lambda w: f"worker {w}", drop=drops)
    try:
        for w in ("a", "b"):
            d.add(w)
        store.set("elastic/join/b/0", "h")
        time.sleep(0.2)
        assert store.get("elastic/assign/b/0") is None  # waits for every live worker
        store.set("elastic/join/a/0", "h")
        assert _wait_for(store, "elastic/assign/a/0") == "ok 0 0 2 0"
        assert _wait_for(store, "elastic/assign/b/0") == "ok 0 1 2 0"
        d.lose("a", "its Ray actor died")
        assert store.get("elastic/failed/0").decode() == "worker a its Ray actor died"
        store.set("elastic/join/b/1", "h")
        assert _wait_for(store, "elastic/assign/b/1") == "ok 1 0 1 0"
        assert d.ranks() == ["b"]
        d.min_workers = 2  # below min_workers for the elastic timeout: the job ends
        store.set("elastic/join/b/2", "h")
        assert _wait_for(store, "elastic/assign/b/2").startswith("exit 1 worker(s) left")
        assert "min_workers=2" in d.ended
        assert drops.dropped == []
    finally:
        d.close()
        store.close()


def test_elastic_drops_a_worker_that_never_joins():
    store = _store.StoreServer(_store.new_secret())
    drops = _Drops()
    d = _elastic.ElasticDriver(store, 1, 0.3, 5.0, describe=lambda w: f"worker {w}", drop=drops)
    try:
        d.add("a")
        d.add("b")
        store.set("elastic/join/a/0", "h")
        assert _wait_for(store, "elastic/assign/a/0") == "ok 0 0 1 0"
        assert drops.dropped == ["b"] and d.lost[0][0] == "b"
    finally:
        d.close()
        store.close()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


class _FakeRay:
    """What NodeProbe and driver_node_ip read of Ray: ray.nodes() and the
    runtime context's node id."""

    def __init__(self, nodes):
        self._nodes = nodes

    def nodes(self):
        return [dict(n) for n in self._nodes]

    def get_runtime_context(self):
        return type("Ctx", (), {"get_node_id": lambda _self: "A"})()


def test_node_probe_finds_a_lost_raylet():
    """A node whose raylet accepts is alive; one whose raylet port refuses,
    or that the GCS lists dead, is lost, and the answer names why."""
    import socket

    from hvd.ray import _nodes

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    nodes = [dict(NodeID="A", Alive=True, NodeManagerAddress="127.0.0.1",
                  NodeManagerPort=listener.getsockname()[1]),
             dict(NodeID="B", Alive=True, NodeManagerAddress="127.0.0.1",
                  NodeManagerPort=closed.getsockname()[1])]
    fake = _FakeRay(nodes)
    try:
        assert _nodes.driver_node_ip(fake) == "127.0.0.1"
        probe = _nodes.NodeProbe(fake, {"A", "B"})
        assert probe.lost("A") is None
        why = probe.lost("B")
        assert why and f"127.0.0.1:{closed.getsockname()[1]}" in why and "is gone" in why
        assert probe.lost("B") == why  # a lost node stays lost
        nodes[0]["Alive"] = False
        time.sleep(_nodes.PROBE_EVERY_S)
        assert probe.lost("A") == "Ray lists its node as dead"
    finally:
        listener.close()
        closed.close()


def test_node_probe_fresh_dials_again_within_the_interval():
    """A node that answered a moment ago is not dialled again within
    PROBE_EVERY_S, unless asked fresh (the executor's last look before it
    raises a worker's hvd error): a raylet killed since is then found."""
    import socket

    from hvd.ray import _nodes

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    fake = _FakeRay([dict(NodeID="A", Alive=True, NodeManagerAddress="127.0.0.1",
                          NodeManagerPort=port)])
    probe = _nodes.NodeProbe(fake, {"A"})
    assert probe.lost("A") is None
    listener.close()  # the raylet is gone; its port now refuses
    assert probe.lost("A") is None  # the answer of a moment ago
    why = probe.lost("A", fresh=True)
    assert why and f"127.0.0.1:{port}" in why and "is gone" in why


class _GatherRay:
    """Just what RayExecutor._gather uses of Ray: wait/get over refs whose
    outcomes come in a given order, and the two exception types."""

    class exceptions:
        class RayActorError(Exception):
            pass

        class RayTaskError(Exception):
            def __init__(self, cause):
                super().__init__(str(cause))
                self.cause, self.traceback_str = cause, f"Traceback: {cause!r}"

    def __init__(self, outcomes):
        self.outcomes = list(outcomes)  # [(ref, value or exception)], in arrival order
        self.arrived = {}

    def wait(self, refs, num_returns=1, timeout=None):
        if self.outcomes:
            ref, out = self.outcomes.pop(0)
            self.arrived[ref] = out
        return [r for r in refs if r in self.arrived][:num_returns], []

    def get(self, ref):
        out = self.arrived[ref]
        if isinstance(out, BaseException):
            raise out
        return out


def test_a_lost_worker_takes_the_place_of_its_peers_echo(monkeypatch):
    """Rank 0's hvd error naming rank 1 reaches the driver before Ray reports
    rank 1's actor dead (its node killed): run() raises WorkerLostError
    naming rank 1, the echo as its cause (cluster.ray_hosts saw the echo
    raised instead)."""
    from hvd.ray import executor

    ex = executor.RayExecutor(num_workers=2)
    members = []
    for i, host in enumerate(["h1", "h2"]):
        m = executor._Member(i, None, (f"node{i}" * 4, f"10.0.0.{i + 1}", [], 100 + i, host))
        m.rank = i
        members.append(m)
    echo = hvd.TransportError(-6, "allreduce 'step7': ucx: rank 1 (host 10.0.0.2): connection lost")
    fake = _GatherRay([("r0", _GatherRay.exceptions.RayTaskError(echo)),
                     ("r1", _GatherRay.exceptions.RayActorError("the actor died"))])
    monkeypatch.setattr(executor, "_ray", lambda: fake)
    with pytest.raises(executor.WorkerLostError) as got:
        ex._gather(members, ["r0", "r1"], None)
    assert got.value.rank == 1 and got.value.node_ip == "10.0.0.2"
    assert "rank 1" in str(got.value) and "h2" in str(got.value)
    assert got.value.__cause__ is echo
    # The other way round: a worker's own exception (not an hvd error) stays first.
    ex2 = executor.RayExecutor(num_workers=2)
    for m in members:
        m.lost = None
    own = ValueError("bad input on rank 0")
    fake2 = _GatherRay([("r0", _GatherRay.exceptions.RayTaskError(own)),
                      ("r1", _GatherRay.exceptions.RayActorError("the actor died"))])
    monkeypatch.setattr(executor, "_ray", lambda: fake2)
    with pytest.raises(ValueError) as got2:
        ex2._gather(members, ["r0", "r1"], None)
    assert got2.value is own
