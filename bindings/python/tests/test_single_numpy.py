"""The numpy API in a world of one (no launcher)."""

import gc
import os
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

import harness
import hvd
from workers import np_ops


def test_ops_before_init_raise_not_initialized():
    assert not hvd.is_initialized()
    for call in (hvd.rank, hvd.size, hvd.local_rank, hvd.cross_size, hvd.barrier,
                 lambda: hvd.allreduce(np.ones(2)), lambda: hvd.allgather(np.ones(2)),
                 lambda: hvd.broadcast(np.ones(2), 0), lambda: hvd.allreduce_async(np.ones(2))):
        with pytest.raises(hvd.NotInitializedError) as e:
            call()
        assert e.value.status == -2 and "hvd_init" in str(e.value)
    with pytest.raises(hvd.NotInitializedError):
        hvd.shutdown()


def test_world_of_one(hvd_world):
    assert (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(),
            hvd.cross_size()) == (0, 1, 0, 1, 0, 1)
    assert hvd.is_initialized() and hvd.transport() == "local"


def test_init_is_reference_counted():
    hvd.init()
    hvd.init()
    hvd.shutdown()
    assert hvd.is_initialized()
    hvd.shutdown()
    assert not hvd.is_initialized()


@pytest.mark.parametrize("dtype", np_ops.DTYPES)
@pytest.mark.parametrize("op", np_ops.OPS)
def test_allreduce_every_dtype_op(hvd_world, dtype, op):
    x = np_ops.value(dtype, 0)
    if dtype == "bool" and op == "Average":
        with pytest.raises(hvd.UnsupportedError):
            hvd.allreduce(x, op=hvd.Average)
        return
    np_ops.check_equal(hvd.allreduce(x, op=getattr(hvd, op)), np_ops.expected_reduce(dtype, op, 1),
                       dtype)


@pytest.mark.parametrize("dtype", np_ops.DTYPES)
def test_other_ops_every_dtype(hvd_world, dtype):
    x = np_ops.value(dtype, 0, (4, 2))
    for got in (hvd.allgather(x), hvd.broadcast(x, 0), hvd.alltoall(x), hvd.reducescatter(
            x, op=hvd.Max if dtype == "bool" else hvd.Sum)):
        np_ops.check_equal(got, x, dtype)
        assert not np.shares_memory(got, x)


