"""hvd.tensorflow.keras: Horovod's horovod.tensorflow.keras, for scripts that
import it by that name (`import hvd.tensorflow.keras as hvd`).

It is hvd.keras's API -- the same functions, classes and callbacks (hvd.keras
holds them; see its docstring) -- with Horovod's submodules callbacks and
elastic beside it. Importing it imports hvd.keras (and so TensorFlow and
Keras)."""

from ...keras import *  # noqa: F401,F403  (hvd.keras's __all__)
from ...keras import __all__  # noqa: F401
from ... import keras as _keras
from . import callbacks, elastic  # noqa: F401  (Horovod's submodules)


def __getattr__(name):
    # hvd.keras defines SyncBatchNormalization on first use (a Keras layer).
    if name == "SyncBatchNormalization":
        return _keras.SyncBatchNormalization
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
