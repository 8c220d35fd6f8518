"""Horovod scripts on hvd, numpy frontend (`import hvd`): the capability
queries, Horovod's error types, join(device=-1), poll/synchronize on every
kind of handle, and hvd.elastic. The multi-process jobs are written the way a
Horovod script is, with only the import line changed, and launched with
hvdrun's horovodrun-style flags (--gloo, --mpi).

The helpers here (run_hvdrun, CAPABILITIES, ...) are shared with
test_horovod_torch.py and test_horovod_tensorflow.py."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import harness
import hvd
import hvd._c_api as C

# Horovod's capability queries, in every frontend.
BUILT = ("mpi_built", "gloo_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built",
         "rocm_built")
ENABLED = ("mpi_enabled", "gloo_enabled")
CAPABILITIES = BUILT + ENABLED
NO_SUCH_TRANSPORT = ("ddl_built", "ccl_built", "rocm_built")
HOROVOD_VARS = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
                "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE")


def plugin_next_to_library(name):
    return os.path.isfile(os.path.join(os.path.dirname(C.library_path()),
                                       f"libhvd_transport_{name}.so"))


def mpi_reason():
    """None when hvdrun --mpi can run here, else why not."""
    if not plugin_next_to_library("mpi"):
        return f"the MPI transport plugin is not built next to {C.library_path()}"
    if shutil.which("mpirun") is None:
        return "mpirun (Open MPI) is not installed"
    return None


def run_hvdrun(hvdrun, flags, np_, script, tmp_path, timeout=240):
    """hvdrun FLAGS -np N -- python script; (CompletedProcess, {rank: result})."""
    env = harness.child_env({"HVD_TEST_OUT": str(tmp_path)})
    for k in HOROVOD_VARS:
        env.pop(k, None)
    p = subprocess.run([hvdrun, *flags, "-np", str(np_), "--", sys.executable, script], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    results = {}
    for r in range(np_):
        path = os.path.join(str(tmp_path), f"rank{r}.json")
        if os.path.exists(path):
            with open(path) as f:
                results[r] = json.load(f)
    return p, results


def describe(p):
    return f"exit code {p.returncode}\n--- output ---\n{p.stdout.decode(errors='replace')[-6000:]}"


# A Horovod script's capability checks; {frontend} is the module imported as hvd.
CAPS_JOB = """
import os, sys
import {frontend} as hvd   # a Horovod script: import horovod.<framework> as hvd
sys.path.insert(0, {workers!r})
from common import write
hvd.init()
caps = {{name: getattr(hvd, name)() for name in {caps!r}}}
try:
    threads = hvd.mpi_threads_supported()
except ValueError as e:  # Horovod: ValueError when MPI is not enabled
    threads = "ValueError: " + str(e)
write(hvd.rank(), {{"caps": caps, "threads": threads, "transport": hvd.transport(),
                   "rank": hvd.rank(), "size": hvd.size(), "local": hvd.local_rank(),
                   "env": {{k: os.environ.get(k) for k in {horovod_vars!r}}}}})
