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
