"""hvd.torch on CUDA tensors (marked gpu; tests/gpu/run.sh runs them).

The core stages CUDA tensors through page-locked host memory for the host
transports (gloo, mpi, ucx, local), ordered on the tensor's current stream;
results the handle owns come back as host memory and hvd.torch copies them
to the input's device. Without a CUDA device every test here skips, saying
so; the same paths are covered without a GPU by the core's fake-runtime
tests (tests/unit/test_cuda_staging.cc)."""

import os

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (requirements-test.txt)")

import harness  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="torch.cuda.is_available() is False (no CUDA device, or a CPU-only "
                              "torch): run on a GPU host, tests/gpu/run.sh"),
]

DTYPES = [torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.float32,
          torch.float64]


@pytest.fixture
def world():
    import hvd.torch as hvd
    hvd.init()
    yield hvd
    while hvd.is_initialized():
        hvd.shutdown()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_collective_world_of_one(world, dtype):
    hvd = world
    dev = torch.device("cuda", torch.cuda.current_device())
    x = (torch.arange(12) % 7).to(dtype).reshape(4, 3).to(dev)
    host = x.cpu()
    for op, want in ((hvd.Sum, host), (hvd.Max, host), (hvd.Min, host)):
        y = hvd.allreduce(x, op=op, name=f"ar{op}")
        assert y.device == dev and y.dtype == dtype
        assert torch.equal(y.cpu(), want)
    z = x.clone()
    assert hvd.allreduce_(z, op=hvd.Sum, name="inplace") is z
    assert torch.equal(z.cpu(), host)
    g = hvd.grouped_allreduce([x, x[1:]], op=hvd.Sum, name="grp")
    assert all(t.device == dev for t in g)
    assert torch.equal(g[1].cpu(), host[1:])
    b = hvd.broadcast(x, 0, name="bc")
    assert b.device == dev and torch.equal(b.cpu(), host)
    for name, fn in (("ag", lambda: hvd.allgather(x, name="ag")),
                     ("a2a", lambda: hvd.alltoall(x, name="a2a")),
                     ("rs", lambda: hvd.reducescatter(x, op=hvd.Sum, name="rs"))):
        r = fn()
        assert r.device == dev, name
        assert torch.equal(r.cpu(), host), name


@pytest.mark.parametrize("transport", ["local", "nccl"])
def test_stream_ordered_completion(monkeypatch, transport):
    # HVD_CUDA_ASYNC_COMPLETION=1: the handle completes with the results
    # queued on the submitting stream; waiting from another stream orders
    # that stream after them (hvd_handle_stream_wait), with no host wait.
    import hvd.torch as hvd
    if transport == "nccl" and not hvd.nccl_built():
        pytest.skip("this build has no NCCL transport")
    monkeypatch.setenv("HVD_CUDA_ASYNC_COMPLETION", "1")
    hvd.init(transport=transport)
    try:
        dev = torch.device("cuda", torch.cuda.current_device())
        s1, s2 = torch.cuda.Stream(dev), torch.cuda.Stream(dev)
        for step in range(20):
            with torch.cuda.stream(s1):
                xs = [torch.full((1 << 16,), float(step + k), device=dev) for k in range(4)]
                hs = [hvd.allreduce_async(x, op=hvd.Sum, name=f"async{k}") for k, x in enumerate(xs)]
            with torch.cuda.stream(s2):  # a consumer on another stream
                ys = [hvd.synchronize(h) for h in hs]
                sums = torch.stack([y.sum() for y in ys])
            torch.cuda.synchronize()
            want = torch.tensor([float(step + k) * (1 << 16) for k in range(4)], device=dev)
            assert torch.equal(sums, want), step
    finally:
        while hvd.is_initialized():
            hvd.shutdown()


