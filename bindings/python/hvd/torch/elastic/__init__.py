"""hvd.torch.elastic: Horovod's elastic training for PyTorch (docs/elastic.md).

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state): ...

TorchState keeps copies of the model's and optimizer's state_dict (and of an
ElasticSampler's progress, an LR scheduler's state) at every commit, goes back
to them after a failure, and syncs them from rank 0 after a reset;
ElasticSampler shards a data set over the ranks and, after a reset, shards the
samples not yet processed this epoch over the new ranks.
"""

from __future__ import annotations

import copy
import math
import random

import torch

from ... import elastic as _elastic
from ...elastic import (  # noqa: F401  (Horovod's names in hvd.torch.elastic)
    HorovodInternalError,
    HostsUpdatedInterrupt,
    MembershipChangedError,
    ObjectState,
    State,
    membership,
    run,
    run_fn,
)


def _world():
    """(size, rank) of the default context, through hvd.elastic's backend."""
    b = _elastic._backend
    return b.size(), b.rank()


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler: shards dataset's indices over the ranks (the
    same shuffled order on every rank: seed + epoch), and records which
    indices were processed, so that after a reset the remaining ones are
    sharded over the new ranks.

    As in Horovod: put it in the TorchState (its progress is then committed,
    restored and synced), call record_batch(batch_idx, batch_size) (or
    record_indices) after processing a batch, and set_epoch(epoch) at the
    END of each epoch (it clears the processed indices).

    Sharding: remaining = the shuffled indices not processed yet; it is
    padded (repeating it from the start) to a multiple of the number of
    ranks, and rank r takes remaining[r::size]. len(sampler) is
    ceil(len(remaining) / size).

    num_replicas, rank (an hvd addition, as torch's DistributedSampler has
    them): a fixed number of ranks and rank instead of hvd.size() and
    hvd.rank() at each reset, e.g. to compute on one process what each rank
    of a job would get."""

    def __init__(self, dataset, shuffle=True, seed=0, num_replicas=None, rank=None):
        if (num_replicas is None) != (rank is None):
            raise ValueError("hvd.torch.elastic.ElasticSampler: give num_replicas and rank "
                             "together, or neither")
        if num_replicas is not None and not 0 <= rank < num_replicas:
            raise ValueError(f"hvd.torch.elastic.ElasticSampler: rank {rank} is not in "
                             f"[0, {num_replicas})")
        self._fixed = None if num_replicas is None else (int(num_replicas), int(rank))
        self.dataset = dataset
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.epoch = 0
        self.processed_indices = set()
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.indices = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch`: a new order (with shuffle) and no index processed."""
        self.epoch = int(epoch)
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Marks this rank's batch batch_idx (of batch_size samples, counted
        from the start of the current iteration) as processed."""
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices):
        """Marks dataset indices as processed (this epoch)."""
        self.processed_indices.update(int(i) for i in indices)

    def get_indices(self, batch_idx, batch_size):
        """This rank's indices of batch batch_idx."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def state_dict(self):
        return {"epoch": self.epoch, "processed_indices": set(self.processed_indices)}

    def load_state_dict(self, state_dict):
        self.epoch = int(state_dict["epoch"])
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def reset(self):
        """Shards the remaining indices over the current ranks (hvd.size(), hvd.rank())."""
        self.num_replicas, self.rank = self._fixed or _world()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        done = self.processed_indices
        self.remaining_indices = [i for i in order if i not in done]
        n = self.num_replicas
        self.num_samples = int(math.ceil(len(self.remaining_indices) / n))
        self.total_size = self.num_samples * n
        padded = list(self.remaining_indices)
        while len(padded) < self.total_size:
            padded += self.remaining_indices[:self.total_size - len(padded)]
        self.indices = padded[self.rank:self.total_size:n]

    def __iter__(self):
        return iter(list(self.indices))

    def __len__(self):
        return self.num_samples


class _Handler:
    """How TorchState saves, restores and syncs one kind of attribute.
    snapshot() makes the copy a commit keeps (it may be collective) without
    keeping it; save() makes one and keeps it."""

    def __init__(self, name, value):
        self.name = name
        self.value = value
        self.save()

    def set_value(self, value):
        self.value = value
        self.save()

    def snapshot(self):
        return copy.deepcopy(self.value.state_dict())

    def save(self):
        self._saved = self.snapshot()


class _ModelHandler(_Handler):
    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        from .. import broadcast_parameters
        broadcast_parameters(self.value.state_dict(), root_rank=0,
                             prefix=f"elastic.{self.name}")


