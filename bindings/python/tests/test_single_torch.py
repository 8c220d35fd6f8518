"""hvd.torch in a world of one."""

import warnings

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (requirements-test.txt)")

import hvd.torch as hvd  # noqa: E402


@pytest.fixture
def world():
    hvd.init()
    yield
    while hvd.is_initialized():
        hvd.shutdown()


def test_non_cpu_tensor_is_refused_clearly(world):
    t = torch.empty(3, device="meta")  # stands in for a CUDA tensor on a GPU-less machine
    with pytest.raises(hvd.HvdError, match="meta.*host memory and CUDA memory only"):
        hvd.allreduce(t)


def test_wrong_dtype_and_type(world):
    with pytest.raises(TypeError, match="complex64 is not supported"):
        hvd.allreduce(torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(TypeError, match="torch.Tensor"):
        hvd.allreduce([1.0])


def test_zero_copy_and_non_contiguous(world):
    x = torch.arange(6.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", hvd.PerformanceWarning)
        assert hvd.allreduce_(x) is x
    base = torch.arange(12.0).reshape(3, 4)
    view = base.t()
    with pytest.warns(hvd.PerformanceWarning):
        out = hvd.allreduce_(view, op=hvd.Sum)
    assert out is view and torch.equal(base, torch.arange(12.0).reshape(3, 4))


def test_results_share_handle_memory(world):
    x = torch.arange(6, dtype=torch.int32).reshape(3, 2)
    g = hvd.allgather(x)
    assert torch.equal(g, x) and g.data_ptr() != x.data_ptr()


def test_optimizer_world_of_one_equals_plain():
    hvd.init()
    try:
        torch.manual_seed(0)
        a = torch.nn.Linear(4, 2)
        b = torch.nn.Linear(4, 2)
        b.load_state_dict(a.state_dict())
        oa = torch.optim.SGD(a.parameters(), lr=0.1, momentum=0.9)
        ob = hvd.DistributedOptimizer(torch.optim.SGD(b.parameters(), lr=0.1, momentum=0.9),
                                      named_parameters=b.named_parameters())
        assert isinstance(ob, torch.optim.SGD)
        x = torch.randn(8, 4)
        for _ in range(3):
            for m, o in ((a, oa), (b, ob)):
                o.zero_grad()
                m(x).pow(2).mean().backward()
                o.step()
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.equal(p, q)
    finally:
        hvd.shutdown()


def test_optimizer_world_of_one_reduces_nothing(world, monkeypatch):
    # As Horovod's: no hooks in a world of one that is not elastic, so no
    # allreduce a gradient, and a compressed optimizer's gradients are
    # autograd's own, not rounded through float16.
    from hvd import _ops
    submits = []
    real = _ops._submit
    monkeypatch.setattr(_ops, "_submit", lambda fn, *a: submits.append(fn) or real(fn, *a))
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 2), torch.nn.Linear(4, 2)
    b.load_state_dict(a.state_dict())
    oa = torch.optim.SGD(a.parameters(), lr=0.1)
    ob = hvd.DistributedOptimizer(torch.optim.SGD(b.parameters(), lr=0.1),
                                  named_parameters=b.named_parameters(),
                                  compression=hvd.Compression.fp16, backward_passes_per_step=2)
    x = torch.randn(8, 4) * 1e-3
    for _ in range(2):
        for m, o in ((a, oa), (b, ob)):
            o.zero_grad()
            for _ in range(2):
                m(x).pow(2).mean().backward()
            o.step()
    assert submits == [] and not ob._handles
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    # An elastic world of one reduces (ranks may join): the hooks are there.
    from hvd import elastic
    monkeypatch.setattr(elastic, "membership", lambda: elastic.Membership(True, False, 0))
    oc = hvd.DistributedOptimizer(torch.optim.SGD(b.parameters(), lr=0.1),
                                  named_parameters=b.named_parameters())
    oc.zero_grad()
    b(x).pow(2).mean().backward()
    assert len(oc._handles) == 2 and submits.count("hvd_allreduce_async") == 2
    oc.step()
    assert not oc._handles


def test_optimizer_argument_checks(world):
    m = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="does not cover"):
        hvd.DistributedOptimizer(opt, named_parameters=[("w", m.weight)])
    with pytest.raises(ValueError, match="backward_passes_per_step"):
        hvd.DistributedOptimizer(opt, backward_passes_per_step=0)
    with pytest.raises(TypeError):
        hvd.DistributedOptimizer(object())


def test_host_results_ask_no_stream_to_wait(world, monkeypatch):
    # Waiting on a handle orders the waiting code's CUDA stream after a CUDA
    # result (stream-ordered completion); host tensors never ask for a stream.
    from hvd import _ops
    assert _ops.consumer_stream is not None  # installed by hvd.torch
    asked = []
    monkeypatch.setattr(_ops, "consumer_stream", lambda device: asked.append(device) or 0)
    assert torch.equal(hvd.allreduce(torch.arange(4.0), op=hvd.Sum), torch.arange(4.0))
    assert torch.equal(hvd.allgather(torch.arange(2)), torch.arange(2))
    assert asked == []


def test_cuda_device_of_an_ops_buffers():
    from hvd import _ops
    from hvd import _c_api as C
    host = _ops.Buf(0, C.HVD_FLOAT32, (1,), None, None, False, 4)
    dev = _ops.Buf(0, C.HVD_FLOAT32, (1,), None, None, False, 4, device=1, stream=7)
    assert _ops._cuda_device_of((host, None)) is None
    assert _ops._cuda_device_of((host, [host, dev])) == 1
    assert _ops._cuda_device_of(()) is None