def test_ordered_on_the_current_stream(world):
    hvd = world
    dev = torch.device("cuda", torch.cuda.current_device())
    s = torch.cuda.Stream(dev)
    with torch.cuda.stream(s):
        # Work queued on s before the allreduce: the core copies on s, after it.
        x = torch.ones(1 << 20, device=dev)
        x.mul_(3)
        y = hvd.allreduce(x, op=hvd.Sum, name="stream")
    torch.cuda.synchronize()
    assert torch.equal(y.cpu(), torch.full((1 << 20,), 3.0))


def test_two_ranks(tmp_path):
    script = harness.write_script(tmp_path, """
        import torch
        import hvd.torch as hvd
        hvd.init()
        r, n = hvd.rank(), hvd.size()
        dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        for dt in (torch.int32, torch.float32, torch.float64):
            x = torch.arange(6, device=dev).to(dt) + r
            y = hvd.allreduce(x, op=hvd.Sum, name=f"s{dt}")
            want = (torch.arange(6).to(dt) * n + n * (n - 1) // 2)
            assert y.device == dev and torch.equal(y.cpu(), want), (dt, y)
            g = hvd.allgather(x[: r + 1].reshape(-1, 1), name=f"g{dt}")
            assert g.device == dev and g.shape[0] == n * (n + 1) // 2, g
            b = hvd.broadcast(x, 1, name=f"b{dt}")
            assert torch.equal(b.cpu(), torch.arange(6).to(dt) + 1), b
            rs = hvd.reducescatter(x.reshape(3, 2), op=hvd.Sum, name=f"rs{dt}")
            assert rs.device == dev, rs
            a = hvd.alltoall(torch.full((n,), r, device=dev, dtype=dt), name=f"a{dt}")
            assert torch.equal(a.cpu(), torch.arange(n).to(dt)), a
        hvd.shutdown()
        print("GPU-OK", r)
    """)
    job = harness.run_job(2, script, tmp_path=tmp_path, timeout=180)
    assert job.ok(), job.describe()
    assert job.output.count("GPU-OK") == 2, job.describe()


# The end of both jobs below: the optimizer on the device, parameters checked
# bit-identical on every rank, then (KILL_RANK) a rank dying mid-job; "@DONE@"
# becomes each job's own marker.
TRAIN_THEN_PEER_DEATH = """
    # DistributedOptimizer on a model on the device, with fp16 compression, the
    # initial state from rank 0: every rank ends with the same bits.
    torch.manual_seed(r)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                   compression=hvd.Compression.fp16)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for step in range(6):
        opt.zero_grad()
        loss = model(torch.randn(8, 16, device=dev)).pow(2).mean()
        loss.backward()
        opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    every = hvd.allgather(flat.reshape(1, -1), name="params")
    assert all(torch.equal(every[0], every[q]) for q in range(n)), "parameters differ"
    if os.environ.get("KILL_RANK"):
        # A rank dies while the others are inside a stream of 16 MiB
        # allreduces (over NCCL: the survivors' calls must be aborted, not hang).
        t0 = time.time()
        try:
            for i in range(10000):
                if os.environ["KILL_RANK"] == str(r) and i == 20:
                    print("DYING", r, flush=True)
                    os._exit(9)
                hvd.allreduce(torch.ones(1 << 22, device=dev), name=f"after{i}")
        except Exception as e:
            print("SURVIVOR-ERROR", r, round(time.time() - t0, 1), str(e)[:300], flush=True)
            sys.exit(3)
        sys.exit(4)
    hvd.shutdown()
    print("@DONE@", r)
"""


