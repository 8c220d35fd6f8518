"""A Horovod torch script's use of DistributedOptimizer(groups=, num_groups=),
hvd.SyncBatchNorm and hvd.is_homogeneous() on 2 ranks (run by
test_horovod_torch_extras.py under hvdrun).

Optimizer checks are exact: integer weights, inputs and loss weights make
every gradient an integer, compared with torch.equal. SyncBatchNorm is
compared with torch's BatchNorm on the concatenated batch of both ranks
(rank r holds 3 + 2r rows): float32 within atol 2e-5 / rtol 1e-5, float64
within 1e-10.

`python horovod_torch_extras.py hetero` instead runs only is_homogeneous on
3 ranks started by the test with a two-host topology (2 ranks + 1 rank).
"""

import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import hvd.torch as hvd  # noqa: E402  (the changed import line of a Horovod script)

CHECKS = ["groups_int", "groups_int_uneven", "num_groups_deprecated", "groups_list",
          "groups_unused_and_passes", "groups_errors", "sync_batch_norm_float32",
          "sync_batch_norm_float64", "sync_batch_norm_2d", "sync_batch_norm_eval_and_single",
          "is_homogeneous", "average_helpers"]


def eq(got, want, what=""):
    assert got.dtype == want.dtype and got.shape == want.shape, \
        f"{what}: {got.dtype} {tuple(got.shape)} vs {want.dtype} {tuple(want.shape)}"
    assert torch.equal(got, want), f"{what}:\n got {got}\nwant {want}"


def close(got, want, atol, rtol, what=""):
    assert got.shape == want.shape, f"{what}: {tuple(got.shape)} vs {tuple(want.shape)}"
    assert torch.allclose(got, want, atol=atol, rtol=rtol), \
        f"{what}: max |diff| {(got - want).abs().max().item()}\n got {got}\nwant {want}"


class Recorder:
    """Wraps hvd.torch's grouped and single allreduce entry points to record
    what the optimizer submits: (kind, name, number of tensors)."""

    def __init__(self):
        self.calls = []
        self._orig = {}

    def __enter__(self):
        for attr, kind in (("grouped_allreduce_async_", "grouped"),
                           ("allreduce_async_", "single")):
            orig = getattr(hvd._t, attr)
            self._orig[attr] = orig

            def wrapper(tensors, *a, _orig=orig, _kind=kind, **kw):
                n = len(tensors) if _kind == "grouped" else 1
                self.calls.append((_kind, kw.get("name"), n))
                return _orig(tensors, *a, **kw)

            setattr(hvd._t, attr, wrapper)
        return self

    def __exit__(self, *exc):
        for attr, orig in self._orig.items():
            setattr(hvd._t, attr, orig)


def make_model(extra_unused=False):
    """Two bias-carrying linear layers with small integer weights (and
    optionally a third layer that forward does not use)."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)]
    if extra_unused:
        layers.append(torch.nn.Linear(2, 2))
    model = torch.nn.Sequential(*layers)
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(torch.arange(p.numel(), dtype=torch.float32).reshape(p.shape) % 3 - 1 + i)
    return model


def forward_loss(model, k, unused=False):
    """Rank k's loss: integer inputs and loss weights, so gradients are integers."""
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3) + k
    h = model[1](model[0](x))
    return (h * (k + 1)).sum()


def local_grads(k, extra_unused=False):
    model = make_model(extra_unused)
    forward_loss(model, k).backward()
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p)
            for p in model.parameters()]


