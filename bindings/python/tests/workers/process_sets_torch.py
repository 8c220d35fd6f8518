"""hvd.torch with process sets on 4 ranks: `even` = [0, 2] and `odd` = [1, 3]
(hvd.init(process_sets=...)), `low` = [0, 1, 2] (added later, overlapping
both). Every op (in-place and async forms too) with process_set=, exact for
integers; gradients of the differentiable ops within the set;
DistributedOptimizer(process_set=) with each parity group training its own
model (float64, against a reference that simulates the group's averaged SGD
within 1e-12 relative: equal within a group, different across groups);
broadcast_parameters / broadcast_optimizer_state within a set;
SyncBatchNorm(process_set=) with the statistics, running statistics and input
gradient of the set's batches only (against torch's BatchNorm1d on the set's
concatenated batch, float64, within 1e-10)."""

import os
import sys

import numpy as np
import torch
try:
    from common import Checks  # run as a script (this folder first on sys.path)
except ImportError:
    from workers.common import Checks  # imported by a test module

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CHECKS = ["ops", "inplace_async", "grouped", "alltoall_reducescatter", "objects_sparse",
          "autograd", "optimizer_groups", "optimizer_grouped_param_groups",
          "broadcast_parameters", "broadcast_optimizer_state", "sync_batch_norm", "errors"]
SIZE = 4
REL = 1e-12  # float64 results of the optimizer against the reference


def check_names(size=SIZE):
    return list(CHECKS)


def value(g, shape=(2, 3)):
    return torch.arange(int(np.prod(shape)), dtype=torch.int64).reshape(shape) + 10 * g + 1


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(),
                               torch.nn.Linear(4, 1)).double()


def batch(g, step):
    gen = torch.Generator().manual_seed(1000 * g + step)
    x = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    return x, x.sum(1, keepdim=True) * (g + 1)