# Ranks sharing one GPU over gloo (staged through page-locked host memory):
# every collective x dtype, fused groups in opposite orders, the optimizer
# path, and a peer that dies mid-job. HVD_TEST_DEVICE=cpu runs the same job
# on host tensors (how the job itself was checked on a machine without a GPU).
STAGED_JOB = """
    import os, sys, time
    import torch
    import hvd.torch as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    if os.environ.get("HVD_TEST_DEVICE", "cuda") == "cuda":
        dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
    DTYPES = (torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
              torch.float32, torch.float64, torch.bool)
    def base(q, k=1000):
        return (torch.arange(k) + q) % 5
    for dt in DTYPES:
        tag = str(dt).replace("torch.", "")
        x = base(r).to(dt).to(dev)
        ref64 = [base(q).to(dt).to(torch.float64) for q in range(n)]
        if dt is torch.bool:
            s = hvd.allreduce(x, op=hvd.Max, name=f"max{tag}")
            assert s.device == x.device and torch.equal(s.cpu(), torch.stack([base(q).to(dt) for q in range(n)]).any(0)), (tag, s)
        else:
            s = hvd.allreduce(x, op=hvd.Sum, name=f"s{tag}")
            assert s.device == x.device and torch.equal(s.cpu().to(torch.float64), sum(ref64)), (tag, s)
            m = hvd.allreduce(x, op=hvd.Min, name=f"m{tag}")
            assert torch.equal(m.cpu().to(torch.float64), torch.stack(ref64).min(0).values), (tag, m)
            p = hvd.allreduce(x, op=hvd.Product, name=f"p{tag}")
            assert torch.equal(p.cpu().to(torch.float64), torch.stack(ref64).prod(0).to(dt).to(torch.float64)), (tag, p)
            if dt.is_floating_point:
                a = hvd.allreduce(x, op=hvd.Average, name=f"a{tag}")
                assert torch.allclose(a.cpu().double(), sum(ref64) / n, atol=1e-2), (tag, a)
                sc = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0, name=f"sc{tag}")
                assert torch.allclose(sc.cpu().double(), sum(ref64) * 2, atol=1e-2), (tag, sc)
            # Fused: five tensors submitted in opposite orders on odd and even ranks.
            xs = [x[: 10 * (k + 1)] + k for k in range(5)]
            order = list(range(5)) if r % 2 == 0 else list(reversed(range(5)))
            hs = {k: hvd.allreduce_async(xs[k], op=hvd.Sum, name=f"f{tag}.{k}") for k in order}
            for k in range(5):
                got = hvd.synchronize(hs[k]).cpu().to(torch.float64)
                want = sum((base(q)[: 10 * (k + 1)].to(dt) + k).to(torch.float64) for q in range(n))
                assert torch.equal(got, want), (tag, k, got)
            g = hvd.grouped_allreduce([x[:7], x[7:20]], op=hvd.Max, name=f"g{tag}")
            assert torch.equal(g[1].cpu(), torch.stack([base(q).to(dt) for q in range(n)]).max(0).values[7:20]), (tag, g)
        b = hvd.broadcast(x, n - 1, name=f"b{tag}")
        assert b.device == x.device and torch.equal(b.cpu(), base(n - 1).to(dt)), (tag, b)
        z = x.clone()
        hvd.broadcast_(z, 0, name=f"bi{tag}")
        assert torch.equal(z.cpu(), base(0).to(dt)), (tag, z)
        ag = hvd.allgather(x[: r + 1].reshape(-1, 1), name=f"ag{tag}")
        want = torch.cat([base(q)[: q + 1].to(dt).reshape(-1, 1) for q in range(n)])
        assert ag.device == x.device and torch.equal(ag.cpu(), want), (tag, ag)
        splits = [(r + j) % 3 for j in range(n)]
        rows = torch.cat([torch.full((splits[j], 2), j).to(dt) for j in range(n)]).to(dev)
        t, recv = hvd.alltoall(rows, splits=splits, name=f"a2a{tag}")
        assert list(recv.tolist()) == [(q + r) % 3 for q in range(n)], (tag, recv)
        got_rows = sum((q + r) % 3 for q in range(n))
        assert t.device == x.device and t.shape == (got_rows, 2), (tag, t.shape)
        assert torch.equal(t.cpu(), torch.full((got_rows, 2), r).to(dt)), (tag, t)
        if dt is not torch.bool:
            rs = hvd.reducescatter(base(r, 2 * n + 1).to(dt).reshape(-1, 1).to(dev), op=hvd.Sum, name=f"rs{tag}")
            full = sum(base(q, 2 * n + 1).to(dt).to(torch.float64) for q in range(n))
            lo = r * 2 + min(r, 1)
            mine = 3 if r == 0 else 2
            assert rs.device == x.device and torch.equal(rs.cpu().reshape(-1).to(torch.float64), full[lo: lo + mine]), (tag, rs)
""" + TRAIN_THEN_PEER_DEATH.replace("@DONE@", "STAGED-OK")


