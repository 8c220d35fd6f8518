"""Ranks for a set of Ray actors: contiguous per node, so that local and cross
ranks mean what hvdrun makes them mean (docs/ray.md, "Ranks")."""

from __future__ import annotations

import collections

Slot = collections.namedtuple(
    "Slot", "rank size local_rank local_size cross_rank cross_size node_id node_ip")
Slot.__doc__ = "One worker's place in the job: its ranks, and the node it runs on."


def assign_ranks(nodes, first_node=None):
    """nodes: per worker (in the order the workers were made), (node_id, node_ip).
    Returns (order, slots): order[r] is the index of the worker that is rank r,
    slots[i] the Slot of worker i.

    Nodes are numbered first_node first (the driver's, where it has workers),
    then in the order their first worker appears; a node's workers take
    consecutive ranks, in creation order."""
    by_node = collections.OrderedDict()
    if any(node_id == first_node for node_id, _ in nodes):
        by_node[first_node] = []
    for i, (node_id, _ip) in enumerate(nodes):
        by_node.setdefault(node_id, []).append(i)
    order = [i for members in by_node.values() for i in members]
    in_order = slots_in_rank_order([nodes[i] for i in order])
    slots = [None] * len(order)
    for rank, i in enumerate(order):
        slots[i] = in_order[rank]
    return order, slots


def slots_in_rank_order(nodes):
    """The Slot of each rank where nodes[r] is rank r's (node_id, node_ip):
    local rank = index among the ranks on the same node, cross rank = the
    node's index among the nodes that have a rank with that local rank
    (hvdrun's definition; nodes numbered in the order of their first rank)."""
    node_index, per_node, local = {}, collections.Counter(), []
    for node_id, _ip in nodes:
        node_index.setdefault(node_id, len(node_index))
        local.append(per_node[node_id])
        per_node[node_id] += 1
    slots = []
    for rank, (node_id, ip) in enumerate(nodes):
        lr = local[rank]
        same_local = [r for r in range(len(nodes)) if local[r] == lr]
        slots.append(Slot(rank=rank, size=len(nodes), local_rank=lr, local_size=per_node[node_id],
                          cross_rank=same_local.index(rank), cross_size=len(same_local),
                          node_id=node_id, node_ip=ip))
    return slots


def worker_env(slot, rendezvous_addr, secret, start_timeout_s):
    """The HVD_* variables a fixed-size worker runs with (what hvdrun sets)."""
    return {
        "HVD_RANK": str(slot.rank),
        "HVD_SIZE": str(slot.size),
        "HVD_LOCAL_RANK": str(slot.local_rank),
        "HVD_LOCAL_SIZE": str(slot.local_size),
        "HVD_CROSS_RANK": str(slot.cross_rank),
        "HVD_CROSS_SIZE": str(slot.cross_size),
        "HVD_RENDEZVOUS_ADDR": rendezvous_addr,
        "HVD_SECRET": secret,
        "HVD_HOSTNAME": slot.node_ip,
        "HVD_START_TIMEOUT": f"{start_timeout_s:g}",
    }


def visible_gpus(slots, gpu_ids):
    """CUDA_VISIBLE_DEVICES per worker: the union of the GPUs Ray gave the
    workers on the same node (so co-located ranks see each other's devices,
    as CUDA IPC and NCCL's intra-node paths need), in ascending order.
    gpu_ids[i]: worker i's ray.get_gpu_ids()."""
    per_node = collections.defaultdict(set)
    for s, ids in zip(slots, gpu_ids):
        per_node[s.node_id].update(str(g) for g in ids)

    def key(g):
        return (0, int(g)) if g.isdigit() else (1, g)

    return [",".join(sorted(per_node[s.node_id], key=key)) for s in slots]
