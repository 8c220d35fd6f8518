"""hvd.torch.mpi_ops: the names of Horovod's horovod.torch.mpi_ops, so that
``from horovod.torch.mpi_ops import allreduce_async_, synchronize`` runs as
``from hvd.torch.mpi_ops import ...``. Every name is hvd.torch's own object
(hvd/torch/_collectives.py implements the collectives on torch tensors).

Not here, because hvd does not have them: Horovod's autograd classes
(HorovodAllreduce, HorovodGroupedAllreduce, HorovodAllgather,
HorovodGroupedAllgather, HorovodBroadcast, HorovodAlltoall,
HorovodReducescatter, HorovodGroupedReducescatter; hvd's are private and take
other arguments), the extension module mpi_lib, and the other helpers it
imports from horovod.common.util.
"""

from .. import (  # noqa: F401
    Adasum,
    Average,
    HorovodInternalError,
    Max,
    Min,
    ProcessSet,
    Product,
    Sum,
    add_process_set,
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    global_process_set,
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
    poll,
    rank,
    remove_process_set,
    rocm_built,
    shutdown,
    size,
    start_timeline,
    stop_timeline,
    synchronize,
)
from ._collectives import (  # noqa: F401
    allgather,
    allgather_async,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall,
    alltoall_async,
    barrier,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
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
    reducescatter,
    reducescatter_async,
    sparse_allreduce_async,
)
from ._compression import Compression  # noqa: F401

__all__ = [
    "Adasum", "Average", "Compression", "HorovodInternalError", "Max", "Min", "ProcessSet",
    "Product", "Sum", "add_process_set", "allgather", "allgather_async", "allreduce",
    "allreduce_", "allreduce_async", "allreduce_async_", "alltoall", "alltoall_async",
    "barrier", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_", "ccl_built",
    "cross_rank", "cross_size", "cuda_built", "ddl_built", "global_process_set", "gloo_built",
    "gloo_enabled", "grouped_allgather", "grouped_allgather_async", "grouped_allreduce",
    "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
    "handle_average_backwards_compatibility",
    "grouped_reducescatter", "grouped_reducescatter_async", "init", "is_homogeneous",
    "is_initialized", "join", "local_rank", "local_size", "mpi_built", "mpi_enabled",
    "mpi_threads_supported", "nccl_built", "poll", "rank", "reducescatter",
    "reducescatter_async", "remove_process_set", "rocm_built", "shutdown", "size",
    "sparse_allreduce_async", "start_timeline", "stop_timeline", "synchronize",
]