class _OptimizerHandler(_Handler):
    def restore(self):
        # a copy: load_state_dict keeps the tensors it is given (momentum
        # buffers would then change the saved state in place)
        self.value.load_state_dict(copy.deepcopy(self._saved))

    def sync(self):
        from .. import broadcast_optimizer_state
        broadcast_optimizer_state(self.value, root_rank=0, name=f"elastic.{self.name}")


class _SchedulerHandler(_Handler):
    def restore(self):
        self.value.load_state_dict(copy.deepcopy(self._saved))

    def sync(self):
        b = _elastic._backend
        self.value.load_state_dict(b.broadcast_object(self.value.state_dict(), 0,
                                                      name=f"elastic.{self.name}"))


class _SamplerHandler(_Handler):
    """The committed progress is every rank's processed indices together
    (an allgather at each commit: collective, as commit is)."""

    def _union(self, what):
        b = _elastic._backend
        sets = b.allgather_object(self.value.processed_indices,
                                  name=f"elastic.{self.name}.{what}")
        return set().union(*sets)

    def snapshot(self, local=False):
        sd = self.value.state_dict()
        if not local:
            sd["processed_indices"] = self._union("save")
        return sd

    def save(self, local=False):
        self._saved = self.snapshot(local)

    def __init__(self, name, value):  # no collective when the state is made
        self.name = name
        self.value = value
        self.save(local=True)

    def set_value(self, value):
        self.value = value
        self.save(local=True)

    def restore(self):
        self.value.load_state_dict(copy.deepcopy(self._saved))

    def sync(self):
        # every rank's progress (after an interrupt each rank holds only
        # its own), then rank 0's epoch with it: the new shards
        sd = self.value.state_dict()
        sd["processed_indices"] = self._union("sync")
        b = _elastic._backend
        self.value.load_state_dict(b.broadcast_object(sd, 0, name=f"elastic.{self.name}"))


def _scheduler_types():
    sched = torch.optim.lr_scheduler
    return tuple(t for t in (getattr(sched, "LRScheduler", None),
                             getattr(sched, "_LRScheduler", None)) if t is not None)


def _handler_class(value):
    if isinstance(value, torch.nn.Module):
        return _ModelHandler
    if isinstance(value, torch.optim.Optimizer):
        return _OptimizerHandler
    if isinstance(value, _scheduler_types()):
        return _SchedulerHandler
    if isinstance(value, ElasticSampler):
        return _SamplerHandler
    return None


class TorchState(ObjectState):
    """Horovod's TorchState: the training state of a PyTorch job.

    model, optimizer and every keyword argument become attributes. Models
    (torch.nn.Module), optimizers, LR schedulers and ElasticSamplers are
    handled by type: commit() keeps a copy of their state_dict (the
    sampler's: the indices processed by every rank), restore() loads it
    back, sync() broadcasts rank 0's (broadcast_parameters,
    broadcast_optimizer_state, broadcast_object). Other values are handled
    as in ObjectState (deep copies, broadcast_object). Assigning a new model
    or optimizer to the attribute hands the new one over (and saves it)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, rest = {}, {}
        for k, v in kwargs.items():
            cls = _handler_class(v)
            if cls is None:
                rest[k] = v
            else:
                handlers[k] = cls(k, v)
        object.__setattr__(self, "_handlers", handlers)
        for k, h in handlers.items():
            object.__setattr__(self, k, h.value)
        super().__init__(**rest)

    def save(self):
        """All or nothing: every part's copy (the sampler's is collective) is
        made before any is kept, so a peer lost in the middle of a commit
        leaves the previous commit whole. (Kept part by part, a commit that
        failed in a second sampler's allgather kept the first sampler's
        progress of this step with the model of the commit before: the
        samples in between were never trained on.)"""
        copies = {k: h.snapshot() for k, h in self._handlers.items()}
        objects = self._snapshot()
        for k, h in self._handlers.items():
            h._saved = copies[k]
        self._saved_state = objects

    def restore(self):
        for h in self._handlers.values():
            h.restore()
        super().restore()

    def sync(self):
        for h in self._handlers.values():
            h.sync()
        super().sync()

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers")
        if handlers is not None and name in handlers:
            handlers[name].set_value(value)
        object.__setattr__(self, name, value)


__all__ = ["run", "run_fn", "State", "ObjectState", "TorchState", "ElasticSampler",
           "HostsUpdatedInterrupt", "HorovodInternalError", "MembershipChangedError",
           "membership"]
