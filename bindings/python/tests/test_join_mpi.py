"""join() (uneven data) and the MPI transport (hvd.init(comm=...)).

Both need core pieces that may be missing from the library under test; each
test is skipped -- with the probe's reason -- only when its capability probe
says so, never silently."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import harness
import hvd
import hvd._c_api as C


def _probe_join():
    """None if hvd_join_async works in a world of one, else why not."""
    if "hvd_join_async" in C.MISSING or not hasattr(C.lib(), "hvd_join_async"):
        return "libhvd does not export hvd_join_async yet"
    if isinstance(C.lib().hvd_join_async, C._MissingFunction):
        return "libhvd does not export hvd_join_async yet"
    code = ("import hvd\nhvd.init()\ntry:\n    hvd.join()\n    print('joined')\n"
            "except hvd.HvdError as e:\n    print(f'{type(e).__name__}: {e}')\n")
    p = subprocess.run([sys.executable, "-c", code], env=harness.child_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    out = p.stdout.decode().strip()
    if p.returncode != 0 or not out.endswith("joined"):
        return "hvd.join() in a world of one gives " + out.splitlines()[-1][-300:]
    return None


def _probe_mpi():
    if C.plugin_path("mpi") is None:
        return (f"MPI transport plugin libhvd_transport_mpi.so is not built next to "
                f"{C.library_path()}")
    if not harness.have_module("mpi4py"):
        return "mpi4py is not installed"
    if shutil.which("mpirun") is None:
        return "mpirun (Open MPI) is not installed"
    return None


JOIN_REASON = _probe_join()
MPI_REASON = _probe_mpi()
needs_join = pytest.mark.skipif(JOIN_REASON is not None, reason=f"join: {JOIN_REASON}")
needs_mpi = pytest.mark.skipif(MPI_REASON is not None, reason=f"mpi: {MPI_REASON}")

JOIN_JOB = """
import sys, numpy as np
import hvd
sys.path.insert(0, {workers!r})
from common import write
hvd.init()
r, n = hvd.rank(), hvd.size()
got = []
for i in range(r + 1):  # rank r has r + 1 batches: uneven data
    got.append(hvd.allreduce(np.full(3, 1.0), op=hvd.Average, name=f"batch.{{i}}").tolist())
last = hvd.join()
write(r, {{"got": got, "last": last}})
hvd.shutdown()
"""


@needs_join
def test_join_world_of_one(hvd_world):
    hvd.join()
    np.testing.assert_array_equal(hvd.allreduce(np.ones(2)), np.ones(2))


@needs_join
@pytest.mark.parametrize("size", [2, 3])
def test_join_uneven_batches(tmp_path, hvdrun, size):
    script = harness.write_script(tmp_path, JOIN_JOB.format(workers=harness.WORKERS))
    job = harness.run_job(size, script, tmp_path=tmp_path, timeout=120)
    assert job.ok(), job.describe()
    for r in range(size):
        got = job.results[r]["got"]
        for i, v in enumerate(got):
            active = size - i  # ranks with a batch i; joined ranks contribute zeros
            assert v == pytest.approx([active / size] * 3), (r, i, v)
        # join() returns the rank that joined last: rank size-1 has the most
        # batches, and its last allreduce needed every other rank's join.
        assert job.results[r]["last"] == size - 1, (r, job.results[r])


MPI_JOB = """
import sys, numpy as np
from mpi4py import MPI
import hvd
sys.path.insert(0, {workers!r})
from common import write
world = MPI.COMM_WORLD
comm = world if {split} == 0 else world.Split(world.Get_rank() % 2, world.Get_rank())
hvd.init(comm=comm)
out = {{"rank": hvd.rank(), "size": hvd.size(), "transport": hvd.transport(),
        "threads": hvd.mpi_threads_supported(),
        "sum": hvd.allreduce(np.full(2, world.Get_rank(), np.int64), op=hvd.Sum).tolist(),
        "query_thread": MPI.Query_thread() == MPI.THREAD_MULTIPLE}}
write(world.Get_rank(), out)
hvd.shutdown()
"""


def _mpirun(np_, script, tmp_path):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np_),
           "-x", "HVD_TEST_OUT", "-x", "HVD_LIBRARY_PATH", "-x", "PYTHONPATH",
           sys.executable, script]
    env = harness.child_env({"HVD_TEST_OUT": str(tmp_path)})
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=180)
    import json
    results = {}
    for r in range(np_):
        path = tmp_path / f"rank{r}.json"
        if path.exists():
            results[r] = json.loads(path.read_text())
    return p, results


@needs_mpi
def test_init_with_mpi4py_world(tmp_path):
    script = harness.write_script(tmp_path, MPI_JOB.format(workers=harness.WORKERS, split=0))
    p, res = _mpirun(2, script, tmp_path)
    assert p.returncode == 0, p.stdout.decode()[-4000:]
    for r in range(2):
        assert (res[r]["rank"], res[r]["size"], res[r]["transport"]) == (r, 2, "mpi")
        assert res[r]["sum"] == [1, 1]
        assert res[r]["threads"] == res[r]["query_thread"]


@needs_mpi
def test_init_with_mpi4py_split_subcommunicator(tmp_path):
    script = harness.write_script(tmp_path, MPI_JOB.format(workers=harness.WORKERS, split=1))
    p, res = _mpirun(4, script, tmp_path)
    assert p.returncode == 0, p.stdout.decode()[-4000:]
    for w in range(4):
        color_members = [q for q in range(4) if q % 2 == w % 2]
        assert res[w]["size"] == 2 and res[w]["rank"] == color_members.index(w)
        assert res[w]["sum"] == [sum(color_members)] * 2


def test_mpi_threads_supported_without_mpi_raises(hvd_world):
    with pytest.raises(hvd.UnsupportedError):
        hvd.mpi_threads_supported()


def test_init_comm_rejects_non_communicators():
    if not harness.have_module("mpi4py"):
        with pytest.raises(ImportError, match="mpi4py"):
            hvd.init(comm=object())
    else:
        with pytest.raises(TypeError, match="mpi4py communicator"):
            hvd.init(comm=[0, 1])
    assert not hvd.is_initialized()
