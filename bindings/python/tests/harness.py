"""Launching real multi-process hvd jobs from pytest.

Launchers:
  - "hvdrun": build*/bin/hvdrun -np N python worker.py (the default);
  - "env": this module starts the N processes itself with HVD_RANK/HVD_SIZE/
    HVD_LOCAL_RANK/HVD_LOCAL_SIZE and MASTER_ADDR=127.0.0.1/MASTER_PORT=<free
    port> (the path where rank 0 hosts the store). Used where the test needs
    each rank's own exit status (a rank that dies: hvdrun stops the whole job
    as soon as one rank fails, by design);
  - "torchrun": the same with exactly torchrun's variables (RANK, WORLD_SIZE,
    LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT).

Workers report through files: each rank writes $HVD_TEST_OUT/rank<r>.json.
"""

from __future__ import annotations

import glob
import json
import os
import socket
import subprocess
import sys
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)  # bindings/python
REPO = os.path.abspath(os.path.join(PKG_ROOT, os.pardir, os.pardir))
WORKERS = os.path.join(HERE, "workers")

if PKG_ROOT not in sys.path:
    sys.path.insert(0, PKG_ROOT)

import hvd._c_api as C  # noqa: E402


def library_dir():
    return os.path.dirname(os.path.realpath(C.library_path()))


def find_hvdrun():
    """$HVD_HVDRUN, else hvdrun from the build tree the library came from, else
    the newest build*/bin/hvdrun; None if there is none."""
    env = os.environ.get("HVD_HVDRUN")
    if env:
        return env if os.access(env, os.X_OK) else None
    same = os.path.join(os.path.dirname(os.path.dirname(C.library_path())), "bin", "hvdrun")
    if os.access(same, os.X_OK):
        return same
    found = [p for p in glob.glob(os.path.join(REPO, "build*", "bin", "hvdrun"))
             if os.access(p, os.X_OK)]
    found.sort(key=os.path.getmtime, reverse=True)
    return found[0] if found else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(extra=None):
    env = dict(os.environ)
    # Every rank loads the very library this pytest process loaded.
    env["HVD_LIBRARY_PATH"] = os.path.realpath(C.library_path())
    env["PYTHONPATH"] = PKG_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    # Fail fast instead of hanging a CI run when a test desynchronises ranks.
    env.setdefault("HVD_STALL_SHUTDOWN_TIME", "30")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
              "MASTER_PORT", "HVD_RANK", "HVD_SIZE", "HVD_RENDEZVOUS_ADDR"):
        env.pop(k, None)
    env.update(extra or {})
    return env


class JobResult:
    def __init__(self, returncodes, output, results):
        self.returncodes = returncodes  # list (env launcher) or [hvdrun's]
        self.output = output
        self.results = results  # rank -> dict from rank<r>.json (missing rank: absent)

    def ok(self):
        return all(rc == 0 for rc in self.returncodes)

    def describe(self):
        return f"exit codes {self.returncodes}\n--- output ---\n{self.output[-6000:]}"


def run_job(np_, script, args=(), launcher="hvdrun", tmp_path=None, timeout=240, env=None):
    """Runs `python script args...` as np_ ranks; returns JobResult."""
    out_dir = str(tmp_path) if tmp_path is not None else None
    if out_dir is None:
        import tempfile
        out_dir = tempfile.mkdtemp(prefix="hvdtest-")
    extra = {"HVD_TEST_OUT": out_dir}
    extra.update(env or {})
    cmd = [sys.executable, script, *map(str, args)]
    if launcher == "hvdrun":
        hvdrun = find_hvdrun()
        if hvdrun is None:
            raise RuntimeError("no hvdrun found (build the hvdrun target or set HVD_HVDRUN)")
        p = subprocess.run([hvdrun, "-np", str(np_), "--", *cmd], env=child_env(extra),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        rcs, output = [p.returncode], p.stdout.decode("utf-8", "replace")
    elif launcher in ("env", "torchrun"):
        port = free_port()
        procs = []
        for r in range(np_):
            e = child_env(extra)
            if launcher == "env":
                e.update({"HVD_RANK": str(r), "HVD_SIZE": str(np_), "HVD_LOCAL_RANK": str(r),
                          "HVD_LOCAL_SIZE": str(np_)})
            else:  # exactly the variables torchrun sets
                e.update({"RANK": str(r), "WORLD_SIZE": str(np_), "LOCAL_RANK": str(r),
                          "LOCAL_WORLD_SIZE": str(np_), "GROUP_RANK": "0"})
            e.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
            logf = open(os.path.join(out_dir, f"log{r}.txt"), "w+b")
            procs.append((subprocess.Popen(cmd, env=e, stdout=logf, stderr=subprocess.STDOUT),
                          logf))
        deadline = time.monotonic() + timeout
        rcs = []
        for p, _ in procs:
            try:
                rcs.append(p.wait(timeout=max(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                p.kill()
                rcs.append(p.wait())
        output = ""
        for r, (_, logf) in enumerate(procs):
            logf.seek(0)
            output += f"[rank {r}]\n" + logf.read().decode("utf-8", "replace")
            logf.close()
    else:
        raise ValueError(launcher)
    results = {}
    for r in range(np_):
        path = os.path.join(out_dir, f"rank{r}.json")
        if os.path.exists(path):
            with open(path) as f:
                results[r] = json.load(f)
    return JobResult(rcs, output, results)


def assert_check(job, size, check):
    """Every rank of the job reported, and reported check `check` passed."""
    assert set(job.results) == set(range(size)), "not every rank reported:\n" + job.describe()
    for r in range(size):
        err = job.results[r]["checks"].get(check, "check did not run")
        assert err is None, f"rank {r}: {err}"


def write_script(tmp_path, body, name="job.py"):
    path = os.path.join(str(tmp_path), name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(body))
    return path


def have_module(name):
    try:
        __import__(name)
        return True
    except Exception:
        return False


def mpi_reason():
    """None when jobs can run under mpirun with hvd's MPI plugin and mpi4py,
    else why not."""
    import shutil
    if C.plugin_path("mpi") is None:
        return (f"MPI transport plugin libhvd_transport_mpi.so is not built next to "
                f"{C.library_path()}")
    if not have_module("mpi4py"):
        return "mpi4py is not installed"
    if shutil.which("mpirun") is None:
        return "mpirun (Open MPI) is not installed"
    return None


def run_mpirun(np_, script, args=(), tmp_path=None, timeout=180, env=None):
    """Runs `python script args...` as np_ ranks under Open MPI's mpirun;
    returns JobResult (one return code: mpirun's)."""
    import tempfile
    out_dir = str(tmp_path) if tmp_path is not None else tempfile.mkdtemp(prefix="hvdtest-")
    extra = {"HVD_TEST_OUT": out_dir}
    extra.update(env or {})
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np_)]
    for k in ("HVD_TEST_OUT", "HVD_LIBRARY_PATH", "PYTHONPATH", *sorted(env or {})):
        cmd += ["-x", k]
    cmd += [sys.executable, script, *map(str, args)]
    p = subprocess.run(cmd, env=child_env(extra), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout)
    results = {}
    for r in range(np_):
        path = os.path.join(out_dir, f"rank{r}.json")
        if os.path.exists(path):
            with open(path) as f:
                results[r] = json.load(f)
    return JobResult([p.returncode], p.stdout.decode("utf-8", "replace"), results)
