"""hvd.tensorflow.functions: the public names of Horovod's
horovod.tensorflow.functions (``from hvd.tensorflow.functions import
broadcast_variables``), hvd.tensorflow's own objects."""

from ._functions import (  # noqa: F401
    allgather_object,
    broadcast_object,
    broadcast_object_fn,
    broadcast_variables,
)

__all__ = ["allgather_object", "broadcast_object", "broadcast_object_fn", "broadcast_variables"]
