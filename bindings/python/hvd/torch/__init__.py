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

import contextlib
import sys as _sys
import warnings
import weakref

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

import numpy as np

from .. import _c_api as C
from .. import _ops
from .._api import DEFAULT as _DEFAULT
from .._api import Collectives as _Collectives
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
    synchronize,
    transport,
)

_TO_HVD = {
    torch.uint8: C.HVD_UINT8,
    torch.int8: C.HVD_INT8,
    torch.int16: C.HVD_INT16,
    torch.int32: C.HVD_INT32,
    torch.int64: C.HVD_INT64,
    torch.float16: C.HVD_FLOAT16,
    torch.bfloat16: C.HVD_BFLOAT16,
    torch.float32: C.HVD_FLOAT32,
    torch.float64: C.HVD_FLOAT64,
    torch.bool: C.HVD_BOOL,
}
if hasattr(torch, "uint16"):
    _TO_HVD[torch.uint16] = C.HVD_UINT16

SUPPORTED_DTYPES = tuple(_TO_HVD)


def _current_stream(device):
    return torch.cuda.current_stream(device).cuda_stream


# A handle's CUDA result goes on with the waiting code's current stream.
_ops.consumer_stream = _current_stream


class TorchAdapter:
    name = "torch"

    def buf(self, x, what, writable):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"hvd.torch: {what} must be a torch.Tensor, got {type(x).__name__} "
                            "(use `import hvd` for numpy arrays)")
        device, stream = C.HVD_DEVICE_CPU, None
        if x.device.type == "cuda":
            # The library stages it through host memory (or hands it to a
            # transport that takes CUDA memory), ordered on the current
            # stream of the tensor's device.
            device = x.device.index if x.device.index is not None else torch.cuda.current_device()
            stream = torch.cuda.current_stream(device).cuda_stream
        elif x.device.type != "cpu":
            raise C.UnsupportedError(
                C.HVD_ERR_UNSUPPORTED,
                f"hvd.torch: {what} is on {x.device}; hvd moves host memory and CUDA memory "
                "only: pass tensor.cpu() and copy the result back")
        if x.is_sparse or x.layout != torch.strided:
            raise TypeError(f"hvd.torch: {what} has layout {x.layout}; only dense (strided) "
                            "tensors are supported (use .to_dense())")
        code = _TO_HVD.get(x.dtype)
        if code is None:
            names = ", ".join(str(d).replace("torch.", "") for d in _TO_HVD)
            raise TypeError(f"hvd.torch: dtype {x.dtype} is not supported; supported: {names}")
        t = x.detach()
        copied = False
        if not t.is_contiguous():
            _ops.warn_copy(what, f"not contiguous (strides {tuple(t.stride())}, shape "
                                 f"{tuple(t.shape)})")
            t = t.contiguous()
            copied = True
        n = t.numel()
        return _ops.Buf(t.data_ptr() if n else 0, code, t.shape, t, x, copied,
                        n * t.element_size(), device, stream)

    def empty(self, buf):
        out = torch.empty(buf.shape, dtype=buf.contig.dtype, device=buf.contig.device)
        return out, (out.data_ptr() if out.numel() else 0)

    def owned_device(self, mem, buf, shape):
        # A result in the input's device memory (a transport that takes CUDA
        # memory): a view of it, which keeps the handle until it goes.
        raw = torch.as_tensor(mem, device=buf.contig.device)
        return raw.view(buf.contig.dtype).reshape(shape)

    def owned(self, mem, buf, shape):
        # Results the handle owns (allgather, alltoall, reducescatter) staged
        # over a host transport are host memory, also for CUDA inputs
        # (hvd.h): copied to the input's device, on its current stream.
        dt = buf.contig.dtype
        dev = buf.contig.device
        if mem is None:
            return torch.empty(shape, dtype=dt, device=dev)
        raw = torch.from_numpy(np.asarray(mem))  # shares the handle's memory
        out = raw.view(dt).reshape(shape)
        if dev.type == "cuda":
            out = out.to(dev)
        return out

    def writeback(self, buf, result):
        with torch.no_grad():
            buf.orig.copy_(result)

    def splits(self, s):
        if isinstance(s, torch.Tensor):
            s = s.tolist()
        return [int(v) for v in s]

    def make_splits(self, values):
        return torch.tensor(values, dtype=torch.int64)


TORCH = TorchAdapter()
_t = _Collectives(_DEFAULT, TORCH)

allreduce_async = _t.allreduce_async
allreduce_ = _t.allreduce_
allreduce_async_ = _t.allreduce_async_
grouped_allreduce_async = _t.grouped_allreduce_async
grouped_allreduce_ = _t.grouped_allreduce_
grouped_allreduce_async_ = _t.grouped_allreduce_async_
allgather_async = _t.allgather_async
grouped_allgather_async = _t.grouped_allgather_async
broadcast_async = _t.broadcast_async
broadcast_ = _t.broadcast_
broadcast_async_ = _t.broadcast_async_
alltoall_async = _t.alltoall_async
reducescatter_async = _t.reducescatter_async
grouped_reducescatter_async = _t.grouped_reducescatter_async
barrier = _t.barrier
barrier_async = _t.barrier_async
join = _t.join
join_async = _t.join_async
broadcast_object = _t.broadcast_object
allgather_object = _t.allgather_object


# ---------------------------------------------------------------------------
# Gradient compression.
# ---------------------------------------------------------------------------


Compressor = _ops.Compressor
NoneCompressor = _ops.NoneCompressor


