"""hvd.torch on N ranks: ops x dtypes, and DistributedOptimizer against a
single-process reference computed locally on the union of the shards.

Tolerances (float32 training, 5 steps of SGD with momentum):
  - ranks agree bit for bit (every rank applies the same reduced gradient);
  - plain / predivide: |dist - reference| <= 1e-5 + 1e-4 * |reference|;
  - fp16 compression:  |dist - reference| <= 2e-3 + 1e-2 * |reference|.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
try:
    from common import Checks  # run as a script (this folder first on sys.path)
except ImportError:
    from workers.common import Checks  # imported by a test module

DTYPES = ["uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
          "float64", "bool"]
OPS = ["Sum", "Average", "Min", "Max", "Product"]
TOL = {"float16": 1e-3, "bfloat16": 1e-2, "float32": 1e-6, "float64": 1e-12}
STEPS = 5
TIGHT = dict(rtol=1e-4, atol=1e-5)
FP16 = dict(rtol=1e-2, atol=2e-3)


def tdtype(name):
    return getattr(torch, name)


def value(name, r, shape=(2, 3)):
    base = torch.arange(int(np.prod(shape))).reshape(shape)
    if name == "bool":
        return (base + r) % 2 == 0
    if name.startswith("uint"):
        return (base + r).to(tdtype(name))
    return (base - 2 + r).to(tdtype(name))


def expected(name, op, size, shape=(2, 3)):
    xs = torch.stack([value(name, r, shape).to(torch.float64) for r in range(size)])
    if name == "bool":
        b = xs != 0
        return b.any(0) if op in ("Sum", "Max") else b.all(0)
    s = xs.sum(0)
    e = {"Sum": s, "Average": (s / size) if name in TOL else torch.trunc(s / size),
         "Min": xs.min(0).values, "Max": xs.max(0).values, "Product": xs.prod(0)}[op]
    return e.to(tdtype(name))


def check_equal(got, exp, name):
    assert got.dtype == exp.dtype and got.shape == exp.shape, (got.dtype, got.shape, exp.shape)
    if name in TOL:
        torch.testing.assert_close(got.double(), exp.double(), rtol=TOL[name], atol=TOL[name])
    else:
        assert torch.equal(got, exp), (got, exp)


def check_names(size):
    names = []
    for d in DTYPES:
        names += [f"allreduce[{d}-{op}]" for op in OPS]
        names += [f"allgather[{d}]", f"broadcast_inplace[{d}]", f"alltoall[{d}]",
                  f"reducescatter[{d}]"]
    names += ["async_inplace_zero_copy", "grouped", "objects", "autograd_allreduce",
              "broadcast_parameters", "broadcast_optimizer_state", "optimizer_plain",
              "optimizer_fp16", "optimizer_predivide", "optimizer_backward_passes",
              "optimizer_skip_synchronize", "optimizer_zero_grad_guard"]
    return names


# -- the training problem -------------------------------------------------------
D_IN, D_OUT, PER_RANK = 6, 3, 8


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(D_IN, 16)
        self.fc2 = torch.nn.Linear(16, D_OUT)
        self.unused = torch.nn.Linear(2, 2)  # never in the graph: still synchronized

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def make_net(seed):
    torch.manual_seed(seed)
    return Net()


def data(size):
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(size * PER_RANK * 2, D_IN, generator=g)
    y = torch.randint(0, D_OUT, (size * PER_RANK * 2,), generator=g)
    return x, y


def shard(x, y, r, micro=0, passes=1):
    """Rank r's rows for one backward pass (micro-batch `micro` of `passes`)."""
    n = PER_RANK // passes
    lo = r * PER_RANK + micro * n
    return x[lo:lo + n], y[lo:lo + n]


def loss_fn(net, x, y):
    return torch.nn.functional.cross_entropy(net(x), y)