hvd.shutdown()
"""


def caps_job(frontend):
    return CAPS_JOB.format(frontend=frontend, workers=harness.WORKERS, caps=CAPABILITIES,
                           horovod_vars=HOROVOD_VARS)


def check_caps_job(p, res, transport, np_=2):
    assert p.returncode == 0, describe(p)
    assert set(res) == set(range(np_)), describe(p)
    for r in range(np_):
        caps = res[r]["caps"]
        assert res[r]["transport"] == transport
        assert caps["mpi_enabled"] is (transport == "mpi"), caps
        assert caps["gloo_enabled"] is (transport == "gloo"), caps
        assert caps["gloo_built"] is True and caps["mpi_built"] is plugin_next_to_library("mpi")
        for name in NO_SUCH_TRANSPORT:
            assert caps[name] is False, (name, caps)
        if transport == "mpi":
            assert isinstance(res[r]["threads"], bool), res[r]
            # mpirun starts the ranks: no HOROVOD_* (as under horovodrun --mpi)
            assert res[r]["env"] == {k: None for k in HOROVOD_VARS}, res[r]["env"]
        else:
            assert res[r]["threads"].startswith("ValueError: "), res[r]
            want = [r, np_, r, np_, 0, 1]  # one host: local = global, one cross group
            assert res[r]["env"] == dict(zip(HOROVOD_VARS, map(str, want))), res[r]["env"]


# ---------------------------------------------------------------------------
# Capability queries.
# ---------------------------------------------------------------------------


def test_built_queries_answer_for_this_build(monkeypatch):
    monkeypatch.delenv("HVD_TRANSPORT_PATH", raising=False)
    assert not hvd.is_initialized()  # no init needed, as in Horovod
    assert hvd.gloo_built() is True
    assert hvd.mpi_built() is plugin_next_to_library("mpi")
    for name in NO_SUCH_TRANSPORT:
        fn = getattr(hvd, name)
        assert fn() is False and fn() == 0, name  # Horovod's nccl_built() gives 0 when absent
    # NCCL: the version code where the plugin is built and loads, else 0 (False).
    nccl = hvd.nccl_built()
    if plugin_next_to_library("nccl") and _loads("libnccl.so.2"):
        assert nccl is True or (isinstance(nccl, int) and nccl >= 20000), nccl
    else:
        assert nccl is False and nccl == 0
    # CUDA: whether the runtime the library would load loads here.
    assert hvd.cuda_built() is any(_loads(n) for n in
                                   ("libcudart.so.13", "libcudart.so.12", "libcudart.so"))
    assert set(CAPABILITIES) <= set(hvd.__all__)


def _loads(name):
    import ctypes
    try:
        ctypes.CDLL(name)
        return True
    except OSError:
        return False


BUILT_PROBE = "import hvd; print(hvd.library_path(), hvd.gloo_built(), hvd.mpi_built())"


def _lone_library(tmp_path):
    """A copy of libhvd.so alone in a folder, and probe(env) -> [gloo_built,
    mpi_built] as strings from a fresh process using it (the answer is cached
    per process)."""
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy(os.path.realpath(C.library_path()), lib / "libhvd.so")

    def probe(extra=None):
        env = harness.child_env({"HVD_LIBRARY_PATH": str(lib / "libhvd.so")})
        env.pop("HVD_TRANSPORT_PATH", None)
        env.update(extra or {})
        p = subprocess.run([sys.executable, "-c", BUILT_PROBE], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=60)
        out = p.stdout.decode().split()
        assert p.returncode == 0 and out[0] == str(lib / "libhvd.so"), p.stdout.decode()
        return out[1:]

    return lib, probe


def test_built_means_the_plugin_loads(tmp_path):
    """No plugin, a file that is no library, the real plugin, in turn."""
    lib, probe = _lone_library(tmp_path)
    assert probe() == ["False", "False"]
    (lib / "libhvd_transport_gloo.so").write_text("not a shared library\n")
    assert probe() == ["False", "False"]
    shutil.copy(os.path.join(os.path.dirname(C.library_path()), "libhvd_transport_gloo.so"),
                lib / "libhvd_transport_gloo.so")
    assert probe() == ["True", "False"]


def test_built_follows_transport_path(tmp_path):
    """Plugins in HVD_TRANSPORT_PATH's folders count, as in the library."""
    lib, probe = _lone_library(tmp_path)
    extra = tmp_path / "plugins"
    extra.mkdir()
    shutil.copy(os.path.join(os.path.dirname(C.library_path()), "libhvd_transport_gloo.so"),
                extra / "libhvd_transport_gloo.so")
    assert probe({"HVD_TRANSPORT_PATH": f"{tmp_path / 'none'}:{extra}"}) == ["True", "False"]
    assert probe() == ["False", "False"]


def test_enabled_queries_before_and_after_init():
    assert not hvd.is_initialized()
    assert hvd.mpi_enabled() is False and hvd.gloo_enabled() is False  # no error before init
    with pytest.raises(ValueError):  # Horovod: ValueError before init
        hvd.mpi_threads_supported()
    with pytest.raises(ValueError, match="init"):
        hvd.rank()
    hvd.init()
    try:
        assert hvd.transport() == "local"
        assert hvd.mpi_enabled() is False and hvd.gloo_enabled() is False
        with pytest.raises(ValueError, match="not 'mpi'") as e:
            hvd.mpi_threads_supported()
        assert isinstance(e.value, hvd.UnsupportedError)
    finally:
        hvd.shutdown()
    assert hvd.mpi_enabled() is False and hvd.gloo_enabled() is False


def test_capabilities_under_hvdrun_gloo(tmp_path, hvdrun):
    script = harness.write_script(tmp_path, caps_job("hvd"))
    p, res = run_hvdrun(hvdrun, ["--gloo"], 2, script, tmp_path)
    check_caps_job(p, res, "gloo")


@pytest.mark.skipif(mpi_reason() is not None, reason=f"hvdrun --mpi: {mpi_reason()}")
def test_capabilities_under_hvdrun_mpi(tmp_path, hvdrun):
    script = harness.write_script(tmp_path, caps_job("hvd"))
    p, res = run_hvdrun(hvdrun, ["--mpi"], 2, script, tmp_path)
    check_caps_job(p, res, "mpi")


# ---------------------------------------------------------------------------
# Errors with Horovod's types.
# ---------------------------------------------------------------------------


