"""hvd.tensorflow.keras.callbacks: Horovod's Keras callbacks (hvd.keras's)."""

from ...keras import (  # noqa: F401  (re-exported)
    BestModelCheckpoint,
    BroadcastGlobalVariablesCallback,
    LearningRateScheduleCallback,
    LearningRateWarmupCallback,
    MetricAverageCallback,
)

__all__ = ["BestModelCheckpoint", "BroadcastGlobalVariablesCallback",
           "LearningRateScheduleCallback", "LearningRateWarmupCallback", "MetricAverageCallback"]
