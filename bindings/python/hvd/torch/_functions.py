"""hvd.torch.functions: broadcasting a model's parameters and an
optimizer's state from one rank (Horovod's horovod.torch.functions), and the
object collectives."""

from __future__ import annotations

import torch

from .. import global_process_set, rank
from ._collectives import _t, allgather_object, broadcast_async_, broadcast_object

def broadcast_parameters(params, root_rank=0, prefix="broadcast_parameters",
                         process_set=global_process_set):
    """Overwrites every tensor in params with root's, in place.
    params: a state_dict (name -> tensor) or (name, tensor) pairs (named_parameters()).
    process_set: within a set only (root_rank is then one of its ranks, as
    hvd.rank() numbers it)."""
    if isinstance(params, dict):
        items = sorted(params.items())
    else:
        items = list(params)
    handles = []
    for name, p in items:
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"hvd.torch.broadcast_parameters: {name!r} is a "
                            f"{type(p).__name__}, not a tensor")
        handles.append(broadcast_async_(p, root_rank, name=f"{prefix}.{name}",
                                        process_set=process_set))
    for h in handles:
        h.wait()


def _initialize_optimizer_state(optimizer):
    """As Horovod does before broadcasting: an optimizer that has not stepped
    yet (no per-parameter state, e.g. no momentum buffers) takes one step with
    zero gradients, so that its state exists. As in Horovod, a trainable
    parameter that had no gradient keeps the zero gradient (scripts then
    broadcast or read p.grad); a gradient it had is put back. Unlike Horovod,
    the parameters are restored afterwards (a zero-gradient step still moves
    parameters under weight decay). A DistributedOptimizer steps its wrapped
    class (no allreduce: the other ranks need not take part). Optimizers whose
    step needs a closure (LBFGS), and any whose zero-gradient step fails
    (SparseAdam refuses dense gradients), are left empty."""
    if len(optimizer.state) > 0 or isinstance(optimizer, torch.optim.LBFGS):
        return
    saved = []
    with torch.no_grad():
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    saved.append((p, p.detach().clone(), p.grad))
                    p.grad = torch.zeros_like(p)
    step = optimizer.step
    if getattr(optimizer, "_hvd_distributed", False):
        step = super(optimizer.__class__, optimizer).step
    try:
        step()
    except RuntimeError:
        optimizer.state.clear()
    finally:
        with torch.no_grad():
            for p, value, grad in saved:
                p.copy_(value)
                p.grad = torch.zeros_like(p) if grad is None else grad


def broadcast_optimizer_state(optimizer, root_rank=0, name="broadcast_optimizer_state",
                              process_set=global_process_set):
    """Makes every rank's optimizer state (per-parameter state and
    hyperparameters such as lr) equal to root's. As in Horovod, an optimizer
    that has not stepped yet first gets its state initialized (one step with
    zero gradients, which stay as the gradients of trainable parameters that
    had none; hvd restores the parameters after it), so
    that e.g. momentum buffers exist on every rank even when root has not
    stepped either. process_set: within a set only (root_rank is then one of
    its ranks, as hvd.rank() numbers it)."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError("hvd.torch.broadcast_optimizer_state: expected a torch.optim.Optimizer")
    _t._target(process_set)  # a registered set this rank is in, before any local work
    _initialize_optimizer_state(optimizer)
    state = optimizer.state_dict() if rank() == root_rank else None
    state = broadcast_object(state, root_rank, name=name, process_set=process_set)
    if rank() != root_rank:
        optimizer.load_state_dict(state)


__all__ = ["allgather_object", "broadcast_object", "broadcast_optimizer_state",
           "broadcast_parameters"]
