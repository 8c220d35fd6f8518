"""Horovod scripts on hvd.torch (`import hvd.torch as hvd` in place of
`import horovod.torch as hvd`): capability queries, Horovod's error types,
join(device=-1), poll/synchronize on every kind of handle, hvd.elastic."""

import importlib

import pytest

import harness
from test_horovod_api import (
    CAPABILITIES,
    NO_SUCH_TRANSPORT,
    caps_job,
    check_caps_job,
    check_handles_job,
    handles_job,
    mpi_reason,
    plugin_next_to_library,
    run_hvdrun,
)

pytest.importorskip("torch", reason="torch is not installed (requirements-test.txt)")

import hvd  # noqa: E402
import hvd.torch as hvdt  # noqa: E402


def test_capability_queries_are_there_and_agree():
    assert not hvdt.is_initialized()
    for name in CAPABILITIES:
        assert getattr(hvdt, name)() == getattr(hvd, name)(), name
    assert hvdt.gloo_built() is True and hvdt.mpi_built() is plugin_next_to_library("mpi")
    for name in NO_SUCH_TRANSPORT:
        assert getattr(hvdt, name)() is False, name
    assert hvdt.mpi_enabled() is False and hvdt.gloo_enabled() is False
    with pytest.raises(ValueError):
        hvdt.mpi_threads_supported()


def test_capabilities_under_hvdrun_gloo(tmp_path, hvdrun):
    script = harness.write_script(tmp_path, caps_job("hvd.torch"))
    p, res = run_hvdrun(hvdrun, ["--gloo"], 2, script, tmp_path)
    check_caps_job(p, res, "gloo")


@pytest.mark.skipif(mpi_reason() is not None, reason=f"hvdrun --mpi: {mpi_reason()}")
def test_capabilities_under_hvdrun_mpi(tmp_path, hvdrun):
    script = harness.write_script(tmp_path, caps_job("hvd.torch"))
    p, res = run_hvdrun(hvdrun, ["--mpi"], 2, script, tmp_path)
    check_caps_job(p, res, "mpi")


def test_error_types():
    assert hvdt.HorovodInternalError is hvd.HorovodInternalError
    assert issubclass(hvd.TransportError, hvdt.HorovodInternalError)
    assert issubclass(hvd.DuplicateNameError, ValueError)


def test_join_accepts_device():
    import torch
    hvdt.init()
    try:
        assert hvdt.join(device=-1) == 0  # a world of one: rank 0 joined last
        out = hvdt.allreduce(torch.ones(2), name="after_join")
        assert out.tolist() == [1.0, 1.0]
        with pytest.raises(TypeError, match="device"):
            hvdt.join(device=torch.device("cpu"))
    finally:
        hvdt.shutdown()


TORCH_SETUP = """
import torch
def arr(v):
    return torch.tensor(v, dtype=torch.float64)
def lst(v):
    if v is None or isinstance(v, int):
        return v
    if isinstance(v, (list, tuple)):
        return [lst(e) for e in v]
    return v.tolist()
"""


def test_poll_and_synchronize_every_handle_kind(tmp_path, hvdrun):
    script = harness.write_script(tmp_path, handles_job("hvd.torch", TORCH_SETUP))
    job = harness.run_job(2, script, launcher="hvdrun", tmp_path=tmp_path, timeout=240)
    check_handles_job(job)


def test_elastic():
    """hvd.torch.elastic is Horovod's (test_elastic.py tests what it does)."""
    assert importlib.import_module("hvd.torch.elastic") is hvdt.elastic
    for name in ("run", "TorchState", "ElasticSampler", "State", "ObjectState"):
        assert callable(getattr(hvdt.elastic, name)), name
    ns = {}
    exec("from hvd.torch.elastic import TorchState, ElasticSampler", ns)
    assert ns["TorchState"] is hvdt.elastic.TorchState
