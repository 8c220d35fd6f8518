"""hvd.torch: the hvd collectives on torch tensors, and DistributedOptimizer.

    import hvd.torch as hvd
    hvd.init()
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)

CPU tensors are passed to the library zero-copy (data_ptr); non-contiguous
tensors are copied once (PerformanceWarning). CUDA tensors are passed as
device memory, ordered on the current stream of their device: staged
through host memory over the host transports, or handed to NCCL with
``hvd.init(transport="nccl")``; waiting on a handle orders the waiting
code's current stream after the result (docs/gpu.md).

Do not use it in a process that has loaded TensorFlow (hvd.tensorflow,
hvd.keras): the two frameworks cannot share a process (importing this module
then warns; see bindings/python/README.md).
"""

from __future__ import annotations

import sys as _sys
import warnings

if "tensorflow" in _sys.modules:
    warnings.warn(
        "hvd.torch was imported into a process that has already loaded TensorFlow. TensorFlow "
        "and PyTorch cannot share a process: both bundle LLVM, and with some pairs of wheels "
        "(tensorflow-cpu 2.21 with torch 2.15 / triton 3.9) the process aborts with \"LLVM "
        "ERROR: Option '...' registered more than once!\" as soon as torch loads triton (at the "
        "first optimizer step, for example). Use one framework per process.",
        RuntimeWarning, stacklevel=2)

try:
    import torch
except ImportError as _e:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "hvd.torch needs PyTorch, which is not installed (pip install torch); the numpy API "
        "in `import hvd` works without it") from _e

from .. import (  # noqa: F401  (re-exported: `import hvd.torch as hvd` is a drop-in)
    Adasum,
    Average,
    Context,
    Handle,
    HorovodInternalError,
    HostsUpdatedInterrupt,
    HvdError,
    Max,
    MembershipChangedError,
    Min,
    PerformanceWarning,
    ProcessSet,
    Product,
    Sum,
    add_process_set,
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    init,
    is_homogeneous,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    global_process_set,
    poll,
    rank,
    remove_process_set,
    rocm_built,
    shutdown,
    size,
    start_timeline,
    stop_timeline,
    flight_recorder_dump,
    synchronize,
    transport,
)


# The package's parts, by job; hvd.torch re-exports their public names.
# Horovod's submodule paths (hvd.torch.mpi_ops, ...): each offers Horovod's names
# of that module, from the private module that implements them.
from . import compression, functions, mpi_ops, optimizer, sync_batch_norm  # noqa: E402,F401
from ._compression import (  # noqa: E402,F401
    Compression,
    Compressor,
    FP16Compressor,
    NoneCompressor,
)
from ._functions import (  # noqa: E402,F401
    _initialize_optimizer_state,
    broadcast_optimizer_state,
    broadcast_parameters,
)
from ._collectives import (  # noqa: E402,F401
    SUPPORTED_DTYPES,
    TORCH,
    SparseHandle,
    TorchAdapter,
    _t,
    allgather,
    allgather_async,
    allgather_object,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall,
    alltoall_async,
    barrier,
    barrier_async,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    broadcast_object,
    grouped_allgather,
    grouped_allgather_async,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    grouped_reducescatter,
    grouped_reducescatter_async,
    handle_average_backwards_compatibility,
    join,
    join_async,
    reducescatter,
    reducescatter_async,
    sparse_allreduce_async,
)
from ._optimizer import DistributedOptimizer, _drop_pending_reductions  # noqa: E402,F401
from ._sync_batch_norm import SyncBatchNorm  # noqa: E402,F401

# Horovod's hvd.torch.elastic (run, TorchState, ElasticSampler, ...), also
# importable as a module (import hvd.torch.elastic).
from .. import elastic as _hvd_elastic  # noqa: E402
from . import elastic  # noqa: E402

_hvd_elastic._register_reset_hook(_drop_pending_reductions)
