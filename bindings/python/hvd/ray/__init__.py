"""hvd on Ray (docs/ray.md).

    from hvd.ray import RayExecutor              # was: from horovod.ray import RayExecutor

    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_workers=4)
    executor.start()
    results = executor.run(train, args=(config,))   # hvd.init() inside train joins the job
    executor.shutdown()

and Ray Train: ``DataParallelTrainer(train_loop, backend_config=hvd.ray.HvdConfig(),
scaling_config=ScalingConfig(num_workers=4))``.
"""

from .executor import RayExecutor, Settings, WorkerLostError, create_settings
from .train import HvdBackend, HvdConfig

__all__ = ["RayExecutor", "Settings", "WorkerLostError", "create_settings", "HvdConfig",
           "HvdBackend"]
