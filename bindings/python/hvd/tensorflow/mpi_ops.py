"""hvd.tensorflow.mpi_ops: the public names of Horovod's
horovod.tensorflow.mpi_ops, so that ``from horovod.tensorflow.mpi_ops import
allgather, rank`` runs as ``from hvd.tensorflow.mpi_ops import ...``. Every
name is hvd.tensorflow's own object (hvd/tensorflow/_collectives.py implements
the collectives).

Not here, because hvd does not have them: the loaded op library MPI_LIB, and
the private ops Horovod's own __init__ builds on (_allreduce,
_grouped_allreduce, _reducescatter, _grouped_reducescatter: use
hvd.tensorflow's allreduce, grouped_allreduce, reducescatter,
grouped_reducescatter, whose default op is Average where those sum).
"""

from .. import (  # noqa: F401
    Adasum,
    Average,
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
)
from ._functions import broadcast_  # noqa: F401
from ._collectives import (  # noqa: F401
    allgather,
    alltoall,
    broadcast,
    check_num_rank_power_of_2,
    grouped_allgather,
    handle_average_backwards_compatibility,
    local_rank_op,
    local_size_op,
    process_set_included_op,
    rank_op,
    size_op,
)

__all__ = [
    "Adasum", "Average", "Max", "Min", "ProcessSet", "Product", "Sum", "add_process_set",
    "allgather", "alltoall", "broadcast", "broadcast_", "ccl_built", "check_num_rank_power_of_2",
    "cross_rank", "cross_size", "cuda_built", "ddl_built", "global_process_set", "gloo_built",
    "gloo_enabled", "grouped_allgather", "handle_average_backwards_compatibility", "init",
    "is_homogeneous", "is_initialized", "join", "local_rank", "local_rank_op", "local_size",
    "local_size_op", "mpi_built", "mpi_enabled", "mpi_threads_supported", "nccl_built",
    "process_set_included_op", "rank", "rank_op", "remove_process_set", "rocm_built",
    "shutdown", "size", "size_op", "start_timeline", "stop_timeline",
]
