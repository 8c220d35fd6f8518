"""hvd.torch.sync_batch_norm: SyncBatchNorm (Horovod's
horovod.torch.sync_batch_norm), batch normalization with the statistics of
the global batch."""

from __future__ import annotations

import torch

from .. import Sum, global_process_set
from ._collectives import _name, _set_size, _t

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


__all__ = ["SyncBatchNorm"]
