"""hvd.tensorflow.sync_batch_norm: the public name of Horovod's
horovod.tensorflow.sync_batch_norm (``from hvd.tensorflow.sync_batch_norm
import SyncBatchNormalization``): hvd.tensorflow.SyncBatchNormalization, the
same class. hvd.tensorflow makes it on first use (it subclasses the Keras
layer); importing this module is that use."""

from ._sync_batch_norm import SyncBatchNormalization  # noqa: F401

__all__ = ["SyncBatchNormalization"]