def make_checks(hvd, rank, even, odd, low):
    checks = Checks()
    add = checks.add

    mine = even if rank % 2 == 0 else odd
    other = odd if rank % 2 == 0 else even
    sets = [(mine, mine.ranks)] + ([(low, low.ranks)] if low.included() else []) + \
        [(hvd.global_process_set, list(range(SIZE)))]

    def eq(a, b):
        assert torch.equal(a, b), f"{a} != {b}"

    @add("ops")
    def _():
        res = []
        for ps, ranks in sets:
            res.append((ranks, "sum", hvd.allreduce(value(rank), op=hvd.Sum, name="t",
                                                    process_set=ps)))
            res.append((ranks, "avg", hvd.allreduce(value(rank).double(), name="t.avg",
                                                    process_set=ps)))
            res.append((ranks, "gather", hvd.allgather(torch.full((rank + 1, 2), rank),
                                                       name="g", process_set=ps)))
            res.append((ranks, "bcast", hvd.broadcast(value(rank), ranks[-1], name="b",
                                                      process_set=ps)))
            hvd.barrier(process_set=ps)
        for ranks, what, out in res:
            xs = torch.stack([value(g) for g in ranks])
            if what == "sum":
                eq(out, xs.sum(0))
            elif what == "avg":
                torch.testing.assert_close(out, xs.double().sum(0) / len(ranks), rtol=REL,
                                           atol=0)
            elif what == "gather":
                eq(out, torch.cat([torch.full((g + 1, 2), g) for g in ranks]))
            else:
                eq(out, value(ranks[-1]))

    @add("inplace_async")
    def _():
        res = []
        for ps, ranks in sets:
            a = value(rank)
            h1 = hvd.allreduce_async_(a, op=hvd.Sum, name="ia", process_set=ps)
            b = value(rank)
            h2 = hvd.broadcast_async_(b, ranks[0], name="ib", process_set=ps)
            h3 = hvd.allgather_async(torch.tensor([rank]), name="ig", process_set=ps)
            h4 = hvd.allreduce_async(value(rank), op=hvd.Max, name="im", process_set=ps)
            c = value(rank)
            hvd.allreduce_(c, op=hvd.Min, name="imin", process_set=ps)
            d = value(rank)
            hvd.broadcast_(d, ranks[-1], name="ib2", process_set=ps)
            res.append((ranks, a, b, c, d, [hvd.synchronize(h) for h in (h1, h2, h3, h4)]))
        for ranks, a, b, c, d, outs in res:
            xs = torch.stack([value(g) for g in ranks])
            eq(a, xs.sum(0))
            assert outs[0] is a and outs[1] is b
            eq(b, value(ranks[0]))
            eq(outs[2], torch.tensor(ranks))
            eq(outs[3], xs.max(0).values)
            eq(c, xs.min(0).values)
            eq(d, value(ranks[-1]))

    @add("grouped")
    def _():
        res = []
        for ps, ranks in sets:
            ts = [value(rank, (3,)), value(rank, (2, 2))]
            res.append((ranks, hvd.grouped_allreduce(ts, op=hvd.Sum, name="ga", process_set=ps),
                        hvd.synchronize(hvd.grouped_allreduce_async(
                            [value(rank, (1,))], op=hvd.Sum, name="gaa", process_set=ps)),
                        hvd.grouped_allgather([torch.tensor([rank]), torch.full((1, 2), rank)],
                                              name="gg", process_set=ps)))
            u = [value(rank, (2,))]
            hvd.grouped_allreduce_(u, op=hvd.Sum, name="gai", process_set=ps)
            res[-1] += (u,)
        for ranks, ga, gaa, gg, u in res:
            eq(ga[0], sum(value(g, (3,)) for g in ranks))
            eq(ga[1], sum(value(g, (2, 2)) for g in ranks))
            eq(gaa[0], sum(value(g, (1,)) for g in ranks))
            eq(gg[0], torch.tensor(ranks))
            eq(gg[1], torch.cat([torch.full((1, 2), g) for g in ranks]))
            eq(u[0], sum(value(g, (2,)) for g in ranks))

    @add("alltoall_reducescatter")
    def _():
        res = []
        for ps, ranks in sets:
            n, i = len(ranks), ranks.index(rank)
            x = torch.cat([torch.full((j + 1,), 100 * rank + j) for j in range(n)])
            out, recv = hvd.alltoall(x, splits=[j + 1 for j in range(n)], name="a2a",
                                     process_set=ps)
            rs = hvd.reducescatter(value(rank, (n, 2)), op=hvd.Sum, name="rs", process_set=ps)
            grs = hvd.grouped_reducescatter([value(rank, (2 * n,))], op=hvd.Sum, name="grs",
                                            process_set=ps)
            res.append((ranks, i, out, recv, rs, grs))
        for ranks, i, out, recv, rs, grs in res:
            n = len(ranks)
            eq(out, torch.cat([torch.full((i + 1,), 100 * g + i) for g in ranks]))
            eq(recv, torch.full((n,), i + 1, dtype=torch.int64))
            eq(rs, sum(value(g, (n, 2)) for g in ranks)[i:i + 1])
            eq(grs[0], sum(value(g, (2 * n,)) for g in ranks)[2 * i:2 * i + 2])

    @add("objects_sparse")
    def _():
        res = []
        for ps, ranks in sets:
            b = hvd.broadcast_object({"r": rank}, root_rank=ranks[-1], process_set=ps)
            g = hvd.allgather_object(rank * 2, process_set=ps)
            sp = torch.sparse_coo_tensor(torch.tensor([[rank % 3]]), torch.tensor([1.0 + rank]),
                                         (3,))
            s = hvd.synchronize(hvd.sparse_allreduce_async(sp, name="sp", op=hvd.Sum,
                                                           process_set=ps))
            res.append((ranks, b, g, s))
        for ranks, b, g, s in res:
            assert b == {"r": ranks[-1]} and g == [2 * r for r in ranks], (b, g)
            want = torch.zeros(3, dtype=torch.float32)
            for r in ranks:
                want[r % 3] += 1.0 + r
            eq(s.to_dense(), want)

    @add("autograd")
    def _():
        res = []
        for ps, ranks in sets:
            x = torch.full((2,), float(rank + 1), requires_grad=True)
            y = hvd.allreduce(x, op=hvd.Sum, name="ag.ar", process_set=ps)
            (y * (rank + 1)).sum().backward()
            z = torch.full((rank + 1, 2), 1.0, requires_grad=True)
            w = hvd.allgather(z, name="ag.ag", process_set=ps)
            (w.sum() * (rank + 1)).backward()
            v = torch.full((2,), float(rank), requires_grad=True)
            bv = hvd.broadcast(v, ranks[-1], name="ag.bc", process_set=ps)
            (bv.sum() * (rank + 1)).backward()
            res.append((ranks, y.detach(), x.grad, z.grad, bv.detach(), v.grad))
        for ranks, y, xg, zg, bv, vg in res:
            n = len(ranks)
            eq(y, torch.full((2,), float(sum(g + 1 for g in ranks))))
            # d/dx of sum_i w_i * allreduce(x): the allreduce (Sum) of the w_i
            eq(xg, torch.full((2,), float(sum(g + 1 for g in ranks))))
            # allgather: this rank's rows of the Average of the weights
            torch.testing.assert_close(zg, torch.full((rank + 1, 2), sum(g + 1 for g in ranks) / n),
                                       rtol=1e-6, atol=0)
            eq(bv, torch.full((2,), float(ranks[-1])))
            want = sum(g + 1 for g in ranks) / n if rank == ranks[-1] else 0.0
            torch.testing.assert_close(vg, torch.full((2,), want), rtol=1e-6, atol=0)

    def reference(group, steps, lr):
        """The group's model after `steps` SGD steps on the average of its
        members' gradients, simulated here."""
        models = {g: make_model(100 + group[0]) for g in group}
        for step in range(steps):
            grads = []
            for g in group:
                m = models[g]
                m.zero_grad()
                x, y = batch(g, step)
                torch.nn.functional.mse_loss(m(x), y).backward()
                grads.append([p.grad.clone() for p in m.parameters()])
            avg = [sum(gs) / len(group) for gs in zip(*grads)]
            with torch.no_grad():
                for g in group:
                    for p, a in zip(models[g].parameters(), avg):
                        p -= lr * a
        return [p.detach().clone() for p in models[group[0]].parameters()]

    def train(opt_kwargs, steps=3, lr=0.1):
        model = make_model(100 + mine.ranks[0])  # the same start within a group
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr),
                                       named_parameters=model.named_parameters(),
                                       process_set=mine, **opt_kwargs)
        for step in range(steps):
            opt.zero_grad()
            x, y = batch(rank, step)
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        every = hvd.allgather(flat.unsqueeze(0), name=f"params.{len(opt_kwargs)}")
        return model, every

    def check_trained(model, every, steps=3, lr=0.1):
        ref = reference(mine.ranks, steps, lr)
        for p, q in zip(model.parameters(), ref):
            torch.testing.assert_close(p.detach(), q, rtol=REL, atol=1e-14)
        for g in range(SIZE):
            same_group = (g % 2) == (rank % 2)
            if same_group:
                eq(every[g], every[rank])  # bit-identical within the group
            else:
                assert not torch.allclose(every[g], every[rank]), "groups trained alike"

    @add("optimizer_groups")
    def _():
        check_trained(*train({}))

    @add("optimizer_grouped_param_groups")
    def _():
        # groups=2: the parameter order comes from the set's first rank
        check_trained(*train({"groups": 2}))

    @add("broadcast_parameters")
    def _():
        model = make_model(rank)  # different on every rank
        root = mine.ranks[-1]
        hvd.broadcast_parameters(model.state_dict(), root_rank=root, process_set=mine)
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        want = torch.cat([p.detach().reshape(-1) for p in make_model(root).parameters()])
        every = hvd.allgather(flat.unsqueeze(0), name="bp.params")
        eq(flat, want)
        for g in range(SIZE):
            if g % 2 != rank % 2:
                assert not torch.equal(every[g], flat)

    @add("broadcast_optimizer_state")
    def _():
        model = make_model(0)
        opt = torch.optim.SGD(model.parameters(), lr=0.01 * (rank + 1), momentum=0.5)
        root = mine.ranks[0]
        hvd.broadcast_optimizer_state(opt, root_rank=root, process_set=mine)
        lrs = hvd.allgather(torch.tensor([opt.param_groups[0]["lr"]], dtype=torch.float64),
                            name="bos.lr")
        assert opt.param_groups[0]["lr"] == 0.01 * (root + 1), opt.param_groups[0]["lr"]
        assert sorted(set(lrs.tolist())) == [0.01, 0.02], lrs  # roots 0 and 1

    @add("sync_batch_norm")
    def _():
        c = 3

        def xb(g, step):  # rank g's batch: 2 + g rows, its own mean and scale
            gen = torch.Generator().manual_seed(50 + 10 * g + step)
            return torch.randn(2 + g, c, generator=gen, dtype=torch.float64) * (g + 1) + 3 * g

        bn = hvd.SyncBatchNorm(c, momentum=0.25, process_set=mine).double()
        ref = torch.nn.BatchNorm1d(c, momentum=0.25).double()
        glob = torch.nn.BatchNorm1d(c, momentum=0.25).double()  # every rank's batch: not it
        for m in (bn, ref, glob):
            with torch.no_grad():
                m.weight.copy_(torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64))
                m.bias.copy_(torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64))
        offset = sum(2 + g for g in mine.ranks if g < rank)
        rows = slice(offset, offset + 2 + rank)
        for step in range(2):
            full = torch.cat([xb(g, step) for g in mine.ranks]).requires_grad_()
            coef = torch.cat([torch.full((2 + g, c), float(g + 1) + 0.5 * step,
                                         dtype=torch.float64) * torch.tensor([1.0, -2.0, 3.0])
                              for g in mine.ranks])
            y_ref = ref(full)
            (y_ref * coef).sum().backward()
            everyone = glob(torch.cat([xb(g, step) for g in range(SIZE)]))
            x = xb(rank, step).requires_grad_()
            y = bn(x)
            (y * coef[rows]).sum().backward()
            torch.testing.assert_close(y.detach(), y_ref.detach()[rows], rtol=1e-10,
                                       atol=1e-10)
            offset_all = sum(2 + g for g in range(rank))
            assert not torch.allclose(y.detach(),
                                      everyone.detach()[offset_all:offset_all + 2 + rank]), \
                "the set's statistics equal the job's: the test cannot tell them apart"
            torch.testing.assert_close(x.grad, full.grad[rows], rtol=1e-10, atol=1e-10)
            for got, want in ((bn.running_mean, ref.running_mean),
                              (bn.running_var, ref.running_var)):
                torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
            bn.zero_grad()
            ref.zero_grad()
        # the running statistics of the two sets differ; within a set they agree
        stats = hvd.allgather(bn.running_mean.unsqueeze(0), name="sbn.stats")
        for g in range(SIZE):
            if g % 2 == rank % 2:
                eq(stats[g], bn.running_mean)
            else:
                assert not torch.allclose(stats[g], bn.running_mean)
        # a rank outside the set cannot run it in training; eval needs no set
        outside = hvd.SyncBatchNorm(c, process_set=other).double()
        try:
            outside(xb(rank, 0))
        except ValueError as e:
            assert f"rank {rank} is not in process set {other.ranks}" in str(e), str(e)
        else:
            raise AssertionError("SyncBatchNorm on a set without this rank did not raise")
        outside.eval()
        outside(xb(rank, 0))
        import copy
        assert copy.deepcopy(bn).process_set is mine

    @add("errors")
    def _():
        msg = f"rank {rank} is not in process set {other.ranks}"
        # (a DistributedOptimizer on a set without this rank is a plain optimizer there,
        # as in Horovod: test_horovod_dropin_torch.py)
        for fn in (lambda: hvd.allreduce(torch.ones(2), process_set=other),
                   lambda: hvd.allreduce(torch.ones(2, requires_grad=True), process_set=other),
                   lambda: hvd.broadcast_parameters(make_model(0).state_dict(), root_rank=0,
                                                    process_set=other),
                   lambda: hvd.broadcast_optimizer_state(
                       torch.optim.SGD(make_model(0).parameters(), lr=0.1), root_rank=0,
                       process_set=other)):
            try:
                fn()
            except ValueError as e:
                assert msg in str(e), str(e)
            else:
                raise AssertionError("an op on a set without this rank did not raise")
        try:
            hvd.broadcast(torch.ones(1), other.ranks[0], process_set=mine)
        except ValueError as e:
            assert "is not in process set" in str(e), str(e)
        else:
            raise AssertionError("a root outside the set did not raise")
        hvd.barrier()

    assert [n for n, _ in checks] == CHECKS, "check list out of sync"
    return checks


def main():
    import hvd.torch as hvd
    from common import run_checks
    torch.set_num_threads(1)
    even, odd = hvd.ProcessSet([0, 2]), hvd.ProcessSet([1, 3])
    hvd.init(process_sets=[even, odd])
    assert hvd.size() == SIZE
    low = hvd.add_process_set([0, 1, 2])
    run_checks(make_checks(hvd, hvd.rank(), even, odd, low), hvd.rank())
    for ps in (low, odd, even):
        assert hvd.remove_process_set(ps)
    hvd.barrier()  # a rank that shuts down stops the others' sets too
    hvd.shutdown()


if __name__ == "__main__":
    main()
