"""hvd.Adasum on N ranks: numpy allreduce / in-place / grouped allreduce per
dtype against a float64 reference written here, the same bits on every rank,
scaling, refused dtypes and operations; with torch installed also torch's
allreduce and DistributedOptimizer(op=hvd.Adasum) (two Adam steps against a
reference that simulates every rank).

The reference combines as include/hvd.h documents: ranks [lo, lo + n) split
at the largest power of two h < n, adasum(ref(lo, h), ref(lo + h, n - h))."""

import os
import sys

import numpy as np
try:
    from common import Checks  # run as a script (this folder first on sys.path)
except ImportError:
    from workers.common import Checks  # imported by a test module

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import ml_dtypes  # bfloat16 for numpy (ships with TensorFlow)
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:
    BF16 = None

DTYPES = ["float64", "float32", "float16"] + (["bfloat16"] if BF16 is not None else [])
# Relative to the largest magnitude among inputs and result.
TOL = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def np_dtype(name):
    return BF16 if name == "bfloat16" else np.dtype(name)


def ref_pair(a, b):
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    dot, aa, bb = float(a @ b), float(a @ a), float(b @ b)
    ca = 1.0 - dot / (2 * aa) if aa > 0 else 1.0
    cb = 1.0 - dot / (2 * bb) if bb > 0 else 1.0
    return ca * a + cb * b


def ref_adasum(xs, lo=0, n=None):
    n = len(xs) if n is None else n
    if n == 1:
        return np.asarray(xs[lo], np.float64).ravel()
    h = 1
    while h * 2 < n:
        h *= 2
    return ref_pair(ref_adasum(xs, lo, h), ref_adasum(xs, lo + h, n - h))


def value(r, shape=(4, 5), seed=0):
    """Rank r's input: a shared direction plus rank-dependent noise and scale."""
    g = np.random.default_rng(1000 * seed + r)
    n = int(np.prod(shape))
    base = np.sin(np.arange(n) + 1.0 + seed)
    return ((0.5 + r) * (base + 0.7 * g.standard_normal(n))).reshape(shape)


def close(got, want, inputs, dt):
    got = np.asarray(got, np.float64).ravel()
    scale = max(float(np.max(np.abs(want))), max(float(np.max(np.abs(x))) for x in inputs))
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    assert got.shape == want.shape, (got.shape, want.shape)
    assert err <= TOL[dt] * scale, f"{dt}: max error {err} > {TOL[dt]} * {scale}"


def same_on_every_rank(hvd, arr, name):
    raw = np.frombuffer(np.ascontiguousarray(arr).tobytes(), np.uint8).copy()
    allb = hvd.allgather(raw, name=name)
    blocks = allb.reshape(hvd.size(), raw.size)
    for r in range(hvd.size()):
        assert bytes(blocks[r]) == bytes(raw), f"rank {r}'s result differs in its bits"


def check_names(size):
    names = [f"allreduce[{d}]" for d in DTYPES]
    names += ["allreduce_inplace", "grouped_per_tensor", "scaling", "identical_vectors",
              "orthogonal_vectors", "zero_on_one_rank", "bad_dtype", "bad_operation",
              "op_constant"]
    names += ["torch_allreduce", "torch_optimizer", "torch_optimizer_accumulate"]
    return names


