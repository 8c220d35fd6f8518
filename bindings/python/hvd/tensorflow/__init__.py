"""hvd.tensorflow: the hvd collectives on TensorFlow 2 tensors, and
DistributedGradientTape.

    import hvd.tensorflow as hvd
    hvd.init()
    with tf.GradientTape() as tape:
        loss = ...
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)

Eagerly, ``tensor.numpy()`` goes to the numpy API and the result comes back
with ``tf.convert_to_tensor``. In a graph (``tf.function``, Keras' compiled
train step, ``tf.compat.v1`` ``Session.run``) each op is one of hvd's
asynchronous TensorFlow kernels, built against the installed TensorFlow on
first use and cached (hvd/_tf_kernels.py; ``python -m hvd._tf_kernels``
builds it ahead of time). They never hold a TensorFlow thread while waiting
for other ranks, so a graph may run any number of independent hvd ops on any
inter-op thread pool. XLA cannot compile them: compile Keras models with
jit_compile=False where XLA would be on.

Do not use it in a process that has loaded PyTorch (hvd.torch): the two
frameworks cannot share a process (importing this module, or hvd.keras, then
warns; see bindings/python/README.md).
"""

from __future__ import annotations

import sys as _sys
import warnings as _warnings


def _warn_if_torch_loaded():
    """A RuntimeWarning when torch is already loaded, attributed to the line
    that imported hvd.tensorflow or hvd.keras (hvd's own frames skipped;
    warnings itself skips importlib's)."""
    if "torch" not in _sys.modules:
        return
    level, imported, f = 1, "hvd.tensorflow", _sys._getframe(1)
    while f is not None:
        code = f.f_code.co_filename
        if "importlib" in code and "_bootstrap" in code:
            f = f.f_back
            continue
        level += 1
        mod = f.f_globals.get("__name__", "")
        if mod != "hvd" and not mod.startswith("hvd."):
            break
        imported = mod
        f = f.f_back
    _warnings.warn(
        f"{imported} was imported into a process that has already loaded PyTorch (torch). "
        "TensorFlow and PyTorch cannot share a process: both bundle LLVM, and with some pairs of "
        "wheels (tensorflow-cpu 2.21 with torch 2.15 / triton 3.9) the process aborts with "
        "\"LLVM ERROR: Option '...' registered more than once!\" as soon as torch loads triton "
        "(at the first optimizer step, for example). Use one framework per process.",
        RuntimeWarning, stacklevel=level)


_warn_if_torch_loaded()

try:
    import tensorflow as tf
except ImportError as _e:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "hvd.tensorflow needs TensorFlow 2, which is not installed (pip install tensorflow-cpu); "
        "the numpy API in `import hvd` works without it") from _e

from .._api import DEFAULT as _DEFAULT
from .. import (  # noqa: F401  (re-exported: `import hvd.tensorflow as hvd` is a drop-in)
    Adasum,
    Average,
    HorovodInternalError,
    HvdError,
    Max,
    Min,
    ProcessSet,
    Product,
    Sum,
    add_process_set,
    barrier,
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    global_process_set,
    init,
    is_homogeneous,
    is_initialized,
    join,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    remove_process_set,
    rocm_built,
    shutdown,
    size,
    start_timeline,
    stop_timeline,
    flight_recorder_dump,
    transport,
)


# The package's parts, by job; hvd.tensorflow re-exports their public names.
# Horovod's submodule paths (hvd.tensorflow.mpi_ops, ...) offer Horovod's names
# of that module, from the private module that implements them.
from . import compression, functions, mpi_ops  # noqa: E402,F401
from ._collectives import (  # noqa: E402,F401
    allgather,
    allreduce,
    alltoall,
    broadcast,
    check_num_rank_power_of_2,
    grouped_allgather,
    grouped_allreduce,
    grouped_reducescatter,
    handle_average_backwards_compatibility,
    local_rank_op,
    local_size_op,
    process_set_included_op,
    rank_op,
    reducescatter,
    size_op,
)
from ._compression import (  # noqa: E402,F401
    Compression,
    Compressor,
    FP16Compressor,
    NoneCompressor,
)
from ._execution import InvalidArgumentError, MismatchError  # noqa: E402,F401
from ._execution import _executing_eagerly  # noqa: E402,F401  (Horovod's private name)
from ._functions import (  # noqa: E402,F401
    BroadcastGlobalVariablesHook,
    broadcast_,
    allgather_object,
    broadcast_global_variables,
    broadcast_object,
    broadcast_object_fn,
    broadcast_variables,
)
from ._gradients import (  # noqa: E402,F401
    DistributedGradientTape,
    PartialDistributedGradientTape,
    allreduce_gradients,
    reduce_gradients,
)
from ._optimizer import DistributedOptimizer  # noqa: E402,F401


def _rebind_sets():
    # After an elastic reset: the registered sets' new contexts, for graphs
    # traced before it (their ops name the set by id).
    kernels = _sys.modules.get("hvd._tf_kernels")
    if kernels is None:
        return
    for ps in _DEFAULT._registry.live():
        if ps._ctx is not None:
            kernels.set_context(ps.process_set_id, ps._ctx._ptr)


# Horovod's hvd.tensorflow.elastic (run, TensorFlowKerasState,
# TensorFlowState, ...), also importable as a module.
from .. import elastic as _hvd_elastic  # noqa: E402
from . import elastic  # noqa: E402

_hvd_elastic._register_reset_hook(_rebind_sets, after=True)


# `import horovod.tensorflow.keras as hvd` becomes `import hvd.tensorflow.keras as hvd`
# (or `import hvd.keras as hvd`): hvd.tensorflow.keras is hvd.keras itself,
# imported on first use through the finder below (the folder has no keras module).


class _KerasAlias:
    """Finder and loader of hvd.tensorflow.keras: the hvd.keras module."""

    name = __name__ + ".keras"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        import importlib.util
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        import importlib
        mod = importlib.import_module("hvd.keras")
        # its submodules under this name too (from hvd.tensorflow.keras.callbacks import ...)
        for sub in ("callbacks", "elastic"):
            _sys.modules.setdefault(f"{self.name}.{sub}", getattr(mod, sub))
        return mod

    def exec_module(self, module):
        pass  # hvd.keras ran when it was imported


if not any(isinstance(f, _KerasAlias) for f in _sys.meta_path):
    _sys.meta_path.append(_KerasAlias())


def __getattr__(name):
    # SyncBatchNormalization subclasses a Keras layer: Keras loads on first use.
    if name == "SyncBatchNormalization":
        from ._sync_batch_norm import SyncBatchNormalization
        return SyncBatchNormalization
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