def reference(size, passes=1):
    """One process: each step, the gradient every rank would compute (summed over
    its micro-batches), averaged over ranks, applied by the same optimizer."""
    net = make_net(0)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x, y = data(size)
    for step in range(STEPS):
        xs = x.roll(-step * 3, 0)
        ys = y.roll(-step * 3, 0)
        grads = None
        for r in range(size):
            net.zero_grad()
            for m in range(passes):
                loss_fn(net, *shard(xs, ys, r, m, passes)).backward()
            g = [p.grad.clone() if p.grad is not None else None for p in net.parameters()]
            grads = g if grads is None else [a + b if a is not None else None
                                             for a, b in zip(grads, g)]
        for p, g in zip(net.parameters(), grads):
            p.grad = None if g is None else g / size
        opt.step()
    return net


def distributed(hvd, size, rank, compression=None, passes=1, predivide=1.0):
    net = make_net(rank)  # different on purpose: broadcast_parameters fixes it
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=net.named_parameters(),
                                   compression=compression or hvd.Compression.none,
                                   backward_passes_per_step=passes,
                                   gradient_predivide_factor=predivide)
    hvd.broadcast_parameters(net.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    x, y = data(size)
    for step in range(STEPS):
        xs = x.roll(-step * 3, 0)
        ys = y.roll(-step * 3, 0)
        opt.zero_grad()
        for m in range(passes):
            loss_fn(net, *shard(xs, ys, rank, m, passes)).backward()
        opt.step()
    return net


def assert_same_on_all_ranks(hvd, net, tag):
    for name, p in net.state_dict().items():
        everyone = hvd.allgather(p.detach().unsqueeze(0).contiguous(), name=f"{tag}.{name}")
        for r in range(everyone.shape[0]):
            assert torch.equal(everyone[r], everyone[0]), f"{name}: rank {r} differs from rank 0"


def assert_close_to(net, ref, tol):
    for (name, p), (_, q) in zip(net.state_dict().items(), ref.state_dict().items()):
        torch.testing.assert_close(p, q, **tol, msg=lambda m, n=name: f"{n}: {m}")


def make_checks(hvd, size, rank):
    checks = Checks()
    add = checks.add

    for d in DTYPES:
        for op in OPS:
            def ar(d=d, op=op):
                x = value(d, rank)
                if d == "bool" and op == "Average":
                    try:
                        hvd.allreduce(x, op=hvd.Average, name=f"t.ar.{d}.{op}")
                    except hvd.HvdError:
                        return
                    raise AssertionError("bool Average must fail")
                check_equal(hvd.allreduce(x, op=getattr(hvd, op), name=f"t.ar.{d}.{op}"),
                            expected(d, op, size), d)
            checks.append((f"allreduce[{d}-{op}]", ar))

        def ag(d=d):
            x = torch.stack([value(d, rank, (3,))] * (rank + 1))
            exp = torch.cat([torch.stack([value(d, r, (3,))] * (r + 1)) for r in range(size)])
            check_equal(hvd.allgather(x, name=f"t.ag.{d}"), exp, d)
        checks.append((f"allgather[{d}]", ag))

        def bci(d=d):
            x = value(d, rank)
            assert hvd.broadcast_(x, size - 1, name=f"t.bc.{d}") is x
            check_equal(x, value(d, size - 1), d)
        checks.append((f"broadcast_inplace[{d}]", bci))

        def a2a(d=d):
            x = torch.stack([value(d, rank * size + j, (2,)) for j in range(size)])
            exp = torch.stack([value(d, r * size + rank, (2,)) for r in range(size)])
            out, recv = hvd.alltoall(x, splits=[1] * size, name=f"t.a2a.{d}")
            check_equal(out, exp, d)
            assert recv.tolist() == [1] * size
        checks.append((f"alltoall[{d}]", a2a))

        def rs(d=d):
            x = value(d, rank, (2 * size, 2))
            op = "Max" if d == "bool" else "Sum"
            got = hvd.reducescatter(x, op=getattr(hvd, op), name=f"t.rs.{d}")
            check_equal(got, expected(d, op, size, (2 * size, 2))[2 * rank:2 * rank + 2], d)
        checks.append((f"reducescatter[{d}]", rs))

    @add("async_inplace_zero_copy")
    def _():
        x = torch.full((1000,), float(rank))
        ptr = x.data_ptr()
        h = hvd.allreduce_async_(x, op=hvd.Sum, name="t.async")
        assert hvd.synchronize(h) is x and x.data_ptr() == ptr
        assert torch.equal(x, torch.full((1000,), float(sum(range(size)))))

    @add("grouped")
    def _():
        xs = [torch.full((i + 2,), float(rank)) for i in range(3)]
        out = hvd.grouped_allreduce(xs, op=hvd.Max, name="t.group")
        assert all(torch.equal(o, torch.full((i + 2,), float(size - 1)))
                   for i, o in enumerate(out))

    @add("objects")
    def _():
        assert hvd.broadcast_object({"r": rank}, root_rank=0) == {"r": 0}
        assert hvd.allgather_object(rank) == list(range(size))

    @add("autograd_allreduce")
    def _():
        x = torch.full((3,), float(rank + 1), requires_grad=True)
        y = hvd.allreduce(x, op=hvd.Sum, name="t.autograd")
        (y * (rank + 1)).sum().backward()
        # d/dx_r sum_k (k+1) * sum_j x_j = sum_k (k+1)
        assert torch.equal(x.grad, torch.full((3,), float(sum(k + 1 for k in range(size)))))

    @add("broadcast_parameters")
    def _():
        net = make_net(rank)
        hvd.broadcast_parameters(net.state_dict(), root_rank=0)
        assert_close_to(net, make_net(0), dict(rtol=0, atol=0))
        net = make_net(rank + 10)
        hvd.broadcast_parameters(net.named_parameters(), root_rank=size - 1)
        assert_close_to(net, make_net(size - 1 + 10), dict(rtol=0, atol=0))

    @add("broadcast_optimizer_state")
    def _():
        net = make_net(0)
        opt = torch.optim.Adam(net.parameters(), lr=0.01 * (rank + 1))
        if rank == 0:  # only root has taken a step: state differs
            loss_fn(net, *data(1)).backward()
            opt.step()
        hvd.broadcast_parameters(net.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        assert opt.param_groups[0]["lr"] == 0.01
        st = opt.state_dict()["state"]
        assert len(st) > 0 and int(st[0]["step"]) == 1
        everyone = hvd.allgather(st[0]["exp_avg"].unsqueeze(0), name="t.optstate")
        assert all(torch.equal(everyone[r], everyone[0]) for r in range(size))

    @add("optimizer_plain")
    def _():
        net = distributed(hvd, size, rank)
        assert_same_on_all_ranks(hvd, net, "plain")
        assert_close_to(net, reference(size), TIGHT)

    @add("optimizer_fp16")
    def _():
        net = distributed(hvd, size, rank, compression=hvd.Compression.fp16)
        assert_same_on_all_ranks(hvd, net, "fp16")
        assert_close_to(net, reference(size), FP16)

    @add("optimizer_predivide")
    def _():
        net = distributed(hvd, size, rank, predivide=float(size))
        assert_same_on_all_ranks(hvd, net, "predivide")
        assert_close_to(net, reference(size), TIGHT)

    @add("optimizer_backward_passes")
    def _():
        net = distributed(hvd, size, rank, passes=2)
        assert_same_on_all_ranks(hvd, net, "passes")
        assert_close_to(net, reference(size, passes=2), TIGHT)

    @add("optimizer_skip_synchronize")
    def _():
        net = make_net(0)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.5),
                                       named_parameters=net.named_parameters())
        x, y = data(size)
        loss_fn(net, *shard(x, y, rank)).backward()
        opt.synchronize()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 0.1)
        with opt.skip_synchronize():
            opt.step()
        assert_same_on_all_ranks(hvd, net, "skip")

    @add("optimizer_zero_grad_guard")
    def _():
        net = make_net(0)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                       named_parameters=net.named_parameters())
        x, y = data(size)
        loss_fn(net, *shard(x, y, rank)).backward()
        try:
            opt.zero_grad()
        except AssertionError as e:
            assert "before step()" in str(e)
        else:
            raise AssertionError("zero_grad with pending allreduces must raise")
        opt.step()  # completes the pending allreduces on every rank

    assert [n for n, _ in checks] == check_names(size)
    return checks


def main():
    import hvd.torch as hvd
    from common import run_checks
    torch.set_num_threads(1)
    hvd.init()
    run_checks(make_checks(hvd, hvd.size(), hvd.rank()), hvd.rank())
    hvd.shutdown()


if __name__ == "__main__":
    main()