def _job_passes(tmp_path, source, n, marker):
    """n ranks of `source` under hvdrun: every rank prints `marker`."""
    script = harness.write_script(tmp_path, source)
    job = harness.run_job(n, script, tmp_path=tmp_path, timeout=600)
    assert job.ok(), job.describe()
    assert job.output.count(marker) == n, job.describe()


def _peer_death(tmp_path, source, limit_s, names_rank):
    """2 ranks of `source` with KILL_RANK=1: rank 0 fails on its own within
    limit_s (transport timeout 20 s), naming rank 1 where names_rank."""
    import time
    script = harness.write_script(tmp_path, source)
    t0 = time.time()
    job = harness.run_job(2, script, tmp_path=tmp_path, timeout=limit_s + 150,
                          env={"KILL_RANK": "1", "HVD_TRANSPORT_TIMEOUT": "20"})
    assert not job.ok()
    assert "DYING 1" in job.output, job.describe()
    assert "SURVIVOR-ERROR 0" in job.output, job.describe()
    if names_rank:
        assert "rank 1" in job.output.split("SURVIVOR-ERROR 0", 1)[1], job.describe()
    assert time.time() - t0 < limit_s, job.describe()


@pytest.mark.parametrize("n", [2, 3])
def test_staged_ranks_share_the_gpu(tmp_path, n):
    _job_passes(tmp_path, STAGED_JOB, n, "STAGED-OK")


def test_staged_peer_killed_mid_job(tmp_path):
    _peer_death(tmp_path, STAGED_JOB, 150, names_rank=True)


def _nccl_plugin_built():
    lib = os.environ.get("HVD_LIBRARY_PATH", "")
    folder = os.path.dirname(lib) if lib.endswith(".so") else lib
    return bool(folder) and os.path.exists(os.path.join(folder, "libhvd_transport_nccl.so"))


@pytest.mark.skipif(not _nccl_plugin_built(),
                    reason="libhvd_transport_nccl.so is not next to HVD_LIBRARY_PATH's libhvd.so")
@pytest.mark.parametrize("dtype", [torch.int32, torch.float16, torch.bfloat16, torch.float32,
                                   torch.float64], ids=str)
def test_nccl_world_of_one_matches_host(dtype):
    """hvd.init(transport="nccl"): the NCCL plugin beside the local host
    transport; CUDA allreduces go to NCCL, fused through the device fusion
    buffer with the real kernels (libhvd_cuda_kernels.so), and must give the
    host path's bits (same context, host tensors)."""
    import hvd.torch as hvd
    hvd.init(transport="nccl")
    try:
        dev = torch.device("cuda", 0)
        xs = [((torch.arange(n) % 9) - 2).to(dtype) / (8 if dtype.is_floating_point else 1)
              for n in (7, 33, 4096 + 5)]
        xs = [x.to(dtype) for x in xs]
        for op in (hvd.Sum, hvd.Average, hvd.Max):
            if op is hvd.Average and not dtype.is_floating_point:
                continue
            for pre, post in ((1.0, 1.0), (0.5, 4.0)):
                host = hvd.grouped_allreduce(xs, op=op, prescale_factor=pre,
                                             postscale_factor=post, name=f"h{op}{pre}")
                cuda = hvd.grouped_allreduce([x.to(dev) for x in xs], op=op,
                                             prescale_factor=pre, postscale_factor=post,
                                             name=f"d{op}{pre}")
                for h, c in zip(host, cuda):
                    assert c.device == dev
                    assert torch.equal(h, c.cpu()), (op, pre, post, h, c)
                one = hvd.allreduce(xs[2].to(dev), op=op, name=f"u{op}{pre}",
                                    prescale_factor=pre, postscale_factor=post)
                assert torch.equal(one.cpu(), hvd.allreduce(xs[2], op=op, name=f"uh{op}{pre}",
                                                            prescale_factor=pre,
                                                            postscale_factor=post))
        b = hvd.broadcast(xs[1].to(dev), 0, name="bc")
        assert torch.equal(b.cpu(), xs[1])
    finally:
        hvd.shutdown()