def test_error_classes():
    assert issubclass(hvd.DuplicateNameError, ValueError)
    assert issubclass(hvd.NotInitializedError, ValueError)
    assert issubclass(hvd.HorovodInternalError, hvd.HvdError)
    assert issubclass(hvd.HorovodInternalError, RuntimeError)
    assert issubclass(hvd.TransportError, hvd.HorovodInternalError)
    assert not issubclass(hvd.MismatchError, hvd.HorovodInternalError)
    # A context broken by a silent peer fails with HVD_ERR_TIMEOUT: still an
    # internal error. A timeout that leaves the context usable is not.
    broken = C.make_error(C.HVD_ERR_TIMEOUT, "allreduce 'x': the context can no longer "
                                             "communicate: gloo: Timed out")
    assert isinstance(broken, hvd.HvdTimeoutError) and isinstance(broken, hvd.HorovodInternalError)
    assert type(broken).__name__ == "HvdTimeoutError" and broken.status == C.HVD_ERR_TIMEOUT
    stalled = C.make_error(C.HVD_ERR_TIMEOUT, "allreduce 'x': stalled: rank 1 did not submit it")
    assert isinstance(stalled, hvd.HvdTimeoutError)
    assert not isinstance(stalled, hvd.HorovodInternalError)
    # The words the binding looks for are the ones the core writes.
    core = ""
    for folder, _dirs, files in os.walk(os.path.join(harness.REPO, "src", "core")):
        for name in sorted(files):
            if name.endswith(".cc"):
                with open(os.path.join(folder, name)) as f:
                    core += f.read()
    assert core.count(f'"{C._BROKEN_CONTEXT}: "') >= 2, "the core's broken-context text changed"


ERRORS_JOB = """
import os, sys, time
import numpy as np
import hvd
sys.path.insert(0, {workers!r})
from common import write
hvd.init(transport_timeout_s=20.0, stall_shutdown_s=20.0)
r, n = hvd.rank(), hvd.size()
# The same name twice while the first is in flight: rank k's dup.k cannot
# complete before the barrier, as the other ranks submit it only after it.
h = hvd.allreduce_async(np.ones(2), name=f"dup.{{r}}")
try:
    hvd.allreduce_async(np.ones(2), name=f"dup.{{r}}")
    dup = "no error"
except ValueError as e:  # what a Horovod script catches
    dup = type(e).__name__
hvd.barrier()
others = [hvd.allreduce_async(np.ones(2), name=f"dup.{{k}}") for k in range(n) if k != r]
for x in [h] + others:
    hvd.synchronize(x)
if r == 2:
    os._exit(3)  # a peer dies without a word
caught = []
for attempt in range(2):  # the first failure, then the broken context's next op
    try:
        for i in range(100):
            hvd.allreduce(np.ones(1 << 12), name=f"after.{{attempt}}.{{i}}")
        caught.append("no error")
    except hvd.HorovodInternalError as e:
        caught.append(type(e).__name__)
write(r, {{"dup": dup, "caught": caught}})
try:
    hvd.shutdown()
except hvd.HvdError:
    pass
"""


def test_duplicate_name_and_dead_peer_errors(tmp_path):
    script = harness.write_script(tmp_path, ERRORS_JOB.format(workers=harness.WORKERS))
    job = harness.run_job(3, script, launcher="env", tmp_path=tmp_path, timeout=180)
    assert job.returncodes[2] == 3, job.describe()
    for r in (0, 1):
        assert job.returncodes[r] == 0, job.describe()
        assert job.results[r]["dup"] == "DuplicateNameError", job.results[r]
        assert job.results[r]["caught"] == ["TransportError", "TransportError"], job.results[r]


# ---------------------------------------------------------------------------
# join(device=-1), poll/synchronize on every handle kind.
# ---------------------------------------------------------------------------


def test_join_accepts_device(hvd_world):
    # A world of one: rank 0 is the last to join.
    assert hvd.join(device=-1) == 0
    assert hvd.join(-1) == 0
    assert hvd.synchronize(hvd.join_async(device=-1)) == 0
    with pytest.raises(TypeError, match="device"):
        hvd.join(device="cuda:0")


