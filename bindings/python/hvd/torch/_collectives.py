"""The collectives on torch tensors (hvd.torch re-exports them; Horovod's
horovod.torch.mpi_ops names are in mpi_ops.py): the dtype table and the
adapter that hands torch tensors to the library, the synchronous ops as
autograd functions with Horovod's gradients, the asynchronous ones and their
handles, and sparse allreduce."""

from __future__ import annotations

import numpy as np
import torch

from .. import _c_api as C
from .. import _ops
from .._api import DEFAULT as _DEFAULT
from .._api import Collectives as _Collectives
from .. import (
    Average,
    Sum,
    global_process_set,
    rank,
)
from ._compression import Compression

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
        if x.is_cuda:
            # The library stages it through host memory (or hands it to a
            # transport that takes CUDA memory), ordered on the current
            # stream of the tensor's device.
            device = x.device.index if x.device.index is not None else torch.cuda.current_device()
            stream = torch.cuda.current_stream(device).cuda_stream
        elif not x.is_cpu:
            raise C.UnsupportedError(
                C.HVD_ERR_UNSUPPORTED,
                f"hvd.torch: {what} is on {x.device}; hvd moves host memory and CUDA memory "
                "only: pass tensor.cpu() and copy the result back")
        if x.layout is not torch.strided:
            raise TypeError(f"hvd.torch: {what} has layout {x.layout}; only dense (strided) "
                            "tensors are supported (use .to_dense())")
        code = _TO_HVD.get(x.dtype)
        if code is None:
            names = ", ".join(str(d).replace("torch.", "") for d in _TO_HVD)
            raise TypeError(f"hvd.torch: dtype {x.dtype} is not supported; supported: {names}")
        if x.is_contiguous():
            # Its memory as it is (no detached view: the library reads and
            # writes the memory, autograd never sees it).
            t, copied = x, False
        else:
            _ops.warn_copy(what, f"not contiguous (strides {tuple(x.stride())}, shape "
                                 f"{tuple(x.shape)})")
            t, copied = x.detach().contiguous(), True
        nbytes = t.nbytes
        return _ops.Buf(t.data_ptr() if nbytes else 0, code, t.shape, t, x, copied, nbytes,
                        device, stream)

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
        out = raw if mem.shaped else raw.view(dt).reshape(shape)
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