class FP16Compressor(Compressor):
    """Sends floating-point gradients as float16 (half the bytes); the sum is
    computed in float32 by the library and cast back to the original dtype."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != torch.float16:
            return tensor.to(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor


class _AllreduceFn(torch.autograd.Function):
    """allreduce as an autograd op: the gradient of an allreduce is the
    allreduce (same op) of the incoming gradients."""

    @staticmethod
    def forward(ctx, tensor, op, name, prescale, postscale, ps):
        ctx.op, ctx.name, ctx.pre, ctx.post, ctx.ps = op, name, prescale, postscale, ps
        return _t.allreduce(tensor, name=name, op=op, prescale_factor=prescale,
                            postscale_factor=postscale, process_set=ps)

    @staticmethod
    def backward(ctx, grad):
        g = _t.allreduce(grad.contiguous(), name=f"{ctx.name}.grad", op=ctx.op,
                         prescale_factor=ctx.pre, postscale_factor=ctx.post, process_set=ctx.ps)
        return g, None, None, None, None, None


def _name(op, name, process_set):
    """The operation's name, from the namer of the context it runs on (a
    process set has its own counters; checks the set first)."""
    return _t._target(process_set)[0]._namer(op, name)


def _set_rank(process_set):
    """This rank's rank within process_set (within the job for the global set)."""
    return _t._target(process_set)[0].rank()


def _set_size(process_set):
    return _t._target(process_set)[0].size()


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces tensor over all ranks (of process_set; default op Average) into a
    new tensor; differentiable when tensor requires grad (ops Sum and Average).

    compression (Horovod's, its 4th positional argument): the tensor is
    compressed before the reduction and the result decompressed, so with
    Compression.fp16 a float32/float64 tensor travels as float16 and the
    result is the float16 result in the input's dtype. The compression casts
    are part of the autograd graph (the gradient is reduced as float16 too).
    As in Horovod, only allreduce, grouped_allreduce, reducescatter and
    grouped_reducescatter take compression: the _async and in-place forms
    have none."""
    compressed, cctx = compression.compress(tensor)
    return compression.decompress(_allreduce(compressed, average, name, op, prescale_factor,
                                             postscale_factor, process_set), cctx)


def _allreduce(tensor, average, name, op, prescale_factor, postscale_factor, process_set):
    if torch.is_grad_enabled() and isinstance(tensor, torch.Tensor) and tensor.requires_grad:
        o = _ops.check_op(_resolve(op, average))
        if o in (Sum, Average):
            return _AllreduceFn.apply(tensor, o, _name("allreduce", name, process_set),
                                      prescale_factor, postscale_factor, process_set)
    return _t.allreduce(tensor, average, name, op, prescale_factor, postscale_factor,
                        process_set)


# Horovod's helper, shared with hvd.tensorflow.
handle_average_backwards_compatibility = _ops.handle_average_backwards_compatibility


def _resolve(op, average):
    if op is not None:
        return op
    if average is None:
        return Average
    return Average if average else Sum


# Gradients of the other collectives, as Horovod defines them (horovod.torch's
# autograd functions): the backward pass runs collectives too, so every rank
# must call backward. Names: the backward of an op named N uses N + ".grad".
#   allgather       the rank's rows of the Average-allreduced gradient
#   broadcast       the Average-allreduced gradient on the root, zeros elsewhere
#   alltoall        the gradient sent back with alltoall, splits = the rows received
#   reducescatter   the allgathered gradient, times size for Sum, times the
#                   prescale and postscale factors
#   grouped_*       the same, member by member (grouped collectives)


def _needs_grad(tensors):
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def _rows_offset(dims, r):
    return int(dims[:r].sum()) if r else 0


class _GroupedAllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, op, name, prescale, postscale, ps, *tensors):
        ctx.op, ctx.name, ctx.pre, ctx.post, ctx.ps = op, name, prescale, postscale, ps
        return tuple(_t.grouped_allreduce(list(tensors), name=name, op=op,
                                          prescale_factor=prescale, postscale_factor=postscale,
                                          process_set=ps))

    @staticmethod
    def backward(ctx, *grads):
        g = _t.grouped_allreduce([x.contiguous() for x in grads], name=f"{ctx.name}.grad",
                                 op=ctx.op, prescale_factor=ctx.pre, postscale_factor=ctx.post,
                                 process_set=ctx.ps)
        return (None, None, None, None, None, *g)


class _AllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, ps):
        out = _t.allgather(tensor, name=name, process_set=ps)
        ctx.name, ctx.dim, ctx.ps = name, int(tensor.shape[0]), ps
        return out

    @staticmethod
    def backward(ctx, grad):
        g = _t.allreduce(grad.contiguous(), name=f"{ctx.name}.grad", op=Average,
                         process_set=ctx.ps)
        dims = _t.allgather(torch.tensor([ctx.dim], dtype=torch.int64),
                            name=f"{ctx.name}.grad.dims", process_set=ctx.ps)
        return g.narrow(0, _rows_offset(dims, _set_rank(ctx.ps)), ctx.dim), None, None


class _GroupedAllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, ps, *tensors):
        out = _t.grouped_allgather(list(tensors), name=name, process_set=ps)
        ctx.name, ctx.dims, ctx.ps = name, [int(t.shape[0]) for t in tensors], ps
        return tuple(out)

    @staticmethod
    def backward(ctx, *grads):
        g = _t.grouped_allreduce([x.contiguous() for x in grads], name=f"{ctx.name}.grad",
                                 op=Average, process_set=ctx.ps)
        dims = _t.grouped_allgather([torch.tensor([d], dtype=torch.int64) for d in ctx.dims],
                                    name=f"{ctx.name}.grad.dims", process_set=ctx.ps)
        r = _set_rank(ctx.ps)
        return (None, None, *[x.narrow(0, _rows_offset(d, r), n)
                              for x, d, n in zip(g, dims, ctx.dims)])


class _BroadcastFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, ps):
        ctx.name, ctx.root, ctx.ps = name, root_rank, ps
        return _t.broadcast(tensor, root_rank, name=name, process_set=ps)

    @staticmethod
    def backward(ctx, grad):
        g = _t.allreduce(grad.contiguous(), name=f"{ctx.name}.grad", op=Average,
                         process_set=ctx.ps)
        if rank() != ctx.root:  # roots are ranks of the job, also within a process set
            g.mul_(0)  # as Horovod: zeros (a NaN or inf gradient stays NaN)
        return g, None, None, None


class _AlltoallFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, ps):
        c, _ = _t._target(ps)
        out, recv = _ops.alltoall_recv_async(c._ptr, TORCH, tensor, splits, name,
                                             c.size()).wait()
        ctx.name, ctx.recv, ctx.ps = name, recv.tolist(), ps
        ctx.mark_non_differentiable(recv)
        return out, recv

    @staticmethod
    def backward(ctx, grad, _grad_splits):
        g, _ = _t.alltoall(grad.contiguous(), splits=ctx.recv, name=f"{ctx.name}.grad",
                           process_set=ctx.ps)
        return g, None, None, None


def _reducescatter_grad_scale(ctx, grad):
    if ctx.op == Sum:
        grad = grad * _set_size(ctx.ps)
    if ctx.pre != 1.0:
        grad = grad * ctx.pre
    if ctx.post != 1.0:
        grad = grad * ctx.post
    return grad.contiguous()


class _ReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, op, name, prescale, postscale, ps):
        ctx.op, ctx.name, ctx.pre, ctx.post, ctx.ps = op, name, prescale, postscale, ps
        return _t.reducescatter(tensor, name=name, op=op, prescale_factor=prescale,
                                postscale_factor=postscale, process_set=ps)

    @staticmethod
    def backward(ctx, grad):
        g = _t.allgather(_reducescatter_grad_scale(ctx, grad), name=f"{ctx.name}.grad",
                         process_set=ctx.ps)
        return g, None, None, None, None, None


class _GroupedReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, op, name, prescale, postscale, ps, *tensors):
        ctx.op, ctx.name, ctx.pre, ctx.post, ctx.ps = op, name, prescale, postscale, ps
        return tuple(_t.grouped_reducescatter(list(tensors), name=name, op=op,
                                              prescale_factor=prescale,
                                              postscale_factor=postscale, process_set=ps))

    @staticmethod
    def backward(ctx, *grads):
        g = _t.grouped_allgather([_reducescatter_grad_scale(ctx, x) for x in grads],
                                 name=f"{ctx.name}.grad", process_set=ctx.ps)
        return (None, None, None, None, None, *g)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """Allreduces a list of tensors (one dtype) negotiated and fused as one unit;
    tensor i is named f"{name}.{i}". Differentiable (ops Sum and Average).
    compression (4th positional, as in Horovod): each tensor compressed
    before, each result decompressed after (see allreduce)."""
    pairs = [compression.compress(t) for t in tensors]
    tensors = [c for c, _ in pairs]
    if _needs_grad(tensors):
        o = _ops.check_op(_resolve(op, average))
        if o in (Sum, Average):
            out = list(_GroupedAllreduceFn.apply(
                o, _name("grouped_allreduce", name, process_set), prescale_factor,
                postscale_factor, process_set, *tensors))
            return [compression.decompress(t, c) for t, (_, c) in zip(out, pairs)]
    out = _t.grouped_allreduce(tensors, average, name, op, prescale_factor, postscale_factor,
                               process_set)
    return [compression.decompress(t, c) for t, (_, c) in zip(out, pairs)]


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's tensor (of process_set, in its rank order) along
    the first dimension (which may differ between ranks). Differentiable."""
    if _needs_grad((tensor,)):
        return _AllgatherFn.apply(tensor, _name("allgather", name, process_set), process_set)
    return _t.allgather(tensor, name, process_set)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """allgather of each tensor of a list; returns the list of results. Tensor i is
    named f"{name}.{i}" (negotiated one by one: the library has no grouped
    allgather). Differentiable."""
    tensors = list(tensors)
    if _needs_grad(tensors):
        return list(_GroupedAllgatherFn.apply(_name("grouped_allgather", name, process_set),
                                              process_set, *tensors))
    return _t.grouped_allgather(tensors, name, process_set)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Root's tensor, returned as a new tensor on every rank (of process_set; root_rank
    is a rank of the job, as hvd.rank() numbers it). Differentiable."""
    if _needs_grad((tensor,)):
        return _BroadcastFn.apply(tensor, root_rank, _name("broadcast", name, process_set),
                                  process_set)
    return _t.broadcast(tensor, root_rank, name, process_set)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[j] rows to rank j (of process_set; even split when splits is
    None). The result is the received rows in rank order; with splits given,
    (result, received_splits). Differentiable."""
    if _needs_grad((tensor,)):
        out, recv = _AlltoallFn.apply(tensor, splits, _name("alltoall", name, process_set),
                                      process_set)
        return out if splits is None else (out, recv)
    return _t.alltoall(tensor, splits, name, process_set)


