"""The Ray nodes a job's workers run on, as the driver sees them: the address
the driver's own node has in the cluster (where the workers reach the
rendezvous store), and whether a worker's node is still there.

Ray learns that a node died from its GCS's health checks (by default some 15
to 30 s after a raylet stops answering); until then a dead node's actors look
busy. A worker whose peers already failed, or whose elastic job waits for it,
is checked sooner: its node's raylet is dialled directly (docs/ray.md, "A
lost node")."""

from __future__ import annotations

import socket
import time

# How long a raylet may take to accept a connection before its node counts
# as unreachable (a cut link drops the dial silently).
PROBE_TIMEOUT_S = 2.0
# At most one probe of a node per this many seconds.
PROBE_EVERY_S = 1.0


def _alive_nodes(ray):
    return {n["NodeID"]: n for n in ray.nodes()}


def driver_node_ip(ray):
    """The address of the node this driver is connected to, as that node's
    raylet registered it (``ray start --node-ip-address``): the one the other
    nodes reach it at. Ray's own guess (ray.util.get_node_ip_address) where
    the node is not listed."""
    node_id = ray.get_runtime_context().get_node_id()
    node = _alive_nodes(ray).get(node_id)
    if node and node.get("NodeManagerAddress"):
        return node["NodeManagerAddress"]
    return ray.util.get_node_ip_address()


class NodeProbe:
    """Dials the raylets of the workers' nodes: a node whose raylet refuses
    the connection, does not answer within PROBE_TIMEOUT_S, or that Ray's GCS
    lists as dead is lost."""

    def __init__(self, ray, node_ids):
        self._ray = ray
        nodes = _alive_nodes(ray)
        self._addr = {nid: (nodes[nid]["NodeManagerAddress"], int(nodes[nid]["NodeManagerPort"]))
                      for nid in node_ids if nid in nodes}
        self._last = {}  # node id -> (time of the last probe, its answer)

    def lost(self, node_id, fresh=False):
        """Why the node is gone, or None where it answers (or was probed less
        than PROBE_EVERY_S ago and answered then; fresh: dial it again)."""
        now = time.monotonic()
        last = self._last.get(node_id)
        if last is not None and (last[1] is not None or (not fresh and now - last[0] < PROBE_EVERY_S)):
            return last[1]
        why = self._probe(node_id)
        self._last[node_id] = (now, why)
        return why

    def _probe(self, node_id):
        node = _alive_nodes(self._ray).get(node_id)
        if node is not None and not node.get("Alive", True):
            return "Ray lists its node as dead"
        addr = self._addr.get(node_id)
        if addr is None:
            return None  # nothing known to dial: leave it to Ray
        try:
            with socket.create_connection(addr, timeout=PROBE_TIMEOUT_S):
                return None
        except socket.timeout:
            return (f"its node's raylet ({addr[0]}:{addr[1]}) did not answer within "
                    f"{PROBE_TIMEOUT_S:g} s")
        except OSError as e:
            return f"its node's raylet ({addr[0]}:{addr[1]}) is gone ({e.strerror or e})"
