"""hvd.torch.optimizer: the public name of Horovod's horovod.torch.optimizer
(``from hvd.torch.optimizer import DistributedOptimizer``), hvd.torch's own
object. Horovod's private classes there (_DistributedOptimizer,
_DistributedAdasumOptimizer), which some scripts subclass, are not offered."""

from ._optimizer import DistributedOptimizer  # noqa: F401

__all__ = ["DistributedOptimizer"]