def reducescatter(tensor, name=None, compression=Compression.none, op=None,
                  prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces over ranks (of process_set; default op Average); rank r keeps its
    block of rows (the first shape[0] % size ranks get one extra row).
    Differentiable (Sum, Average). compression (3rd positional, as in
    Horovod): compressed before, the block decompressed after (see
    allreduce); reducescatter_async has none."""
    tensor, cctx = compression.compress(tensor)
    if _needs_grad((tensor,)):
        o = _ops.check_op(Average if op is None else op)
        if o in (Sum, Average):
            return compression.decompress(_ReducescatterFn.apply(
                tensor, o, _name("reducescatter", name, process_set), prescale_factor,
                postscale_factor, process_set), cctx)
    return compression.decompress(
        _t.reducescatter(tensor, name, op, prescale_factor, postscale_factor, process_set), cctx)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=None,
                          prescale_factor=1.0, postscale_factor=1.0,
                          process_set=global_process_set):
    """reducescatter of each tensor of a list (default op Average); returns the list
    of results. Tensor i is named f"{name}.{i}" (negotiated one by one).
    Differentiable (Sum, Average). compression (3rd positional, as in
    Horovod): see reducescatter."""
    pairs = [compression.compress(t) for t in tensors]
    tensors = [c for c, _ in pairs]
    if _needs_grad(tensors):
        o = _ops.check_op(Average if op is None else op)
        if o in (Sum, Average):
            out = list(_GroupedReducescatterFn.apply(
                o, _name("grouped_reducescatter", name, process_set), prescale_factor,
                postscale_factor, process_set, *tensors))
            return [compression.decompress(t, c) for t, (_, c) in zip(out, pairs)]
    out = _t.grouped_reducescatter(tensors, name, op, prescale_factor, postscale_factor,
                                   process_set)
    return [compression.decompress(t, c) for t, (_, c) in zip(out, pairs)]


class SparseHandle(_ops.GroupHandle):
    """The handle of sparse_allreduce_async: ``synchronize(handle)``, or
    calling it (``handle()``, as Horovod's function-handle), gives the result."""

    __slots__ = ()

    def __call__(self):
        return self.wait()


def sparse_allreduce_async(tensor, name=None, op=Average, process_set=global_process_set):
    """Reduces a sparse COO tensor over all ranks (of process_set) as Horovod does:
    the indices and the values of every rank are allgathered (names
    f"{name}.indices" and f"{name}.values"; ranks may have different numbers of
    nonzeros) and make one sparse tensor, uncoalesced (duplicate indices add up);
    op Average divides the values by the number of ranks. Returns a
    SparseHandle: ``synchronize(h)`` or ``h()``."""
    if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.sparse_coo:
        raise TypeError("hvd.torch.sparse_allreduce_async: expected a sparse COO tensor, got "
                        f"{tensor.layout if isinstance(tensor, torch.Tensor) else type(tensor)}")
    o = _ops.check_op(op)
    if o not in (Sum, Average):
        raise ValueError("hvd.torch.sparse_allreduce_async: op must be Sum or Average")
    name = _name("sparse_allreduce", name, process_set)
    n = _set_size(process_set)
    t = tensor.detach()
    indices = t._indices().transpose(0, 1).contiguous()  # (nnz, sparse_dim): rows to gather
    values = t._values().contiguous()
    members = [_t.allgather_async(indices, name=f"{name}.indices", process_set=process_set),
               _t.allgather_async(values, name=f"{name}.values", process_set=process_set)]
    shape = t.shape

    def combine(results):
        idx, vals = results
        if o == Average:
            vals = vals / n
        try:  # the indices are the ranks' own: no invariant check (and no warning about it)
            return torch.sparse_coo_tensor(idx.transpose(0, 1), vals, shape,
                                           check_invariants=False)
        except TypeError:  # torch < 2.0
            return torch.sparse_coo_tensor(idx.transpose(0, 1), vals, shape)

    return SparseHandle(members, f"sparse allreduce '{name}'", combine)


# ---------------------------------------------------------------------------
# DistributedOptimizer.
# ---------------------------------------------------------------------------


class _DistributedOptimizer:
    """Methods mixed into a subclass of the wrapped optimizer's class."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, sparse_as_dense=False, groups=None,
                 process_set=global_process_set):
        super(self.__class__, self).__init__(params)
        self._process_set = process_set
        self._compression = compression
        self._sparse_as_dense = bool(sparse_as_dense)
        self._op = _ops.check_op(op)
        if backward_passes_per_step < 1:
            raise ValueError("hvd.torch.DistributedOptimizer: backward_passes_per_step must be "
                             ">= 1")
        self.backward_passes_per_step = int(backward_passes_per_step)
        if gradient_predivide_factor != 1.0 and self._op != Average:
            raise ValueError("hvd.torch.DistributedOptimizer: gradient_predivide_factor needs "
                             "op=Average")
        self._predivide = float(gradient_predivide_factor)

        all_params = [p for g in self.param_groups for p in g["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            for item in named:
                if not (isinstance(item, tuple) and len(item) == 2):
                    raise ValueError("hvd.torch.DistributedOptimizer: named_parameters must be "
                                     "(name, parameter) pairs, e.g. model.named_parameters()")
            names = [n for n, _ in named]
            dup = {n for n in names if names.count(n) > 1}
            if dup:
                raise ValueError(f"hvd.torch.DistributedOptimizer: duplicate parameter names "
                                 f"{sorted(dup)}")
            by_id = {id(p): n for n, p in named}
            missing = [i for i, p in enumerate(all_params) if id(p) not in by_id]
            if missing:
                raise ValueError(
                    "hvd.torch.DistributedOptimizer: named_parameters does not cover every "
                    f"parameter of the optimizer ({len(missing)} missing); pass "
                    "model.named_parameters() of the model the optimizer trains")
            self._names = {p: by_id[id(p)] for p in all_params}
        else:
            self._names = {p: f"noname.{i}" for i, p in enumerate(all_params)}

        # param -> (Handle, compressed tensor or None if sparse, ctx); with groups
        # also tuple of params -> (Handle, [compressed], [ctx]) for a grouped allreduce
        self._handles = {}
        self._submitted = set()  # params whose reduction was started since the last synchronize
        self._passes = {}  # param -> backward passes since the last synchronize
        self._requires_update = [p for p in all_params if p.requires_grad]
        self._hooks = []
        self._synchronized = False
        self._should_synchronize = True
        self._group_of = {}  # param -> its group (a tuple of params), with groups only
        self._ready = {}  # group -> members whose gradients are ready
        if groups is not None:
            self._form_groups(_check_groups(groups))
        # Also in a world of one: the same code path everywhere.
        self._register_hooks()

    # -- groups -----------------------------------------------------------------------
    def _form_groups(self, groups):
        """Horovod's grouping: an int n splits the parameters that need
        gradients (in rank 0's order of their names) into n contiguous groups
        of nearly equal length; a list of lists makes each inner list a group
        and every other parameter a group of its own."""
        plist = list(self._requires_update)
        if isinstance(groups, int):
            ps = self._process_set
            if _set_size(ps) > 1:
                # the first rank's order, so that every rank forms the same groups
                first = 0 if ps is None or ps._global else ps.ranks[0]
                order = broadcast_object([self._names[p] for p in plist], first,
                                         name="DistributedOptimizer.groups", process_set=ps)
                pos = {n: i for i, n in enumerate(order)}
                unknown = [self._names[p] for p in plist if self._names[p] not in pos]
                if unknown:
                    raise ValueError("hvd.torch.DistributedOptimizer: parameters "
                                     f"{unknown} are not among rank 0's; every rank must "
                                     "wrap the same model")
                plist.sort(key=lambda p: pos[self._names[p]])
            per, extra = divmod(len(plist), groups)
            formed, start = [], 0
            for i in range(groups):
                end = start + per + (1 if i < extra else 0)
                formed.append(plist[start:end])
                start = end
        else:
            wanted = {id(p) for p in plist}
            formed, seen = [], set()
            for g in groups:
                formed.append([p for p in g if id(p) in wanted])
                seen.update(id(p) for p in g)
            formed.extend([p] for p in plist if id(p) not in seen)
        for g in formed:
            if g:
                t = tuple(g)
                for p in t:
                    self._group_of[p] = t
                self._ready[t] = 0

    def _grouped_allreduce_grads_async(self, group):
        """Starts the reduction of a group's gradients: one grouped allreduce
        per dtype (the library groups one dtype); sparse gradients (without
        sparse_as_dense) are reduced one by one, as without groups."""
        by_dtype = {}
        for p in group:
            self._submitted.add(p)
            if p.grad is None:
                p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
            if p.grad.is_sparse and not self._sparse_as_dense:
                self._handles[p] = self._allreduce_grad_async(p)
                continue
            grad = p.grad.to_dense() if p.grad.is_sparse else p.grad
            compressed, cctx = self._compression.compress(grad)
            by_dtype.setdefault(compressed.dtype, []).append((p, compressed, cctx))
        prescale, postscale = self._scales()
        base = f"DistributedOptimizer.group.{self._names[group[0]]}"
        for dt, members in by_dtype.items():
            name = base if len(by_dtype) == 1 else f"{base}.{str(dt).replace('torch.', '')}"
            handle = _t.grouped_allreduce_async_([m[1] for m in members], name=name,
                                                 op=self._op, prescale_factor=prescale,
                                                 postscale_factor=postscale,
                                                 process_set=self._process_set)
            self._handles[tuple(m[0] for m in members)] = (
                handle, [m[1] for m in members], [m[2] for m in members])

    def _scales(self):
        if self._op == Average and self._predivide != 1.0:
            return 1.0 / self._predivide, self._predivide
        return 1.0, 1.0

    # -- hooks ------------------------------------------------------------------------
    def _register_hooks(self):
        for p in self._requires_update:
            self._passes[p] = 0
            if hasattr(p, "register_post_accumulate_grad_hook"):
                self._hooks.append(p.register_post_accumulate_grad_hook(self._make_hook()))
            else:  # torch < 2.1: hook the gradient accumulator node
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                hook = self._make_hook()
                self._hooks.append(acc.register_hook(lambda *_, p=p, h=hook: h(p)))
                self._hooks.append(acc)  # keep the node alive

    def _make_hook(self):
        def hook(p):
            if p in self._submitted or self._passes[p] >= self.backward_passes_per_step:
                raise AssertionError(
                    "hvd.torch.DistributedOptimizer: gradients were computed more than "
                    f"backward_passes_per_step ({self.backward_passes_per_step}) times before "
                    "step() or synchronize(); raise backward_passes_per_step to accumulate")
            self._passes[p] += 1
            if self._passes[p] == self.backward_passes_per_step:
                group = self._group_of.get(p)
                if group is None:
                    self._submitted.add(p)
                    self._handles[p] = self._allreduce_grad_async(p)
                else:
                    self._ready[group] += 1
                    if self._ready[group] == len(group):
                        self._grouped_allreduce_grads_async(group)
        return hook

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # Unused in this step's graph: still take part, with zeros, so every
            # rank submits the same names.
            p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
        grad = p.grad
        if grad.is_sparse:
            if not self._sparse_as_dense:
                # As Horovod: indices and values allgathered, no compression.
                return sparse_allreduce_async(
                    grad, name=f"DistributedOptimizer.{self._names[p]}", op=self._op,
                    process_set=self._process_set), None, None
            grad = grad.to_dense()  # allreduced densely, made sparse again in synchronize()
        compressed, cctx = self._compression.compress(grad)
        prescale, postscale = self._scales()
        handle = _t.allreduce_async_(compressed, name=f"DistributedOptimizer.{self._names[p]}",
                                     op=self._op, prescale_factor=prescale,
                                     postscale_factor=postscale, process_set=self._process_set)
        return handle, compressed, cctx

    # -- public -----------------------------------------------------------------------
    def synchronize(self):
        """Waits for every gradient's allreduce (starting those whose hook did
        not fire, e.g. parameters unused this step) and writes the results to .grad."""
        for p in self._requires_update:
            if p not in self._submitted:
                group = self._group_of.get(p)
                if group is None:
                    self._submitted.add(p)
                    self._handles[p] = self._allreduce_grad_async(p)
                else:
                    self._grouped_allreduce_grads_async(group)
        try:
            for p, (handle, compressed, cctx) in list(self._handles.items()):
                result = handle.wait()
                if isinstance(p, tuple):  # a grouped allreduce, in place in `compressed`
                    for gp, c, x in zip(p, compressed, cctx):
                        self._write_grad(gp, c, x)
                elif compressed is None:  # a sparse gradient, allgathered
                    with torch.no_grad():  # sparse tensors have no set_/copy_ from sparse
                        p.grad.zero_().add_(result)
                else:
                    self._write_grad(p, compressed, cctx)
        finally:
            self._clear_step()
        self._synchronized = True

    def _clear_step(self):
        """Forgets the step's handles and counters: the next backward pass
        starts afresh."""
        self._handles.clear()
        self._submitted.clear()
        for p in self._passes:
            self._passes[p] = 0
        for g in self._ready:
            self._ready[g] = 0

    def _hvd_drop_pending(self):
        """Forgets the reductions of a step that failed (an elastic reset
        follows): their handles are dropped (they complete with the reset's
        error), and the next backward pass starts afresh."""
        self._clear_step()
        self._synchronized = False

    def _write_grad(self, p, compressed, cctx):
        """Puts a densely allreduced gradient (compressed, in place) into p.grad."""
        if p.grad.is_sparse:  # sparse_as_dense: made sparse again
            reduced = self._compression.decompress(compressed, cctx).to_sparse(
                p.grad.sparse_dim())
            with torch.no_grad():  # sparse tensors have no set_/copy_ from sparse
                p.grad.zero_().add_(reduced)
        elif compressed is not p.grad:
            with torch.no_grad():
                p.grad.copy_(self._compression.decompress(compressed, cctx))

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For `optimizer.synchronize(); (clip gradients); with optimizer.skip_synchronize():
        optimizer.step()`."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("hvd.torch.DistributedOptimizer: step() after synchronize() "
                              "without skip_synchronize(): gradients are allreduced twice",
                              stacklevel=2)
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError(
                "hvd.torch.DistributedOptimizer: zero_grad() was called after backward() but "
                "before step() or synchronize(): the pending allreduces would be lost")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


class _DistributedAdasumOptimizer:
    """Methods mixed into a subclass of the wrapped optimizer's class for
    op=Adasum, with Horovod's semantics: the parameter UPDATE is reduced, not
    the gradient. When a parameter's gradient is ready (after
    backward_passes_per_step passes), this rank applies the wrapped
    optimizer's step to that parameter alone (its state, e.g. momentum, stays
    local), takes delta = new - old, restores old, and starts an in-place
    allreduce of delta with op Adasum (compressed if asked); step() waits for
    every delta and sets param = old + adasum(delta) on every rank (the same
    bits everywhere). synchronize() only starts the reductions not started
    yet; step() does the rest."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step,
                 process_set=global_process_set):
        super(self.__class__, self).__init__(params)
        self._process_set = process_set
        self._compression = compression
        if backward_passes_per_step < 1:
            raise ValueError("hvd.torch.DistributedOptimizer: backward_passes_per_step must be "
                             ">= 1")
        self.backward_passes_per_step = int(backward_passes_per_step)
        all_params = [p for g in self.param_groups for p in g["params"]]
        if named_parameters is not None:
            by_id = {id(p): n for n, p in list(named_parameters)}
            missing = [p for p in all_params if id(p) not in by_id]
            if missing or len(set(by_id.values())) != len(by_id):
                raise ValueError("hvd.torch.DistributedOptimizer: named_parameters must name "
                                 "every parameter of the optimizer once")
            self._names = {p: by_id[id(p)] for p in all_params}
        else:
            self._names = {p: f"noname.{i}" for i, p in enumerate(all_params)}
        self._requires_update = [p for p in all_params if p.requires_grad]
        self._starts = {p: torch.zeros_like(p, memory_format=torch.contiguous_format)
                        for p in self._requires_update}
        self._handles = {}  # param -> (Handle, compressed delta, ctx)
        self._passes = {p: 0 for p in self._requires_update}
        self._hooks = []
        for p in self._requires_update:
            if hasattr(p, "register_post_accumulate_grad_hook"):
                self._hooks.append(p.register_post_accumulate_grad_hook(self._adasum_hook))
            else:  # torch < 2.1: hook the gradient accumulator node
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._hooks.append(acc.register_hook(lambda *_, p=p: self._adasum_hook(p)))
                self._hooks.append(acc)

    def _adasum_hook(self, p):
        if p in self._handles or self._passes[p] >= self.backward_passes_per_step:
            raise AssertionError(
                "hvd.torch.DistributedOptimizer: gradients were computed more than "
                f"backward_passes_per_step ({self.backward_passes_per_step}) times before "
                "step(); raise backward_passes_per_step to accumulate")
        self._passes[p] += 1
        if self._passes[p] == self.backward_passes_per_step:
            self._handles[p] = self._adasum_delta_async(p)

    def _adasum_delta_async(self, p):
        start = self._starts[p]
        with torch.no_grad():
            start.copy_(p)
        # The wrapped optimizer's step on p alone (a parameter without a
        # gradient is left as it is: its delta is zero).
        saved = [g["params"] for g in self.param_groups]
        try:
            for g in self.param_groups:
                g["params"] = [p] if any(q is p for q in g["params"]) else []
            super(self.__class__, self).step()
        finally:
            for g, ps in zip(self.param_groups, saved):
                g["params"] = ps
        with torch.no_grad():
            delta = (p - start).contiguous()
            p.copy_(start)
        compressed, cctx = self._compression.compress(delta)
        handle = _t.allreduce_async_(compressed, name=f"DistributedOptimizer.{self._names[p]}",
                                     op=Adasum, process_set=self._process_set)
        return handle, compressed, cctx

    def synchronize(self):
        """Starts the reduction of every parameter whose hook did not fire
        (unused this step); step() waits and applies."""
        for p in self._requires_update:
            if p not in self._handles:
                self._handles[p] = self._adasum_delta_async(p)

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Accepted for Horovod compatibility: with Adasum step() always applies
        the reduced updates."""
        yield

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        self.synchronize()
        try:
            for p, (handle, compressed, cctx) in list(self._handles.items()):
                handle.wait()
                delta = self._compression.decompress(compressed, cctx)
                with torch.no_grad():
                    p.copy_(self._starts[p] + delta.to(p.dtype))
        finally:
            self._handles.clear()
            for p in self._passes:
                self._passes[p] = 0
        return loss

    def _hvd_drop_pending(self):
        """Forgets the reductions of a step that failed (an elastic reset follows)."""
        self._handles.clear()
        for p in self._passes:
            self._passes[p] = 0

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError(
                "hvd.torch.DistributedOptimizer: zero_grad() was called after backward() but "
                "before step(): the pending Adasum reductions would be lost")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def _check_groups(groups):
    """Horovod's checks of DistributedOptimizer's groups: a positive int, or a
    list of lists of tensors in which no tensor appears twice."""
    if isinstance(groups, list):
        seen = set()
        for g in groups:
            for p in g:
                if not isinstance(p, torch.Tensor):
                    raise ValueError("hvd.torch.DistributedOptimizer: groups must consist of "
                                     f"torch.Tensor, got a {type(p).__name__}")
                if id(p) in seen:
                    raise ValueError("hvd.torch.DistributedOptimizer: a parameter can only "
                                     "appear once in groups")
                seen.add(id(p))
        return groups
    if isinstance(groups, bool) or not isinstance(groups, int) or groups <= 0:
        raise ValueError("hvd.torch.DistributedOptimizer: groups should be a positive integer "
                         f"or a list of lists of torch.Tensor, got {groups!r}")
    return groups


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps a torch optimizer so that step() applies the gradients averaged
    (op) over all ranks. Each gradient's allreduce starts from a hook as soon
    as autograd has accumulated it (after `backward_passes_per_step` backward
    passes), so communication overlaps the rest of backward; step() waits.

    Sparse gradients (nn.Embedding(sparse=True)) are reduced as Horovod does:
    their indices and values are allgathered (sparse_allreduce_async), or, with
    sparse_as_dense=True, they are allreduced as dense tensors (with
    compression and gradient_predivide_factor) and made sparse again.

    groups (Horovod's): gradients reduced together as grouped allreduces,
    each started once every member's gradient is ready. An int n splits the
    parameters that need gradients (in rank 0's order of names) into n
    groups of nearly equal length (a collective when the optimizer is built:
    rank 0's order is broadcast); a list of lists of parameters makes each
    inner list a group and every other parameter a group of its own. A group
    is named "DistributedOptimizer.group.<name of its first parameter>" (one
    grouped allreduce per dtype). num_groups=n is Horovod's deprecated
    spelling of groups=n (DeprecationWarning).

    op=hvd.Adasum (Horovod's): the parameter update is reduced instead of the
    gradient: each rank applies its own step to a parameter as soon as its
    gradient is ready, the deltas (new - old) are combined with Adasum, and
    step() sets param = old + adasum(deltas) on every rank. No groups, no
    gradient_predivide_factor; the wrapped optimizer's state stays local.

    process_set (Horovod's): gradients are reduced (averaged) among the set's
    ranks only, e.g. to train one model per set; every rank of the set must
    wrap the same model, and a rank outside the set cannot build one
    (ValueError).

    The result is an instance of a subclass of optimizer's class built from
    its param_groups (wrap before training: existing state is carried over)."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError("hvd.torch.DistributedOptimizer: expected a torch.optim.Optimizer, got "
                        f"{type(optimizer).__name__}")
    _t._target(process_set)  # a registered set this rank is in
    if num_groups != 0:
        warnings.warn("hvd.torch.DistributedOptimizer: num_groups has been replaced by groups",
                      DeprecationWarning, stacklevel=2)
        if groups is None:
            groups = num_groups
    if _ops.check_op(op) == Adasum:
        if gradient_predivide_factor != 1.0:
            raise ValueError("hvd.torch.DistributedOptimizer: gradient_predivide_factor needs "
                             "op=Average")
        if groups is not None:
            raise ValueError("hvd.torch.DistributedOptimizer: groups are not supported with "
                             "op=Adasum (each parameter's update is combined on its own)")
        methods = {k: v for k, v in _DistributedAdasumOptimizer.__dict__.items()
                   if k not in ("__dict__", "__weakref__")}
        methods["_hvd_distributed"] = True
        cls = type(optimizer.__class__.__name__, (optimizer.__class__,), methods)
        opt = cls(optimizer.param_groups, named_parameters, compression,
                  backward_passes_per_step, process_set)
        opt.state.update(optimizer.state)
        _distributed_optimizers.add(opt)
        return opt
    if groups is not None:
        _check_groups(groups)
    methods = {k: v for k, v in _DistributedOptimizer.__dict__.items()
               if k not in ("__dict__", "__weakref__")}
    methods["_hvd_distributed"] = True
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), methods)
    opt = cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
              op, gradient_predivide_factor, sparse_as_dense, groups, process_set)
    opt.state.update(optimizer.state)
    _distributed_optimizers.add(opt)
    return opt


# Every DistributedOptimizer, for hvd.elastic.run: after a failed step their
# pending reductions are dropped before the state is restored.
_distributed_optimizers = weakref.WeakSet()


def _drop_pending_reductions():
    for opt in list(_distributed_optimizers):
        opt._hvd_drop_pending()


# ---------------------------------------------------------------------------
# SyncBatchNorm.
# ---------------------------------------------------------------------------


class _SyncBatchNormFn(torch.autograd.Function):
    """Batch normalization with the statistics of the whole global batch.

    Forward: each rank's (count, mean, biased variance) per channel are
    allgathered (float64) and combined exactly as the statistics of the
    concatenated batch (ranks may have different batch sizes, also zero).
    Backward: with xhat = (x - mean) * invstd, the input gradient of batch
    norm is invstd * weight * (dy - mean(dy) - xhat * mean(dy * xhat)), the
    means over the global batch: the two per-channel sums are allreduced
    (Sum). The weight and bias gradients are this rank's own sums (the
    optimizer reduces them over ranks, as for any parameter)."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, name, ps):
        c = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        shape = [1, c] + [1] * (x.dim() - 2)
        n = x.numel() // c if c else 0
        x64 = x.detach().to(torch.float64)
        if n > 0:
            mean_l, var_l = x64.mean(dims), x64.var(dims, unbiased=False)
        else:
            mean_l = var_l = torch.zeros(c, dtype=torch.float64)
        local = torch.cat([torch.tensor([float(n)], dtype=torch.float64), mean_l, var_l])
        every = _t.allgather(local.unsqueeze(0), name=name, process_set=ps)  # (size, 1 + 2c)
        counts, means, variances = every[:, :1], every[:, 1:c + 1], every[:, c + 1:]
        total = float(counts.sum())
        if total == 0:
            raise ValueError("hvd.torch.SyncBatchNorm: the global batch is empty")
        mean = (counts * means).sum(0) / total
        var = (counts * (variances + (means - mean) ** 2)).sum(0) / total
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1.0 - momentum).add_(mean.to(running_mean.dtype),
                                                       alpha=momentum)
                unbiased = var * (total / (total - 1)) if total > 1 else var
                running_var.mul_(1.0 - momentum).add_(unbiased.to(running_var.dtype),
                                                      alpha=momentum)
        invstd = (var + eps).rsqrt().to(x.dtype)
        xhat = (x - mean.to(x.dtype).view(shape)) * invstd.view(shape)
        y = xhat
        if weight is not None:
            y = y * weight.view(shape)
        if bias is not None:
            y = y + bias.view(shape)
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.name, ctx.total, ctx.dims, ctx.shape, ctx.ps = name, total, dims, shape, ps
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    def backward(ctx, dy):
        xhat, invstd, weight = ctx.saved_tensors
        dims, shape, c = ctx.dims, ctx.shape, xhat.shape[1]
        dy = dy.contiguous()
        grad_x = grad_w = grad_b = None
        sum_dy = dy.sum(dims)
        sum_dy_xhat = (dy * xhat).sum(dims)
        if ctx.needs_input_grad[0]:
            local = torch.cat([sum_dy, sum_dy_xhat]).to(torch.float64)
            tot = _t.allreduce(local, name=f"{ctx.name}.grad", op=Sum,
                               process_set=ctx.ps) / ctx.total
            mean_dy = tot[:c].to(dy.dtype).view(shape)
            mean_dy_xhat = tot[c:].to(dy.dtype).view(shape)
            scale = invstd if weight is None else invstd * weight
            grad_x = (dy - mean_dy - xhat * mean_dy_xhat) * scale.view(shape)
        if weight is not None and ctx.needs_input_grad[1]:
            grad_w = sum_dy_xhat
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = sum_dy
        return grad_x, grad_w, grad_b, None, None, None, None, None, None


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    """Horovod's SyncBatchNorm: batch normalization whose training-time
    statistics (mean, variance) are those of the batch of all ranks together,
    with the matching gradient; any input of shape (N, C, ...), and ranks
    may have different N. As in Horovod, in eval mode or on a world of one it
    is plain batch normalization. Every rank must run each forward (an
    allgather) and each backward (an allreduce).

    process_set: the statistics are those of the set's ranks only (e.g. one
    model per set); only its members may run the layer in training (a set
    of one rank is plain batch normalization)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set, device=None,
                 dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats,
                         device=device, dtype=dtype)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"hvd.torch.SyncBatchNorm: expected an input of at least 2 "
                             f"dimensions (N, C, ...), got {input.dim()}")

    def forward(self, input):
        self._check_input_dim(input)
        ps = self.process_set
        if not self.training or _set_size(ps) == 1:
            return super().forward(input)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                momentum = 1.0 / float(self.num_batches_tracked)
        track = self.track_running_stats and self.running_mean is not None
        return _SyncBatchNormFn.apply(
            input, self.weight, self.bias, self.running_mean if track else None,
            self.running_var if track else None, self.eps, momentum,
            _name("sync_batch_norm", None, ps), ps)


# ---------------------------------------------------------------------------
# Broadcasting model and optimizer state.
# ---------------------------------------------------------------------------


def broadcast_parameters(params, root_rank=0, prefix="broadcast_parameters",
                         process_set=global_process_set):
    """Overwrites every tensor in params with root's, in place.
    params: a state_dict (name -> tensor) or (name, tensor) pairs (named_parameters()).
    process_set: within a set only (root_rank is then one of its ranks, as
    hvd.rank() numbers it)."""
    if isinstance(params, dict):
        items = sorted(params.items())
    else:
        items = list(params)
    handles = []
    for name, p in items:
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"hvd.torch.broadcast_parameters: {name!r} is a "
                            f"{type(p).__name__}, not a tensor")
        handles.append(broadcast_async_(p, root_rank, name=f"{prefix}.{name}",
                                        process_set=process_set))
    for h in handles:
        h.wait()


def _initialize_optimizer_state(optimizer):
    """As Horovod does before broadcasting: an optimizer that has not stepped
    yet (no per-parameter state, e.g. no momentum buffers) takes one step with
    zero gradients, so that its state exists. Unlike Horovod, the parameters
    and gradients are restored afterwards (a zero-gradient step still moves
    parameters under weight decay). A DistributedOptimizer steps its wrapped
    class (no allreduce: the other ranks need not take part). Optimizers whose
    step needs a closure (LBFGS), and any whose zero-gradient step fails
    (SparseAdam refuses dense gradients), are left empty."""
    if len(optimizer.state) > 0 or isinstance(optimizer, torch.optim.LBFGS):
        return
    saved = []
    with torch.no_grad():
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    saved.append((p, p.detach().clone(), p.grad))
                    p.grad = torch.zeros_like(p)
    step = optimizer.step
    if getattr(optimizer, "_hvd_distributed", False):
        step = super(optimizer.__class__, optimizer).step
    try:
        step()
    except RuntimeError:
        optimizer.state.clear()
    finally:
        with torch.no_grad():
            for p, value, grad in saved:
                p.copy_(value)
                p.grad = grad


def broadcast_optimizer_state(optimizer, root_rank=0, name="broadcast_optimizer_state",
                              process_set=global_process_set):
    """Makes every rank's optimizer state (per-parameter state and
    hyperparameters such as lr) equal to root's. As in Horovod, an optimizer
    that has not stepped yet first gets its state initialized (one step with
    zero gradients; hvd restores the parameters and gradients after it), so
    that e.g. momentum buffers exist on every rank even when root has not
    stepped either. process_set: within a set only (root_rank is then one of
    its ranks, as hvd.rank() numbers it)."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError("hvd.torch.broadcast_optimizer_state: expected a torch.optim.Optimizer")
    _t._target(process_set)  # a registered set this rank is in, before any local work
    _initialize_optimizer_state(optimizer)
    state = optimizer.state_dict() if rank() == root_rank else None
    state = broadcast_object(state, root_rank, name=name, process_set=process_set)
    if rank() != root_rank:
        optimizer.load_state_dict(state)


# Horovod's hvd.torch.elastic (run, TorchState, ElasticSampler, ...), also
# importable as a module (import hvd.torch.elastic).
from .. import elastic as _hvd_elastic  # noqa: E402
from . import elastic  # noqa: E402

_hvd_elastic._register_reset_hook(_drop_pending_reductions)
