"""hvd.torch.elastic.state: TorchState (Horovod's horovod.torch.elastic.state;
hvd.torch.elastic re-exports it), which keeps copies of a model's and an
optimizer's state_dict (an ElasticSampler's progress, an LR scheduler's state)
at every commit, goes back to them after a failure and syncs them from rank 0
after a reset.

Not here, because hvd does not have them: Horovod's handler classes
(StateHandler, ModelStateHandler, OptimizerStateHandler,
LRSchedulerStateHandler, SamplerStateHandler) and its handler registry
(get_handler_registry, set_handler_registry). hvd's TorchState chooses its
(private) handlers by the attribute's type: models, optimizers, LR schedulers
and ElasticSamplers, as Horovod's default registry does.
"""

from __future__ import annotations

import copy

import torch

from ... import elastic as _elastic
from ...elastic import ObjectState
from .._functions import broadcast_optimizer_state, broadcast_parameters
from ._sampler import ElasticSampler

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
        broadcast_parameters(self.value.state_dict(), root_rank=0,
                             prefix=f"elastic.{self.name}")


class _OptimizerHandler(_Handler):
    def restore(self):
        # a copy: load_state_dict keeps the tensors it is given (momentum
        # buffers would then change the saved state in place)
        self.value.load_state_dict(copy.deepcopy(self._saved))

    def sync(self):
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


__all__ = ["TorchState"]