def test_zero_copy_in_place(hvd_world):
    x = np.arange(10, dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", hvd.PerformanceWarning)  # no copy may happen
        assert hvd.allreduce_(x) is x
        h = hvd.broadcast_async_(x, 0)
        assert h._keep.contig is x  # the handle holds the caller's own array
        assert hvd.synchronize(h) is x


def test_non_contiguous_copied_once_with_warning(hvd_world):
    base = np.arange(20, dtype=np.float64).reshape(4, 5)
    view = base.T
    with pytest.warns(hvd.PerformanceWarning, match="not C-contiguous") as rec:
        got = hvd.allreduce(view, op=hvd.Sum)
    assert len(rec) == 1
    assert rec[0].filename == __file__  # points at the caller's line
    np.testing.assert_array_equal(got, view)
    swapped = np.arange(4, dtype=">i4")
    with pytest.warns(hvd.PerformanceWarning, match="byte order"):
        got = hvd.allreduce(swapped, op=hvd.Sum)
    np.testing.assert_array_equal(got, np.arange(4))


def test_wrong_dtype_and_arguments(hvd_world):
    for bad in (np.zeros(2, np.uint32), np.zeros(2, np.complex64), np.array(["a"]),
                np.zeros(2, object)):
        with pytest.raises(TypeError, match="not supported"):
            hvd.allreduce(bad)
    with pytest.raises(ValueError, match="op must be"):
        hvd.allreduce(np.ones(2), op=17)
    with pytest.raises(ValueError, match="read-only"):
        a = np.ones(2)
        a.flags.writeable = False
        hvd.allreduce_(a)
    with pytest.raises(TypeError):
        hvd.allreduce_([1.0, 2.0])
    with pytest.raises(hvd.InvalidArgumentError, match="root"):
        hvd.broadcast(np.ones(2), 3)
    with pytest.raises(ValueError, match="at least one dimension"):
        hvd.allgather(np.float32(1))
    with pytest.raises(ValueError, match="one per rank"):
        hvd.alltoall(np.ones((2, 2)), splits=[1, 1])
    with pytest.raises(ValueError, match="non-empty"):
        hvd.allreduce(np.ones(2), name="")


def test_python_scalars_and_lists(hvd_world):
    assert float(hvd.allreduce(3.5)) == 3.5
    np.testing.assert_array_equal(hvd.allgather([[1, 2]]), [[1, 2]])


def test_async_handles_and_results(hvd_world):
    hs = [hvd.allreduce_async(np.full(3, i, np.int32), op=hvd.Sum) for i in range(10)]
    for i, h in enumerate(hs):
        np.testing.assert_array_equal(hvd.synchronize(h), np.full(3, i))
        assert hvd.poll(h) and "done" in repr(h)
    with pytest.raises(TypeError):
        hvd.synchronize(object())
    h = hvd.allgather_async(np.ones((2, 3)))
    assert h.wait(timeout=30).shape == (2, 3)


def test_objects(hvd_world):
    obj = {"a": [1, 2, 3], "b": np.arange(3)}
    got = hvd.broadcast_object(obj)
    assert got["a"] == obj["a"] and (got["b"] == obj["b"]).all() and got is not obj
    assert hvd.allgather_object("x") == ["x"]


def test_grouped_and_barrier(hvd_world):
    out = hvd.grouped_allreduce([np.ones(2), np.zeros(3)], op=hvd.Sum)
    assert [o.tolist() for o in out] == [[1, 1], [0, 0, 0]]
    hvd.barrier()
    with pytest.raises(hvd.InvalidArgumentError, match="one dtype"):
        hvd.grouped_allreduce([np.ones(2), np.zeros(2, np.int32)])


def test_dropped_pending_handles_are_reaped(hvd_world):
    for _ in range(50):
        hvd.allreduce_async(np.ones(1000))
    gc.collect()
    hvd.barrier()
    hvd._ops.reap_orphans()
    assert len(hvd._ops._orphans) == 0


def test_shutdown_aborts_or_completes_pending_ops():
    hvd.init()
    h = hvd.allreduce_async(np.ones(10))
    hvd.shutdown()
    try:
        np.testing.assert_array_equal(hvd.synchronize(h), np.ones(10))
    except hvd.AbortedError:
        pass  # either outcome is allowed: it may have finished first


def test_auto_names_are_deterministic(hvd_world):
    h = hvd.allreduce_async(np.ones(1))
    assert "allreduce.noname.0" in repr(h)
    hvd.synchronize(h)
    h = hvd.allreduce_async(np.ones(1))
    assert "allreduce.noname.1" in repr(h)
    hvd.synchronize(h)


def test_init_settings_validation():
    with pytest.raises(TypeError, match="unknown setting"):
        hvd.init(no_such_setting=1)
    with pytest.raises(ValueError, match="log_level"):
        hvd.init(log_level="loud")
    with pytest.raises(hvd.InvalidArgumentError, match="cycle time"):
        hvd.init(cycle_time_ms=-5.0)
    assert not hvd.is_initialized()


def test_init_with_settings_and_log_callback():
    lines = []
    hvd.init(log_level="debug", log_fn=lambda lvl, msg: lines.append((lvl, msg)),
             fusion_threshold_bytes=1 << 20, cycle_time_ms=2.0, transport="local")
    try:
        hvd.allreduce(np.ones(2))
    finally:
        hvd.shutdown()
    assert any("config:" in m for _, m in lines), lines[:5]
    assert any("fusion_threshold=1048576" in m for _, m in lines)


def _config_line(**settings):
    """The "config: ..." line hvd.init(**settings) logs at debug level."""
    lines = []
    hvd.init(log_level="debug", log_fn=lambda lvl, msg: lines.append(msg), **settings)
    hvd.shutdown()
    found = [m for m in lines if m.startswith("config: ")]
    assert found, lines[:5]
    return found[0]


def test_init_autotune_overrides_environment(monkeypatch):
    monkeypatch.setenv("HVD_AUTOTUNE", "1")
    assert "autotune=on" in _config_line()  # not given: the environment
    assert "autotune=off" in _config_line(autotune=False)
    monkeypatch.setenv("HVD_AUTOTUNE", "off")
    assert "autotune=on" in _config_line(autotune=True)
    with pytest.raises(hvd.InvalidArgumentError, match="params.autotune is 2"):
        hvd.init(autotune=2)
    with pytest.raises(TypeError, match="autotune must be a bool"):
        hvd.init(autotune="yes")
    assert not hvd.is_initialized()


def test_init_transport_path_overrides_environment(monkeypatch, tmp_path):
    """A transport asked for by name is looked up in transport_path (even where
    a world of one runs on "local"); "alias" exists only in tmp_path."""
    gloo = os.path.join(harness.library_dir(), "libhvd_transport_gloo.so")
    if not os.path.isfile(gloo):
        pytest.skip("no Gloo plugin next to libhvd.so")
    os.symlink(gloo, tmp_path / "libhvd_transport_alias.so")
    monkeypatch.setenv("HVD_TRANSPORT_PATH", str(tmp_path))
    assert f"transport_path={tmp_path}" in _config_line(transport="alias")
    with pytest.raises(hvd.NotFoundError, match="/nonexistent/hvd-plugins") as e:
        hvd.init(transport="alias", transport_path="/nonexistent/hvd-plugins")
    assert "libhvd_transport_alias.so" in str(e.value) and str(tmp_path) not in str(e.value)
    with pytest.raises(hvd.NotFoundError):  # "": the default, next to libhvd.so only
        hvd.init(transport="alias", transport_path="")
    monkeypatch.delenv("HVD_TRANSPORT_PATH")
    assert f"transport_path={tmp_path}" in _config_line(transport="alias",
                                                        transport_path=tmp_path)
    lib = harness.library_dir()
    assert f"transport_path={lib}" in _config_line(transport="gloo", transport_path=lib)
    assert not hvd.is_initialized()


def test_contexts_as_threads_with_oob_callback():
    """Two explicit contexts in one process (ranks as threads), bootstrapped
    through a Python out-of-band allgather."""
    size = 2
    barrier = threading.Barrier(size)
    slots = [None] * size
    results = [None] * size

    def oob_for(rank):
        def allgather(data):
            slots[rank] = data
            barrier.wait()
            out = b"".join(slots)
            barrier.wait()
            return out
        return allgather

    def run(rank):
        try:
            with hvd.Context(rank=rank, size=size, oob_allgather=oob_for(rank),
                             start_timeout_s=30) as ctx:
                assert (ctx.rank(), ctx.size()) == (rank, size)
                s = ctx.allreduce(np.full(3, rank + 1.0), op=hvd.Sum, name="t")
                g = ctx.allgather(np.full((1,), rank, np.int64), name="g")
                o = ctx.broadcast_object({"from": rank}, root_rank=1)
                results[rank] = (s.tolist(), g.tolist(), o, ctx.transport())
        except BaseException as e:  # noqa: B902
            results[rank] = e

    threads = [threading.Thread(target=run, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for r in range(size):
        assert not isinstance(results[r], BaseException), results[r]
        assert results[r] == ([3.0, 3.0, 3.0], [0, 1], {"from": 1}, "gloo")


def test_closed_context_refuses_ops():
    ctx = hvd.Context()
    ctx.close()
    with pytest.raises(hvd.NotInitializedError, match="closed"):
        ctx.allreduce(np.ones(2))


def test_import_hvd_needs_no_framework():
    code = ("import sys\n"
            "for m in ('torch', 'tensorflow', 'keras'): sys.modules[m] = None\n"
            "import hvd, numpy as np\nhvd.init(); print(hvd.allreduce(np.ones(2)).tolist())\n"
            "for mod in ('hvd.torch', 'hvd.tensorflow', 'hvd.keras'):\n"
            "    try:\n        __import__(mod)\n    except ImportError as e:\n"
            "        print(mod, 'ImportError:', e)\n")
    p = subprocess.run([sys.executable, "-c", code], env=harness.child_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    out = p.stdout.decode()
    assert p.returncode == 0, out
    assert "[1.0, 1.0]" in out
    assert "hvd.torch ImportError: hvd.torch needs PyTorch" in out
    assert "hvd.tensorflow ImportError: hvd.tensorflow needs TensorFlow" in out
    assert "hvd.keras ImportError: hvd.keras needs TensorFlow" in out


def test_nccl_without_a_gpu_is_refused_clearly():
    # hvd.init(transport="nccl") on a host without a usable GPU fails at once,
    # naming the transport, the host and why (CUDA's own answer).
    if not hvd.nccl_built():
        pytest.skip("this build has no NCCL transport")
    try:
        hvd.init(transport="nccl")
    except hvd.UnsupportedError as e:
        msg = str(e)
        assert "transport 'nccl' failed to start" in msg, msg
        assert "no CUDA device on host" in msg and "one GPU per rank" in msg, msg
        assert not hvd.is_initialized()
        return
    try:
        pytest.skip("this host has a GPU: hvd.init(transport='nccl') started")
    finally:
        hvd.shutdown()


def test_device_arrays_are_refused_by_name(hvd_world):
    # An array in device memory (CuPy's, a CUDA tensor through DLPack) is
    # refused before anything is sent, naming its type and what to use.
    class CudaArray:
        __cuda_array_interface__ = {"shape": (2,), "typestr": "<f4", "data": (0, False),
                                    "version": 3}

    class DlpackOnDevice:
        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

    for x in (CudaArray(), DlpackOnDevice()):
        with pytest.raises(hvd.UnsupportedError, match="is device memory; the numpy frontend "
                                                       "moves host memory only"):
            hvd.allreduce(x)
    assert np.array_equal(hvd.allreduce(np.arange(3.0)), np.arange(3.0))
