"""hvd.torch.elastic.state: the public name of Horovod's
horovod.torch.elastic.state that hvd has (``from hvd.torch.elastic.state
import TorchState``), hvd.torch.elastic's own class.

Not here, because hvd does not have them: Horovod's handler classes
(StateHandler, ModelStateHandler, OptimizerStateHandler,
LRSchedulerStateHandler, SamplerStateHandler) and its handler registry
(get_handler_registry, set_handler_registry). hvd's TorchState chooses its
(private) handlers by the attribute's type: models, optimizers, LR schedulers
and ElasticSamplers, as Horovod's default registry does.
"""

from ._state import TorchState  # noqa: F401

__all__ = ["TorchState"]
