"""A Horovod torch script's use of hvd.torch on N ranks (run by
test_horovod_torch_ops.py under hvdrun): the gradients of every collective,
grouped allgather / reducescatter (torch and numpy), float32 scaling bit for
bit as Horovod, broadcast_optimizer_state on ranks with and without state,
sparse gradients.

Every expected value is exact: integers (and halves) stored as floats, so the
checks compare with torch.equal, never with a tolerance.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import hvd.torch as hvd  # noqa: E402  (the changed import line of a Horovod script)


def f32(x):
    return torch.tensor(x, dtype=torch.float32)


def eq(got, want, what=""):
    assert got.dtype == want.dtype and got.shape == want.shape, \
        f"{what}: {got.dtype} {tuple(got.shape)} vs {want.dtype} {tuple(want.shape)}"
    assert torch.equal(got, want), f"{what}:\n got {got}\nwant {want}"


def bits(t):
    return t.detach().contiguous().view(torch.int32).reshape(-1).tolist()


CHECKS = ["grad_allreduce_sum", "grad_grouped_allreduce", "grad_allgather",
          "grad_grouped_allgather", "grad_broadcast", "grad_alltoall_splits",
          "grad_alltoall_even", "grad_reducescatter", "grad_grouped_reducescatter",
          "grad_needs_no_grad_path", "grouped_allgather_values", "grouped_allgather_async",
          "grouped_reducescatter_values", "grouped_reducescatter_async", "grouped_numpy",
          "grouped_errors", "scale_float32_bits", "optimizer_state_root_stepped",
          "optimizer_state_root_fresh", "optimizer_state_distributed_fresh",
          "optimizer_state_lbfgs", "sparse_allreduce_async", "optimizer_sparse",
          "optimizer_sparse_as_dense"]


def make_checks(size, rank):
    n, r = size, rank
    checks = {}

    def check(fn):
        checks[fn.__name__] = fn
        return fn

    # -- gradients ----------------------------------------------------------------
    @check
    def grad_allreduce_sum():
        x = f32([1.0, 2.0, 3.0]) * (r + 1)
        x.requires_grad_()
        y = hvd.allreduce(x, op=hvd.Sum, name="g.ar")
        eq(y.detach(), f32([1.0, 2.0, 3.0]) * (n * (n + 1) / 2), "forward")
        (y * (r + 1)).sum().backward()
        eq(x.grad, torch.full((3,), n * (n + 1) / 2), "grad = Sum over ranks of (k+1)")

    @check
    def grad_grouped_allreduce():
        xs = [torch.full((2,), float(r + 1), requires_grad=True),
              torch.full((3, 2), float(2 * r), requires_grad=True)]
        ys = hvd.grouped_allreduce(xs, op=hvd.Sum, name="g.gar")
        assert isinstance(ys, list) and len(ys) == 2
        eq(ys[0].detach(), torch.full((2,), n * (n + 1) / 2), "forward 0")
        eq(ys[1].detach(), torch.full((3, 2), float(n * (n - 1))), "forward 1")
        sum((y * (i + 1) * (r + 1)).sum() for i, y in enumerate(ys)).backward()
        for i, x in enumerate(xs):
            eq(x.grad, torch.full(x.shape, (i + 1) * n * (n + 1) / 2), f"Sum grad {i}")
        # Average, with prescale and postscale: grad = post * avg(pre * g)
        xs = [torch.full((2,), float(r), requires_grad=True)]
        ys = hvd.grouped_allreduce(xs, op=hvd.Average, name="g.gar.avg", prescale_factor=2.0,
                                   postscale_factor=0.5)
        eq(ys[0].detach(), torch.full((2,), (n - 1) / 2), "Average forward")
        (ys[0] * (r + 1)).sum().backward()
        eq(xs[0].grad, torch.full((2,), (n + 1) / 2), "Average grad")

    def gather_input(k):
        # rank k holds k + 1 rows of 3 columns
        return (torch.arange((k + 1) * 3, dtype=torch.float32).reshape(k + 1, 3) + 10 * k)

    def rows_before(k):
        return sum(j + 1 for j in range(k))

    @check
    def grad_allgather():
        x = gather_input(r).requires_grad_()
        y = hvd.allgather(x, name="g.ag")
        eq(y.detach(), torch.cat([gather_input(k) for k in range(n)]), "forward")
        w = torch.arange(y.numel(), dtype=torch.float32).reshape(y.shape) + 1
        (y * w * (r + 1)).sum().backward()
        # Horovod: the rank's rows of the Average over ranks of (k + 1) * w.
        want = (w * ((n + 1) / 2))[rows_before(r):rows_before(r) + r + 1]
        eq(x.grad, want, "grad")

    @check
    def grad_grouped_allgather():
        xs = [gather_input(r).requires_grad_(), torch.full((2, 2), float(r), requires_grad=True)]
        ys = hvd.grouped_allgather(xs, name="g.gag")
        eq(ys[0].detach(), torch.cat([gather_input(k) for k in range(n)]), "forward 0")
        eq(ys[1].detach(), torch.cat([torch.full((2, 2), float(k)) for k in range(n)]),
           "forward 1")
        ws = [torch.arange(y.numel(), dtype=torch.float32).reshape(y.shape) + 1 for y in ys]
        sum((y * w * (r + 1)).sum() for y, w in zip(ys, ws)).backward()
        eq(xs[0].grad, (ws[0] * ((n + 1) / 2))[rows_before(r):rows_before(r) + r + 1], "grad 0")
        eq(xs[1].grad, (ws[1] * ((n + 1) / 2))[2 * r:2 * r + 2], "grad 1")

    @check
    def grad_broadcast():
        root = n - 1
        x = torch.full((2, 3), float(r + 1), requires_grad=True)
        y = hvd.broadcast(x, root, name="g.bc")
        eq(y.detach(), torch.full((2, 3), float(root + 1)), "forward")
        c = torch.arange(6, dtype=torch.float32).reshape(2, 3) + 1
        (y * c * (r + 1)).sum().backward()
        want = c * ((n + 1) / 2) if r == root else torch.zeros(2, 3)
        eq(x.grad, want, "grad: Average on the root, zeros elsewhere")

    def a2a_splits(k):
        return [1 + (k + j) % 2 for j in range(n)]  # rows rank k sends to rank j

    def a2a_input(k):
        rows = sum(a2a_splits(k))
        return torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2) + 100 * k

    @check
    def grad_alltoall_splits():
        x = a2a_input(r).requires_grad_()
        out, recv = hvd.alltoall(x, splits=a2a_splits(r), name="g.a2a")
        recv_want = [a2a_splits(k)[r] for k in range(n)]
        assert recv.tolist() == recv_want and not recv.requires_grad, recv
        blocks = []
        for k in range(n):
            s = a2a_splits(k)
            lo = sum(s[:r])
            blocks.append(a2a_input(k)[lo:lo + s[r]])
        eq(out.detach(), torch.cat(blocks), "forward")
        # rank j weighs what it received with W_j = (j + 1) * (row index + 1)
        def weight(j, rows):
            return (torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2) + 1) * (j + 1)

        (out * weight(r, out.shape[0])).sum().backward()
        want = []
        for j in range(n):  # the block x sent to j comes back as W_j's rows for it
            got_rows = [a2a_splits(k)[j] for k in range(n)]
            lo = sum(got_rows[:r])
            want.append(weight(j, sum(got_rows))[lo:lo + got_rows[r]])
        eq(x.grad, torch.cat(want), "grad")

    @check
    def grad_alltoall_even():
        x = (torch.arange(n * 2, dtype=torch.float32) + 10 * r).reshape(n * 2, 1)
        x.requires_grad_()
        out = hvd.alltoall(x, name="g.a2a.even")
        assert isinstance(out, torch.Tensor), type(out)
        eq(out.detach(), torch.cat([(torch.arange(n * 2, dtype=torch.float32) + 10 * k)
                                    [2 * r:2 * r + 2] for k in range(n)]).reshape(n * 2, 1),
           "forward")
        (out * (r + 1)).sum().backward()
        want = torch.cat([torch.full((2, 1), float(j + 1)) for j in range(n)])
        eq(x.grad, want, "grad")

    def rs_block(k, rows):
        base, extra = divmod(rows, n)
        lo = k * base + min(k, extra)
        return lo, base + (1 if k < extra else 0)

    @check
    def grad_reducescatter():
        rows = 2 * n + 1  # uneven: rank 0 gets one more row
        for tag, op, pre, post, scale in (("sum", hvd.Sum, 1.0, 1.0, n),
                                          ("avg", hvd.Average, 1.0, 1.0, 1),
                                          ("sum.scaled", hvd.Sum, 0.5, 4.0, n * 2)):
            x = (torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2) + r)
            x.requires_grad_()
            y = hvd.reducescatter(x, name=f"g.rs.{tag}", op=op, prescale_factor=pre,
                                  postscale_factor=post)
            lo, cnt = rs_block(r, rows)
            total = sum(torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2) + k
                        for k in range(n))
            fwd = total * (pre * post) if op == hvd.Sum else total * f32(1.0 / n)
            eq(y.detach(), fwd[lo:lo + cnt], f"{tag} forward")
            (y * (r + 1)).sum().backward()
            # Horovod: allgather(grad * size for Sum * prescale * postscale)
            want = torch.cat([torch.full((rs_block(k, rows)[1], 2), float((k + 1) * scale))
                              for k in range(n)])
            eq(x.grad, want, f"{tag} grad")

    @check
    def grad_grouped_reducescatter():
        xs = [torch.full((2 * n, 1), float(r + 1), requires_grad=True),
              torch.full((n, 3), float(r), requires_grad=True)]
        ys = hvd.grouped_reducescatter(xs, name="g.grs", op=hvd.Sum)
        eq(ys[0].detach(), torch.full((2, 1), n * (n + 1) / 2), "forward 0")
        eq(ys[1].detach(), torch.full((1, 3), n * (n - 1) / 2), "forward 1")
        sum((y * (r + 1)).sum() for y in ys).backward()
        eq(xs[0].grad, torch.cat([torch.full((2, 1), float((k + 1) * n)) for k in range(n)]),
           "grad 0")
        eq(xs[1].grad, torch.cat([torch.full((1, 3), float((k + 1) * n)) for k in range(n)]),
           "grad 1")

    @check
    def grad_needs_no_grad_path():
        # Without requires_grad (or under no_grad) the plain ops run: no autograd node.
        x = torch.ones(2, 2)
        assert hvd.allgather(x, name="g.plain.ag").grad_fn is None
        y = torch.ones(2, 2, requires_grad=True)
        with torch.no_grad():
            assert hvd.broadcast(y, 0, name="g.plain.bc").grad_fn is None
        assert hvd.allgather(y, name="g.fn.ag").grad_fn is not None
        hvd.allgather(y, name="g.fn.ag").sum().backward()  # the name is free again
        eq(y.grad, torch.ones(2, 2), "the Average over ranks of ones")

    # -- grouped allgather / reducescatter -----------------------------------------
    @check
    def grouped_allgather_values():
        xs = [torch.full((r + 1, 2), r, dtype=torch.int32), torch.tensor([float(r)]),
              torch.zeros((0, 3), dtype=torch.float64) if r == 0 else
              torch.full((1, 3), float(r), dtype=torch.float64)]
        out = hvd.grouped_allgather(xs, name="grp.ag")
        assert isinstance(out, list) and len(out) == 3
        eq(out[0], torch.cat([torch.full((k + 1, 2), k, dtype=torch.int32) for k in range(n)]),
           "int32")
        eq(out[1], torch.tensor([float(k) for k in range(n)]), "float32")
        eq(out[2], torch.cat([torch.full((1, 3), float(k), dtype=torch.float64)
                              for k in range(1, n)]), "float64, rank 0 empty")
        # the members are named "<name>.<i>": a plain allgather of "grp.ag.1" runs next
        eq(hvd.allgather(torch.tensor([7.0]), name="grp.ag.1"), torch.full((n,), 7.0), "reuse")

    @check
    def grouped_allgather_async():
        h = hvd.grouped_allgather_async([torch.tensor([r]), torch.tensor([[r, r]])],
                                        name="grp.ag.async")
        assert isinstance(h, hvd.Handle), type(h)
        out = hvd.synchronize(h)
        assert hvd.poll(h)
        eq(out[0], torch.arange(n), "0")
        eq(out[1], torch.arange(n).repeat_interleave(2).reshape(n, 2), "1")
        assert hvd.synchronize(h) is out  # a completed handle returns its result again

    @check
    def grouped_reducescatter_values():
        xs = [torch.arange(2 * n, dtype=torch.float32).reshape(2 * n, 1) + r,
              torch.full((n + 1, 2), r, dtype=torch.int64)]
        out = hvd.grouped_reducescatter(xs, name="grp.rs", op=hvd.Sum)
        total0 = sum(torch.arange(2 * n, dtype=torch.float32).reshape(2 * n, 1) + k
                     for k in range(n))
        eq(out[0], total0[2 * r:2 * r + 2], "float32")
        lo, cnt = rs_block(r, n + 1)
        eq(out[1], torch.full((cnt, 2), n * (n - 1) // 2, dtype=torch.int64), "int64")
        avg = hvd.grouped_reducescatter([torch.full((n, 1), float(2 * r))], name="grp.rs.avg")
        eq(avg[0], torch.full((1, 1), float(n - 1)), "default op Average")

    @check
    def grouped_reducescatter_async():
        h = hvd.grouped_reducescatter_async([torch.ones(n, 2), torch.ones(2 * n)],
                                            name="grp.rs.async", op=hvd.Sum,
                                            postscale_factor=0.5)
        out = h.wait(timeout=60)
        eq(out[0], torch.full((1, 2), n * 0.5), "0")
        eq(out[1], torch.full((2,), n * 0.5), "1")

    @check
    def grouped_numpy():
        import hvd as hvd_np
        out = hvd_np.grouped_allgather([np.array([r], dtype=np.int16),
                                        np.full((1, 2), r, dtype=np.float64)], name="np.gag")
        assert out[0].tolist() == list(range(n)) and out[0].dtype == np.int16, out[0]
        assert out[1].tolist() == [[k, k] for k in range(n)], out[1]
        rs = hvd_np.grouped_reducescatter([np.ones((n, 1), dtype=np.float32)], name="np.grs",
                                          op=hvd_np.Sum)
        assert rs[0].tolist() == [[float(n)]], rs[0]
        h = hvd_np.grouped_allgather_async([np.array([r + 1.0])], name="np.gag.async")
        assert hvd_np.synchronize(h)[0].tolist() == [k + 1.0 for k in range(n)]

    @check
    def grouped_errors():
        for fn in (hvd.grouped_allgather, hvd.grouped_reducescatter):
            try:
                fn([])
            except ValueError as e:
                assert "at least one" in str(e), e
            else:
                raise AssertionError(f"{fn.__name__}([]) must fail")
            try:  # checked before anything is submitted: nothing is left in flight
                fn([torch.ones(2), torch.tensor(1.0)], name="grp.bad")
            except ValueError as e:
                assert "scalar" in str(e), e
            else:
                raise AssertionError(f"{fn.__name__} with a scalar member must fail")
        eq(hvd.grouped_allgather([torch.ones(1)], name="grp.bad")[0], torch.ones(n), "after")

    # -- scaling, bit for bit as Horovod ------------------------------------------------
    @check
    def scale_float32_bits():
        # Horovod multiplies a float32 buffer by the float32-rounded factor:
        # 5.0f * float(1/3) = 0x3FD55556, where float(5.0 * (1/3)) = 0x3FD55555.
        want = (np.float32(5.0) * np.float32(1.0 / 3.0)).view(np.int32)
        assert int(want) == 0x3FD55556
        assert int(np.float32(5.0 * (1.0 / 3.0)).view(np.int32)) == 0x3FD55555
        five = f32([5.0 if r == 0 else 0.0] * 3)
        got = hvd.allreduce(five, op=hvd.Sum, name="s.post", postscale_factor=1.0 / 3.0)
        assert bits(got) == [want] * 3, [hex(b) for b in bits(got)]
        got = hvd.allreduce(five, op=hvd.Sum, name="s.pre", prescale_factor=1.0 / 3.0)
        assert bits(got) == [want] * 3, [hex(b) for b in bits(got)]
        got = hvd.reducescatter(five.repeat(n).reshape(n, 3), op=hvd.Sum, name="s.rs",
                                postscale_factor=1.0 / 3.0)
        assert bits(got) == [want] * 3, [hex(b) for b in bits(got)]
        # Average = sum, then postscale / size in double, applied as a float32 factor.
        avg = hvd.allreduce(f32([5.0 * n if r == 0 else 0.0]), op=hvd.Average, name="s.avg",
                            postscale_factor=1.0 / 3.0)
        want_avg = np.float32(5.0 * n) * np.float32((1.0 / 3.0) / n)
        assert bits(avg) == [int(want_avg.view(np.int32))], (avg, want_avg)
        if n == 3:
            got = hvd.allreduce(five, op=hvd.Average, name="s.avg3")
            assert bits(got) == [want] * 3, [hex(b) for b in bits(got)]
        # float64 keeps the factor in double
        d = hvd.allreduce(torch.tensor([5.0 if r == 0 else 0.0], dtype=torch.float64),
                          op=hvd.Sum, name="s.f64", postscale_factor=1.0 / 3.0)
        assert d.item() == 5.0 * (1.0 / 3.0), d.item()

    # -- broadcast_optimizer_state ---------------------------------------------------
    def small_net(seed):
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))

    def batch():
        g = torch.Generator().manual_seed(7)
        return torch.randn(5, 3, generator=g), torch.randn(5, 2, generator=g)

    def one_step(net, opt):
        opt.zero_grad()
        x, y = batch()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()

    def same_everywhere(tensors, tag):
        for i, t in enumerate(tensors):
            everyone = hvd.allgather(t.detach().reshape(1, -1).contiguous(), name=f"{tag}.{i}")
            for k in range(n):
                assert torch.equal(everyone[k], everyone[0]), f"{tag}[{i}]: rank {k} differs"

    def state_tensors(opt):
        sd = opt.state_dict()
        out = []
        for pid in sorted(sd["state"]):
            for key in sorted(sd["state"][pid]):
                v = sd["state"][pid][key]
                out.append(v if torch.is_tensor(v) else torch.tensor(float(v)))
        return sd, out

    @check
    def optimizer_state_root_stepped():
        net = small_net(0)
        opt = torch.optim.SGD(net.parameters(), lr=0.1 * (r + 1), momentum=0.9)
        if r == 0:  # root has stepped: momentum buffers exist there only
            one_step(net, opt)
            one_step(net, opt)
        else:
            assert len(opt.state) == 0
        hvd.broadcast_parameters(net.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        sd, tensors = state_tensors(opt)
        assert opt.param_groups[0]["lr"] == 0.1, opt.param_groups[0]["lr"]
        assert len(sd["state"]) == 4 and all("momentum_buffer" in v for v in sd["state"].values())
        assert any(t.abs().sum() > 0 for t in tensors), "root's momentum, not zeros"
        same_everywhere(tensors, "os.root.state")
        one_step(net, opt)  # identical state and data: identical parameters after a step
        same_everywhere(list(net.parameters()), "os.root.params")

    @check
    def optimizer_state_root_fresh():
        # Root has not stepped, another rank has: as in Horovod, root's state is
        # initialized by a zero-gradient step and broadcast, so every rank ends with
        # root's initial momentum buffers (weight_decay * parameter: the step's
        # gradient is 0 + wd * p) -- not with no state at all.
        net = small_net(0)
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=0.5)
        if r != 0:
            one_step(net, opt)
        hvd.broadcast_parameters(net.state_dict(), root_rank=0)
        before = [p.detach().clone() for p in net.parameters()]
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        sd, tensors = state_tensors(opt)
        assert len(sd["state"]) == 4, sd["state"].keys()
        for i, p in enumerate(before):
            eq(sd["state"][i]["momentum_buffer"], p * 0.5, f"momentum of parameter {i}")
        # the zero-gradient step did not move root's parameters (weight decay would
        # have); as in Horovod, parameters that had no gradient keep its zero gradient
        for p, b in zip(net.parameters(), before):
            assert torch.equal(p.detach(), b), "parameters changed by broadcast_optimizer_state"
            if r == 0:
                assert p.grad is not None and not p.grad.any(), "zero gradients not left"
        same_everywhere(tensors, "os.fresh.state")
        one_step(net, opt)
        same_everywhere(list(net.parameters()), "os.fresh.params")

    @check
    def optimizer_state_distributed_fresh():
        # A DistributedOptimizer with no state on any rank: the initialization must
        # not allreduce (it would need every rank in step), and Adam's state exists after.
        net = small_net(1)
        opt = hvd.DistributedOptimizer(torch.optim.Adam(net.parameters(), lr=0.01),
                                       named_parameters=net.named_parameters())
        hvd.broadcast_parameters(net.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        sd, tensors = state_tensors(opt)
        assert len(sd["state"]) == 4 and all("exp_avg" in v for v in sd["state"].values())
        same_everywhere(tensors, "os.dist.state")
        one_step(net, opt)
        same_everywhere(list(net.parameters()), "os.dist.params")

    @check
    def optimizer_state_lbfgs():
        # LBFGS (step needs a closure; Horovod refuses it): root's state is sent as is.
        net = small_net(2)
        opt = torch.optim.LBFGS(net.parameters(), lr=0.5, max_iter=3)
        if r == 0:
            x, y = batch()

            def closure():
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(net(x), y)
                loss.backward()
                return loss
            opt.step(closure)
        hvd.broadcast_parameters(net.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        st = opt.state_dict()["state"][0]
        assert st["n_iter"] >= 1 and len(st["old_dirs"]) > 0, (st["n_iter"], len(st["old_dirs"]))
        assert len(set(hvd.allgather_object((st["n_iter"], st["func_evals"])))) == 1
        same_everywhere([st["d"], st["prev_flat_grad"], st["old_dirs"][0]], "os.lbfgs")

    # -- sparse gradients ------------------------------------------------------------
    def sparse_input(k):
        # rank k: rows k and k + 1 of an (n + 2) x 2 tensor, values multiples of n
        # (so that Average's division is exact), row k + 1 twice (uncoalesced)
        idx = torch.tensor([[k, k + 1, k + 1]])
        vals = torch.tensor([[k + 1.0, 1.0], [2.0, 2.0], [0.0, 3.0]]) * n
        return torch.sparse_coo_tensor(idx, vals, (n + 2, 2), check_invariants=True)

    @check
    def sparse_allreduce_async():
        total = sum(sparse_input(k).to_dense() for k in range(n))
        h = hvd.sparse_allreduce_async(sparse_input(r), name="sp.sum", op=hvd.Sum)
        assert isinstance(h, hvd.Handle) and callable(h)
        out = h()  # Horovod's handle is a function
        assert out.is_sparse and out.shape == (n + 2, 2), out
        assert out._nnz() == 3 * n, out._nnz()  # every rank's entries, uncoalesced
        eq(out.to_dense(), total, "Sum")
        assert hvd.synchronize(h) is out
        h = hvd.sparse_allreduce_async(sparse_input(r), "sp.avg", hvd.Average)
        eq(hvd.synchronize(h).to_dense(), total / n, "Average")
        # a rank with no nonzeros still takes part
        empty = torch.sparse_coo_tensor(torch.zeros((1, 0), dtype=torch.int64),
                                        torch.zeros((0, 2)), (n + 2, 2), check_invariants=True)
        h = hvd.sparse_allreduce_async(sparse_input(r) if r else empty, name="sp.empty",
                                       op=hvd.Sum)
        eq(h().to_dense(), total - sparse_input(0).to_dense(), "rank 0 empty")
        for bad, exc in ((torch.ones(2), TypeError), (sparse_input(r), ValueError)):
            try:
                hvd.sparse_allreduce_async(bad, name="sp.bad", op=hvd.Max)
            except exc:
                pass
            else:
                raise AssertionError(f"{bad.layout} with op Max must raise {exc.__name__}")

    def embedding_run(sparse_as_dense):
        torch.manual_seed(3)
        emb = torch.nn.Embedding(n + 3, 2, sparse=True)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.25),
                                       named_parameters=emb.named_parameters(),
                                       sparse_as_dense=sparse_as_dense)
        hvd.broadcast_parameters(emb.state_dict(), root_rank=0)
        before = emb.weight.detach().clone()
        # rank k looks up rows k, k + 1, k + 1 with weight n * (k + 1): its gradient
        # is n * (k + 1) on row k and 2 n (k + 1) on row k + 1; the last row is never used
        (emb(torch.tensor([r, r + 1, r + 1])) * (n * (r + 1))).sum().backward()
        assert emb.weight.grad.is_sparse
        opt.synchronize()
        want = torch.zeros(n + 3, 2)
        for k in range(n):
            want[k] += k + 1.0
            want[k + 1] += 2.0 * (k + 1)
        g = emb.weight.grad
        assert g.is_sparse, "the gradient stays sparse"
        eq(g.to_dense(), want, "Average of the ranks' sparse gradients")
        with opt.skip_synchronize():
            opt.step()
        same_everywhere([emb.weight], f"sparse.{sparse_as_dense}.params")
        eq(emb.weight.detach()[n + 2], before[n + 2], "the unused row did not move")
        assert not torch.equal(emb.weight.detach()[0], before[0]), "row 0 moved"

    @check
    def optimizer_sparse():
        embedding_run(False)

    @check
    def optimizer_sparse_as_dense():
        embedding_run(True)

    assert list(checks) == CHECKS, list(checks)
    return list(checks.items())


def main():
    from common import run_checks
    torch.set_num_threads(1)
    hvd.init()
    run_checks(make_checks(hvd.size(), hvd.rank()), hvd.rank())
    hvd.shutdown()


if __name__ == "__main__":
    main()
