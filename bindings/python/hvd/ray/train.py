"""hvd as a Ray Train backend (docs/ray.md, "Ray Train").

    from ray.train import ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from hvd.ray import HvdConfig

    trainer = DataParallelTrainer(train_loop, backend_config=HvdConfig(),
                                  scaling_config=ScalingConfig(num_workers=2))
    result = trainer.fit()

Ray Train's extension point is a ``ray.train.backend.BackendConfig`` whose
``backend_cls`` is a ``ray.train.backend.Backend``: Ray calls its ``on_start``
once the worker group exists, before the training function runs, and
``on_shutdown`` when the group ends. ``on_start`` hosts the job's rendezvous
store in the process that runs it (Ray Train's controller), with a fresh
secret, and gives every worker the HVD_* variables for its Ray Train world
rank (local and cross ranks from the nodes the workers run on), so that
``hvd.init()`` in the training function joins the job; ``ray.train.report``
and checkpoints work as with any backend (rank 0's are kept).
"""

from __future__ import annotations

import dataclasses
import logging

from ray.train.backend import Backend, BackendConfig

from . import _store
from ._nodes import driver_node_ip
from ._topology import slots_in_rank_order, visible_gpus, worker_env
from ._worker import Worker, _release_hvd

_log = logging.getLogger("hvd.ray")


@dataclasses.dataclass
class HvdConfig(BackendConfig):
    """Ray Train backend configuration for hvd.

    start_timeout_s: how long every rank may take to join (HVD_START_TIMEOUT);
    transport: the hvd transport (None: hvd's default choice);
    env: further variables for every worker (HVD_* settings)."""

    start_timeout_s: float = 60.0
    transport: str = None
    env: dict = None

    @property
    def backend_cls(self):
        return HvdBackend

    @property
    def framework(self):
        return "hvd"

    def to_dict(self):
        return {"start_timeout_s": self.start_timeout_s, "transport": self.transport}


def _node():
    return Worker().node()


def _set_env(env):
    Worker().update_env(env)


class HvdBackend(Backend):
    """Hosts the store and sets the workers' variables (on_start); shuts hvd
    down in the workers and closes the store (on_shutdown)."""

    share_cuda_visible_devices = True

    def on_start(self, worker_group, backend_config):
        import ray

        nodes = worker_group.execute(_node)  # in world rank order
        slots = slots_in_rank_order([(n[0], n[1]) for n in nodes])
        secret = _store.new_secret()
        store = _store.StoreServer(secret)
        stores = self.__dict__.setdefault("_stores", {})
        stores[id(worker_group)] = store
        addr = f"{driver_node_ip(ray)}:{store.port}"
        gpus = visible_gpus(slots, [n[2] for n in nodes])
        envs = []
        for slot, visible in zip(slots, gpus):
            env = worker_env(slot, addr, secret, backend_config.start_timeout_s)
            if backend_config.transport:
                env["HVD_TRANSPORT"] = backend_config.transport
            if visible and worker_group.get_resources_per_worker().get("GPU", 0):
                env["CUDA_VISIBLE_DEVICES"] = visible
            env.update(backend_config.env or {})
            envs.append(env)
        for rank, env in enumerate(envs):
            worker_group.execute_single(rank, _set_env, env)
        _log.info("hvd.ray: Ray Train backend: %d ranks, store at %s", len(slots), addr)

    def on_shutdown(self, worker_group, backend_config):
        try:
            worker_group.execute(_release_hvd)
        except Exception:  # the workers may be gone already
            _log.debug("hvd.ray: shutting hvd down in the workers failed", exc_info=True)
        store = self.__dict__.get("_stores", {}).pop(id(worker_group), None)
        if store is not None:
            store.close()


__all__ = ["HvdConfig", "HvdBackend"]
