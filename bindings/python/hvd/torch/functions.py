"""hvd.torch.functions: the names of Horovod's horovod.torch.functions
(``from hvd.torch.functions import broadcast_parameters``), hvd.torch's own
objects."""

from hvd.torch import (  # noqa: F401
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)

__all__ = ["allgather_object", "broadcast_object", "broadcast_optimizer_state",
           "broadcast_parameters"]