# Every *_async op of the frontend: poll() until done (bounded), then
# synchronize(); a Horovod script's pattern. {frontend} is imported as hvd,
# {arr} makes its tensors from nested lists, {lst} turns a result into lists.
HANDLES_JOB = """
import sys, time
import numpy as np
import {frontend} as hvd
sys.path.insert(0, {workers!r})
from common import write
{setup}
hvd.init()
r, n = hvd.rank(), hvd.size()
out = {{}}
def done(key, handle):
    deadline = time.monotonic() + 60
    while not hvd.poll(handle):
        assert time.monotonic() < deadline, key + ": poll() never said done"
        time.sleep(0.001)
    assert hvd.poll(handle) is True
    res = hvd.synchronize(handle)
    out[key] = lst(res)
    return res
x = arr([r + 1.0] * 3)
done("allreduce", hvd.allreduce_async(x, op=hvd.Sum, name="a"))
y = arr([float(r)] * 3)
res = done("allreduce_", hvd.allreduce_async_(y, name="a_"))
out["allreduce_ in place"] = res is y and lst(y) == [0.5] * 3
done("grouped_allreduce", hvd.grouped_allreduce_async([arr([1.0]), arr([r, r])], op=hvd.Sum,
                                                      name="g"))
gs = [arr([float(r)]), arr([2.0 * r])]
done("grouped_allreduce_", hvd.grouped_allreduce_async_(gs, op=hvd.Sum, name="g_"))
out["grouped_allreduce_ in place"] = lst(gs)
done("allgather", hvd.allgather_async(arr([[float(r)] * 2] * (r + 1)), name="ag"))
done("broadcast", hvd.broadcast_async(arr([float(r)] * 2), root_rank=1, name="b"))
z = arr([float(r)] * 2)
done("broadcast_", hvd.broadcast_async_(z, root_rank=0, name="b_"))
out["broadcast_ in place"] = lst(z)
done("alltoall", hvd.alltoall_async(arr([10.0 * r + i for i in range(4)]), name="t"))
done("alltoall splits", hvd.alltoall_async(arr([10.0 * r + i for i in range(4)]),
                                          splits=[1, 3], name="ts"))
done("reducescatter", hvd.reducescatter_async(arr([r + 1.0] * 4), op=hvd.Sum, name="rs"))
done("barrier", hvd.barrier_async())
done("join", hvd.join_async())
out["join(device=-1)"] = hvd.join(device=-1)
write(r, out)
hvd.shutdown()
"""

NUMPY_SETUP = """
def arr(v):
    return np.array(v, dtype=np.float64)
def lst(v):
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return [lst(e) for e in v]
    return np.asarray(v).tolist()
"""


def handles_job(frontend, setup):
    return HANDLES_JOB.format(frontend=frontend, workers=harness.WORKERS, setup=setup)


def check_handles_job(job):
    assert job.ok(), job.describe()
    for r in range(2):
        got = job.results[r]
        want = {
            "allreduce": [3.0] * 3,
            "allreduce_": [0.5] * 3,
            "allreduce_ in place": True,
            "grouped_allreduce": [[2.0], [1.0, 1.0]],
            "grouped_allreduce_": [[1.0], [2.0]],
            "grouped_allreduce_ in place": [[1.0], [2.0]],
            "allgather": [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]],
            "broadcast": [1.0, 1.0],
            "broadcast_": [0.0, 0.0],
            "broadcast_ in place": [0.0, 0.0],
            "alltoall": [[0.0, 1.0, 10.0, 11.0], [2.0, 3.0, 12.0, 13.0]][r],
            "alltoall splits": [[[0.0, 10.0], [1, 1]], [[1.0, 2.0, 3.0, 11.0, 12.0, 13.0], [3, 3]]][r],
            "reducescatter": [3.0, 3.0],
            "barrier": None,
            # Both ranks join at once: the last is whichever negotiation saw
            # last (rank order within one), the same on both ranks.
            "join": job.results[0]["join"],
            "join(device=-1)": job.results[0]["join(device=-1)"],
        }
        assert got["join"] in (0, 1) and got["join(device=-1)"] in (0, 1), got
        assert got == want, f"rank {r}: {got}"


def test_poll_and_synchronize_every_handle_kind(tmp_path, hvdrun):
    script = harness.write_script(tmp_path, handles_job("hvd", NUMPY_SETUP))
    job = harness.run_job(2, script, launcher="hvdrun", tmp_path=tmp_path, timeout=180)
    check_handles_job(job)


def test_poll_and_synchronize_refuse_other_objects():
    for fn in (hvd.poll, hvd.synchronize):
        with pytest.raises(TypeError, match="Handle"):
            fn(7)


# ---------------------------------------------------------------------------
# hvd.elastic: Horovod's module.
# ---------------------------------------------------------------------------


def test_elastic_numpy():
    """hvd.elastic is Horovod's (test_elastic.py tests what it does)."""
    import importlib
    assert importlib.import_module("hvd.elastic") is hvd.elastic
    for name in ("run", "State", "ObjectState", "HostsUpdatedInterrupt"):
        assert callable(getattr(hvd.elastic, name)), name
    ns = {}
    exec("from hvd.elastic import run, ObjectState", ns)
    assert ns["run"] is hvd.elastic.run
    assert issubclass(hvd.elastic.ObjectState, hvd.elastic.State)
