"""hvd on Ray (docs/ray.md).

    from hvd.ray import RayExecutor              # was: from horovod.ray import RayExecutor

    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_workers=4)
    executor.start()
    results = executor.run(train, args=(config,))   # hvd.init() inside train joins the job
    executor.shutdown()

and Ray Train: ``DataParallelTrainer(train_loop, backend_config=hvd.ray.HvdConfig(),
scaling_config=ScalingConfig(num_workers=4))``.

Ray itself is imported when it is used (RayExecutor.start, hvd.ray.HvdConfig), so
that ``import hvd.ray`` is quick and works where Ray is not installed.
"""

from .executor import RayExecutor, Settings, WorkerLostError, create_settings

__all__ = ["RayExecutor", "Settings", "WorkerLostError", "create_settings", "HvdConfig",
           "HvdBackend"]


def __getattr__(name):
    # The Ray Train backend subclasses ray.train's classes: importing it
    # imports ray.train (seconds), hence only when asked for.
    if name in ("HvdConfig", "HvdBackend"):
        from . import train

        return getattr(train, name)
    raise AttributeError(f"module 'hvd.ray' has no attribute {name!r}")
