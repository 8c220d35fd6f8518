"""hvd.tensorflow.keras.elastic: Horovod's elastic Keras API (hvd.keras.elastic's:
KerasState and the callbacks that commit and track progress; docs/elastic.md)."""

from ..._keras_elastic import *  # noqa: F401,F403  (its __all__)
from ..._keras_elastic import __all__  # noqa: F401
