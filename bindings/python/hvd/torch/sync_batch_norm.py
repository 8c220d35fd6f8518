"""hvd.torch.sync_batch_norm: the public name of Horovod's
horovod.torch.sync_batch_norm (``from hvd.torch.sync_batch_norm import
SyncBatchNorm``), hvd.torch's own class."""

from ._sync_batch_norm import SyncBatchNorm  # noqa: F401

__all__ = ["SyncBatchNorm"]