def make_checks(hvd, size, rank):
    checks = Checks()
    add = checks.add

    for dt in DTYPES:
        def check(dt=dt):
            xs = [value(r).astype(np_dtype(dt)) for r in range(size)]
            got = hvd.allreduce(xs[rank], op=hvd.Adasum, name=f"ada.{dt}")
            assert got.dtype == np_dtype(dt) and got.shape == (4, 5)
            stored = [x.astype(np.float64) for x in xs]
            close(got, ref_adasum(stored), stored, dt)
            same_on_every_rank(hvd, got, f"ada.{dt}.bits")
        checks.append((f"allreduce[{dt}]", check))

    @add("allreduce_inplace")
    def _():
        xs = [value(r, (7,), seed=3).astype(np.float32) for r in range(size)]
        x = xs[rank].copy()
        hvd.allreduce_(x, op=hvd.Adasum, name="ada.inplace")
        close(x, ref_adasum([v.astype(np.float64) for v in xs]), xs, "float32")

    @add("grouped_per_tensor")
    def _():
        # Two tensors of very different directions: per-tensor Adasum differs
        # from Adasum of the concatenation.
        a = [value(r, (6,), seed=5) for r in range(size)]
        b = [value(r, (3, 2), seed=6) * (10.0 if r % 2 else -0.1) for r in range(size)]
        ga, gb = hvd.grouped_allreduce([a[rank], b[rank]], op=hvd.Adasum, name="ada.group")
        wa, wb = ref_adasum(a), ref_adasum(b)
        close(ga, wa, a, "float64")
        close(gb, wb, b, "float64")
        cat = ref_adasum([np.concatenate([a[r].ravel(), b[r].ravel()]) for r in range(size)])
        diff = np.max(np.abs(cat - np.concatenate([wa, wb])))
        assert diff > 1e-3, f"test inputs do not tell per-tensor from concatenated ({diff})"

    @add("scaling")
    def _():
        xs = [value(r, (5,), seed=7) for r in range(size)]
        got = hvd.allreduce(xs[rank], op=hvd.Adasum, prescale_factor=3.0, postscale_factor=0.5,
                            name="ada.scale")
        close(got, ref_adasum([3.0 * x for x in xs]) * 0.5, [3.0 * x for x in xs], "float64")
        # Adasum is homogeneous: the same as 1.5 x adasum(x); not the plain sum.
        assert np.max(np.abs(got - 1.5 * ref_adasum(xs))) < 1e-9
        assert np.max(np.abs(got - 1.5 * sum(xs))) > 1e-3 or size == 1

    @add("identical_vectors")
    def _():
        v = np.array([0.25, -3.0, 7.5, 0.0, 1.0], np.float32)
        got = hvd.allreduce(v, op=hvd.Adasum, name="ada.same")
        assert got.tobytes() == v.tobytes(), got

    @add("orthogonal_vectors")
    def _():
        v = np.zeros(size + 2, np.float32)
        v[rank] = rank + 1.0
        got = hvd.allreduce(v, op=hvd.Adasum, name="ada.orth")
        want = np.zeros(size + 2, np.float32)
        want[:size] = np.arange(1, size + 1)
        assert got.tobytes() == want.tobytes(), got

    @add("zero_on_one_rank")
    def _():
        xs = [value(r, (4,), seed=9) for r in range(size)]
        xs[size - 1] = np.zeros(4)
        got = hvd.allreduce(xs[rank], op=hvd.Adasum, name="ada.zero")
        close(got, ref_adasum(xs), xs, "float64")

    @add("bad_dtype")
    def _():
        for dt in ("int32", "int64", "uint8", "bool"):
            try:
                hvd.allreduce(np.ones(3, dt), op=hvd.Adasum, name=f"ada.bad.{dt}")
            except hvd.InvalidArgumentError as e:
                msg = str(e).lower()
                assert "adasum" in msg and dt in msg, msg
            else:
                raise AssertionError(f"Adasum of {dt} did not fail")

    @add("bad_operation")
    def _():
        try:
            hvd.reducescatter(np.ones((size, 2), np.float32), op=hvd.Adasum, name="ada.rs")
        except hvd.InvalidArgumentError as e:
            msg = str(e)
            assert "HVD_ADASUM" in msg and "allreduce" in msg, msg
        else:
            raise AssertionError("reducescatter with Adasum did not fail")

    @add("op_constant")
    def _():
        assert hvd.Adasum == 5 and "Adasum" in hvd.__all__

    try:
        import torch
        import hvd.torch as ht
    except ImportError:
        torch = None

    @add("torch_allreduce")
    def _():
        if torch is None:
            return
        assert ht.Adasum == hvd.Adasum
        xs = [value(r, (3, 3), seed=11) for r in range(size)]
        got = ht.allreduce(torch.tensor(xs[rank], dtype=torch.float32), op=ht.Adasum,
                           name="ada.torch")
        stored = [x.astype(np.float32).astype(np.float64) for x in xs]
        close(got.numpy(), ref_adasum(stored), stored, "float32")

    @add("torch_optimizer")
    def _():
        if torch is None:
            return

        def model():
            torch.manual_seed(0)
            return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(),
                                       torch.nn.Linear(3, 2))

        def data(r, step):
            g = torch.Generator().manual_seed(100 * step + r)
            return torch.randn(6, 4, generator=g), torch.randn(6, 2, generator=g)

        def loss_of(m, r, step):
            x, y = data(r, step)
            return ((m(x) - y) ** 2).mean()

        steps = 2
        net = model()
        opt = ht.DistributedOptimizer(torch.optim.Adam(net.parameters(), lr=0.05),
                                      named_parameters=net.named_parameters(), op=ht.Adasum)
        for s in range(steps):
            opt.zero_grad()
            loss_of(net, rank, s).backward()
            opt.step()

        # Reference: every rank simulated with its own model copy and own Adam
        # state; the deltas combined per tensor in float64.
        shared = [p.detach().clone() for p in model().parameters()]
        sims = [model() for _ in range(size)]
        sim_opts = [torch.optim.Adam(m.parameters(), lr=0.05) for m in sims]
        for s in range(steps):
            deltas = []
            for r in range(size):
                with torch.no_grad():
                    for p, v in zip(sims[r].parameters(), shared):
                        p.copy_(v)
                sim_opts[r].zero_grad()
                loss_of(sims[r], r, s).backward()
                sim_opts[r].step()
                deltas.append([(p.detach() - v).double().numpy()
                               for p, v in zip(sims[r].parameters(), shared)])
            shared = [v + torch.from_numpy(ref_adasum([d[i] for d in deltas])
                                           .reshape(v.shape)).float()
                      for i, v in enumerate(shared)]
        for p, want in zip(net.parameters(), shared):
            err = float((p.detach() - want).abs().max())
            assert err < 1e-5, f"parameter differs from the reference by {err}"
        flat = torch.cat([p.detach().ravel() for p in net.parameters()])
        same_on_every_rank(hvd, flat.numpy(), "ada.torch.params")

    @add("torch_optimizer_accumulate")
    def _():
        # backward_passes_per_step=2 (the step uses the sum of both passes'
        # gradients) and a parameter without a gradient (its delta is zero on
        # every rank, so it stays as it was).
        if torch is None:
            return
        torch.manual_seed(1)
        lin = torch.nn.Linear(3, 2)
        unused = torch.nn.Parameter(torch.ones(4))
        params = [("w", lin.weight), ("b", lin.bias), ("u", unused)]
        start = [p.detach().clone() for _, p in params]
        opt = ht.DistributedOptimizer(torch.optim.SGD([p for _, p in params], lr=0.1),
                                      named_parameters=params, op=ht.Adasum,
                                      backward_passes_per_step=2)
        xs = [torch.tensor(value(r, (5, 3), seed=31), dtype=torch.float32)
              for r in range(size)]
        for k in range(2):
            (lin(xs[rank] * (k + 1)) ** 2).sum().backward()
        opt.step()
        deltas = []
        for r in range(size):
            w = start[0].clone().requires_grad_()
            b = start[1].clone().requires_grad_()
            for k in range(2):
                ((xs[r] * (k + 1) @ w.T + b) ** 2).sum().backward()
            deltas.append([(-0.1 * w.grad).double().numpy(), (-0.1 * b.grad).double().numpy()])
        for i, (_, p) in enumerate(params[:2]):
            want = start[i].double().numpy() + ref_adasum([d[i] for d in deltas]).reshape(
                p.shape)
            err = float(np.max(np.abs(p.detach().double().numpy() - want)))
            assert err < 1e-5, f"{params[i][0]} differs from the reference by {err}"
        assert torch.equal(unused.detach(), start[2])

    return checks


def main():
    import hvd
    from common import run_checks
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    run_checks(make_checks(hvd, size, rank), rank, {"info": {"size": size, "rank": rank}})
    hvd.shutdown()


if __name__ == "__main__":
    main()