@pytest.mark.skipif(not _nccl_plugin_built(),
                    reason="libhvd_transport_nccl.so is not next to HVD_LIBRARY_PATH's libhvd.so")
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32, torch.int64, torch.float16,
                                   torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_nccl_world_of_one_owned_results_stay_on_the_device(dtype):
    """Allgather, alltoall and reducescatter of CUDA tensors run on NCCL and
    leave their results in device memory the handle owns: hvd.torch views
    it (no copy to host and back), with the host path's bits."""
    import hvd.torch as hvd
    hvd.init(transport="nccl")
    try:
        dev = torch.device("cuda", 0)
        x = ((torch.arange(7 * 3) % 9) + 1).to(dtype).reshape(7, 3)
        if dtype.is_floating_point:
            x = x / 8
        g = hvd.allgather(x.to(dev), name="ag")
        assert g.device == dev and torch.equal(g.cpu(), hvd.allgather(x, name="agh"))
        t = hvd.alltoall(x.to(dev), name="a2a")
        assert t.device == dev and torch.equal(t.cpu(), hvd.alltoall(x, name="a2ah"))
        ops = [hvd.Sum, hvd.Max, hvd.Min] + ([hvd.Average] if dtype.is_floating_point else [])
        for op in ops:
            for pre, post in ((1.0, 1.0), (0.5, 4.0)):
                name = f"rs{op}{pre}"
                rs = hvd.reducescatter(x.to(dev), op=op, prescale_factor=pre,
                                       postscale_factor=post, name=name)
                want = hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post,
                                         name=name + "h")
                assert rs.device == dev and torch.equal(rs.cpu(), want), (op, pre, post, rs)
        # The view outlives the handle's other references, and ops on it work.
        kept = hvd.allgather(x.to(dev), name="kept")
        import gc
        gc.collect()
        assert torch.equal((kept + 0).cpu(), x)
        # A process set opens NCCL again over its members (here: one).
        ps = hvd.add_process_set([0])
        s = hvd.allreduce(x.to(dev), op=hvd.Sum, name="ps.ar", process_set=ps)
        assert s.device == dev and torch.equal(s.cpu(), x)
        pg = hvd.allgather(x.to(dev), name="ps.ag", process_set=ps)
        assert pg.device == dev and torch.equal(pg.cpu(), x)
        hvd.remove_process_set(ps)
    finally:
        hvd.shutdown()


# ---- several GPUs: tests/gpu/run.sh --multi-gpu (HVD_TEST_MULTI_GPU=1) --------------------

MULTI_GPU = os.environ.get("HVD_TEST_MULTI_GPU") == "1"

