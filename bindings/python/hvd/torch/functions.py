"""hvd.torch.functions: the names of Horovod's horovod.torch.functions
(``from hvd.torch.functions import broadcast_parameters``), hvd.torch's own
objects."""

from ._collectives import allgather_object, broadcast_object  # noqa: F401
from ._functions import (  # noqa: F401
    broadcast_optimizer_state,
    broadcast_parameters,
)

__all__ = ["allgather_object", "broadcast_object", "broadcast_optimizer_state",
           "broadcast_parameters"]