def make_checks(size, rank):
    n, r = size, rank
    checks = {}

    def check(fn):
        checks[fn.__name__] = fn
        return fn

    def averaged(extra_unused=False, passes=1):
        per_rank = [local_grads(k, extra_unused) for k in range(n)]
        return [sum(g[i] for g in per_rank) * passes / n for i in range(len(per_rank[0]))]

    def run_groups(groups=None, num_groups=0, extra_unused=False, passes=1, tag=""):
        model = make_model(extra_unused)
        names = [nm for nm, _ in model.named_parameters()]
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                       named_parameters=model.named_parameters(),
                                       groups=groups(model) if callable(groups) else groups,
                                       num_groups=num_groups, backward_passes_per_step=passes)
        formed = sorted(tuple(names.index(next(nm for nm, q in model.named_parameters()
                                                   if q is p)) for p in g)
                        for g in opt._groups)
        with Recorder() as rec:
            for _ in range(passes):
                forward_loss(model, r).backward()
            opt.step()
        want = averaged(extra_unused, passes)
        for i, p in enumerate(model.parameters()):
            eq(p.grad, want[i], f"{tag} Average gradient of {names[i]}")
        return formed, rec.calls, names

    @check
    def groups_int():
        formed, calls, names = run_groups(groups=2, tag="groups=2")
        # 4 parameters in 2 groups of 2, in order of names (rank 0's order)
        assert formed == [(0, 1), (2, 3)], formed
        assert sorted(calls) == sorted([
            ("grouped", f"DistributedOptimizer.group.{names[0]}", 2),
            ("grouped", f"DistributedOptimizer.group.{names[2]}", 2)]), calls

    @check
    def groups_int_uneven():
        formed, calls, names = run_groups(groups=3, tag="groups=3")
        assert formed == [(0, 1), (2,), (3,)], formed  # the first groups take the remainder
        assert sorted(c[2] for c in calls) == [1, 1, 2] and \
            all(c[0] == "grouped" for c in calls), calls

    @check
    def num_groups_deprecated():
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            formed, calls, _ = run_groups(num_groups=2, tag="num_groups=2")
        assert any(issubclass(x.category, DeprecationWarning) and "groups" in str(x.message)
                   for x in w), [str(x.message) for x in w]
        assert formed == [(0, 1), (2, 3)], formed

    @check
    def groups_list():
        # weight of layer 0 with the bias of layer 1; the others alone
        formed, calls, names = run_groups(
            groups=lambda m: [[m[0].weight, m[1].bias]], tag="groups=[[w0, b1]]")
        assert formed == [(0, 3), (1,), (2,)], formed
        assert sorted(c[2] for c in calls) == [1, 1, 2], calls
        assert ("grouped", f"DistributedOptimizer.group.{names[0]}", 2) in calls, calls

    @check
    def groups_unused_and_passes():
        # A group with a parameter that gets no gradient (layer 2 is unused):
        # the group is reduced in step() with zeros for it; two backward passes
        # accumulate before the reduction.
        formed, calls, names = run_groups(
            groups=lambda m: [[m[1].weight, m[2].weight], [m[2].bias]], extra_unused=True,
            passes=2, tag="unused+passes")
        assert formed == [(0,), (1,), (2, 4), (3,), (5,)], formed
        assert len(calls) == 5 and all(c[0] == "grouped" for c in calls), calls

    @check
    def groups_errors():
        model = make_model()
        params = list(model.parameters())

        def refused(groups, text):
            try:
                hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters(),
                                         groups=groups)
            except ValueError as e:
                assert text in str(e), str(e)
            else:
                raise AssertionError(f"groups={groups!r} was accepted")

        refused(0, "positive integer or a list of lists")
        refused(-2, "positive integer or a list of lists")
        refused([[params[0], params[0]]], "only appear once")
        refused([[params[0]], [params[1], params[0]]], "only appear once")
        refused([[params[0], 1.5]], "must consist of torch.Tensor")

    # -- SyncBatchNorm -------------------------------------------------------------
    def batch(k, dtype, shape, step=0):
        g = torch.Generator().manual_seed(100 + k + 10 * step)
        rows = 3 + 2 * k
        return torch.randn((rows,) + shape, generator=g, dtype=dtype) * (k + 1) + k

    def sync_bn_against_reference(dtype, shape, ref_cls, atol, rtol):
        c = shape[0]
        g = torch.Generator().manual_seed(7)
        weight = torch.rand(c, generator=g, dtype=dtype) + 0.5
        bias = torch.rand(c, generator=g, dtype=dtype) - 0.5
        bn = hvd.SyncBatchNorm(c, momentum=0.3).to(dtype)
        ref = ref_cls(c, momentum=0.3).to(dtype)
        for m in (bn, ref):
            with torch.no_grad():
                m.weight.copy_(weight)
                m.bias.copy_(bias)
        offset = sum(3 + 2 * k for k in range(r))
        for step in range(2):
            xs = [batch(k, dtype, shape, step) for k in range(n)]
            full = torch.cat(xs).requires_grad_()
            coef = torch.randn(full.shape, generator=torch.Generator().manual_seed(step),
                               dtype=dtype)
            y_ref = ref(full)
            (y_ref * coef).sum().backward()
            x = xs[r].clone().requires_grad_()
            y = bn(x)
            rows = slice(offset, offset + x.shape[0])
            close(y.detach(), y_ref.detach()[rows], atol, rtol, f"step {step} forward")
            (y * coef[rows]).sum().backward()
            close(x.grad, full.grad[rows], atol, rtol, f"step {step} input gradient")
            # the parameter gradients summed over ranks are the reference's
            for got, want, what in ((bn.weight.grad, ref.weight.grad, "weight"),
                                    (bn.bias.grad, ref.bias.grad, "bias")):
                total = hvd.allreduce(got, op=hvd.Sum, name=f"sbn.{dtype}.{step}.{what}")
                close(total, want, atol * 10, rtol, f"step {step} {what} gradient")
            close(bn.running_mean, ref.running_mean, atol, rtol, f"step {step} running_mean")
            close(bn.running_var, ref.running_var, atol, rtol, f"step {step} running_var")
            for m in (bn, ref):
                m.zero_grad()
        assert int(bn.num_batches_tracked) == 2
        return bn, ref

    @check
    def sync_batch_norm_float32():
        sync_bn_against_reference(torch.float32, (4, 3), torch.nn.BatchNorm1d, 2e-5, 1e-5)

    @check
    def sync_batch_norm_float64():
        sync_bn_against_reference(torch.float64, (4, 3), torch.nn.BatchNorm1d, 1e-10, 1e-10)

    @check
    def sync_batch_norm_2d():
        sync_bn_against_reference(torch.float64, (3, 2, 2), torch.nn.BatchNorm2d, 1e-10, 1e-10)

    @check
    def sync_batch_norm_eval_and_single():
        bn, ref = sync_bn_against_reference(torch.float64, (2,), torch.nn.BatchNorm1d,
                                            1e-10, 1e-10)
        # eval: the running statistics, no communication (only this rank runs it)
        bn.eval()
        ref.eval()
        x = batch(r, torch.float64, (2,))
        close(bn(x), ref(x), 1e-10, 1e-10, "eval forward")
        try:
            bn(torch.zeros(3))
        except ValueError as e:
            assert "at least 2" in str(e), str(e)
        else:
            raise AssertionError("a 1-d input was accepted")

    @check
    def is_homogeneous():
        assert hvd.local_size() == n and hvd.cross_size() == 1
        assert hvd.is_homogeneous() is True
        if r == 0:  # remembered: no collective the second time
            assert hvd.is_homogeneous() is True

    @check
    def average_helpers():
        # Horovod's helper: op from op and the deprecated average flag.
        import warnings
        from hvd import _ops
        import hvd.torch.mpi_ops as mpi_ops
        f = hvd.handle_average_backwards_compatibility
        assert f is _ops.handle_average_backwards_compatibility  # one helper, shared with TF
        assert mpi_ops.handle_average_backwards_compatibility is f
        assert f(None, None) == hvd.Average and f(hvd.Sum, None) == hvd.Sum
        assert f(hvd.Max, None) == hvd.Max
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert f(None, True) == hvd.Average and f(None, False) == hvd.Sum
        assert [x.category for x in w] == [DeprecationWarning] * 2, w
        try:
            f(hvd.Sum, True)
        except ValueError as e:
            assert "supersedes average" in str(e), e
        else:
            raise AssertionError("op and average together did not raise")
        # As a Horovod op wrapper uses it: the op it gives reduces as such.
        x = torch.arange(4, dtype=torch.float64) + 10 * r
        total = sum(torch.arange(4, dtype=torch.float64) + 10 * k for k in range(n))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            op = f(None, False)
        eq(hvd.allreduce(x, op=op, name="avg_helper.sum"), total, "sum")
        eq(hvd.allreduce(x, op=f(None, None), name="avg_helper.avg"), total / n, "average")

    assert list(checks) == CHECKS, list(checks)
    return list(checks.items())


def hetero():
    """3 ranks as if on two hosts: host A runs ranks 0 and 1, host B rank 2."""
    from common import write
    r = int(os.environ["HVD_RANK"])
    local_rank, local_size = [(0, 2), (1, 2), (0, 1)][r]
    cross_rank, cross_size = [(0, 2), (0, 1), (1, 2)][r]
    hvd.init(local_rank=local_rank, local_size=local_size, cross_rank=cross_rank,
             cross_size=cross_size)
    got = (hvd.local_size(), hvd.cross_size(), hvd.is_homogeneous())
    write(r, {"topology": got[:2], "homogeneous": got[2]})
    hvd.shutdown()


def main():
    from common import run_checks
    torch.set_num_threads(1)
    if sys.argv[1:] == ["hetero"]:
        return hetero()
    hvd.init()
    run_checks(make_checks(hvd.size(), hvd.rank()), hvd.rank())
    hvd.shutdown()


if __name__ == "__main__":
    main()