NCCL_JOB = """
    import os, sys, time
    import torch
    import hvd.torch as hvd
    hvd.init(transport="nccl")
    r, n = hvd.rank(), hvd.size()
    torch.cuda.set_device(hvd.local_rank())
    dev = torch.device("cuda", hvd.local_rank())
    for dt in (torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
               torch.float32, torch.float64):
        x = ((torch.arange(1000) + r) % 5).to(dt).to(dev)
        want = sum(((torch.arange(1000) + q) % 5).to(torch.float64) for q in range(n))
        s = hvd.allreduce(x, op=hvd.Sum, name=f"s{dt}")
        assert torch.equal(s.cpu().to(torch.float64), want), (dt, s)
        m = hvd.allreduce(x, op=hvd.Max, name=f"m{dt}")
        assert torch.equal(m.cpu(), torch.full((1000,), 4).to(dt)) if n >= 5 else True
        if dt.is_floating_point:
            a = hvd.allreduce(x, op=hvd.Average, name=f"a{dt}")
            assert torch.allclose(a.cpu().double(), want / n, atol=1e-2), (dt, a)
        # A fused group in different orders per rank (names, not order, match).
        xs = [x[: 10 * (k + 1)] + k for k in range(5)]
        names = [f"g{dt}.{k}" for k in range(5)]
        order = list(range(5)) if r % 2 == 0 else list(reversed(range(5)))
        hs = {k: hvd.allreduce_async(xs[k], op=hvd.Sum, name=names[k]) for k in order}
        for k in range(5):
            got = hvd.synchronize(hs[k]).cpu().to(torch.float64)
            ref = sum((((torch.arange(1000) + q) % 5)[: 10 * (k + 1)] + k).to(torch.float64)
                      for q in range(n))
            assert torch.equal(got, ref), (dt, k, got)
        b = hvd.broadcast(x, n - 1, name=f"b{dt}")
        assert torch.equal(b.cpu(), ((torch.arange(1000) + n - 1) % 5).to(dt)), dt
        g = hvd.allgather(x[: r + 1].reshape(-1, 1), name=f"ag{dt}")
        assert g.device == dev and g.shape[0] == n * (n + 1) // 2, g.shape
        t = hvd.alltoall(torch.full((n,), r, device=dev).to(dt), name=f"a2a{dt}")
        assert t.device == dev and torch.equal(t.cpu(), torch.arange(n).to(dt)), t
        # 2n + 1 rows: the blocks are uneven (grouped reduces on NCCL).
        rows = torch.arange(2 * n + 1).repeat_interleave(2).reshape(-1, 2) + r
        rs = hvd.reducescatter(rows.to(dt).to(dev), op=hvd.Sum, name=f"rs{dt}")
        lo = r * 2 + min(r, 1)
        mine = 3 if r == 0 else 2
        ref = sum((torch.arange(2 * n + 1).repeat_interleave(2).reshape(-1, 2) + q).to(torch.float64)
                  for q in range(n))[lo: lo + mine]
        assert rs.device == dev and torch.equal(rs.cpu().to(torch.float64), ref), (dt, rs)
    # A process set of the even ranks: its own NCCL communicator.
    evens = hvd.add_process_set(list(range(0, n, 2)))
    if r % 2 == 0:
        e = hvd.allreduce(torch.full((5,), float(r), device=dev), op=hvd.Sum, name="evens",
                          process_set=evens)
        assert torch.equal(e.cpu(), torch.full((5,), float(sum(range(0, n, 2))))), e
        eg = hvd.allgather(torch.full((1, 2), r, device=dev), name="evens.ag", process_set=evens)
        assert eg.device == dev and eg[:, 0].tolist() == list(range(0, n, 2)), eg
    hvd.remove_process_set(evens)
    # A host tensor in the same job goes over the CPU transport.
    h = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="host")
    assert torch.equal(h, torch.full((3,), float(n)))
""" + TRAIN_THEN_PEER_DEATH.replace("@DONE@", "NCCL-OK")


@pytest.mark.skipif(not MULTI_GPU, reason="multi-GPU tests: tests/gpu/run.sh --multi-gpu")
@pytest.mark.parametrize("n", [2, 4, 8])
def test_nccl_ranks(tmp_path, n):
    if torch.cuda.device_count() < n:
        pytest.skip(f"{n} ranks need {n} GPUs; this host has {torch.cuda.device_count()}")
    _job_passes(tmp_path, NCCL_JOB, n, "NCCL-OK")


@pytest.mark.skipif(not MULTI_GPU, reason="multi-GPU tests: tests/gpu/run.sh --multi-gpu")
def test_nccl_peer_death(tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs; this host has {torch.cuda.device_count()}")
    # NCCL does not say which rank failed: the message is not checked for one.
    _peer_death(tmp_path, NCCL_JOB, 120, names_rank=False)
