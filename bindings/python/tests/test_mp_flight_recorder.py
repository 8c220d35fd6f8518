"""The flight recorder (docs/flight-recorder.md) and its reader, python -m
hvd.trace, in real multi-rank jobs: a rank that never submits a tensor, a
rank stopped in the middle of an allreduce, a killed rank, a dump on SIGUSR1
and on request, and hvdrun --flight-recorder collecting remote ranks'
files."""

import json
import os
import signal
import subprocess
import sys
import time

import harness

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def trace(folder, *extra):
    """python -m hvd.trace folder: (text, facts)."""
    env = dict(os.environ, PYTHONPATH=PKG)
    text = subprocess.run([sys.executable, "-m", "hvd.trace", str(folder)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60,
                          check=False).stdout.decode()
    facts = json.loads(subprocess.run([sys.executable, "-m", "hvd.trace", "--json", str(folder)],
                                      env=env, stdout=subprocess.PIPE, timeout=60,
                                      check=True).stdout)
    return text, facts


def record(folder, rank):
    with open(os.path.join(str(folder), f"rank-{rank}.json")) as f:
        return json.load(f)


def start_ranks(np_, script, out, env):
    """The ranks as processes of this test (no launcher to stop the job)."""
    port = harness.free_port()
    procs = []
    for r in range(np_):
        e = harness.child_env(dict(env, HVD_TEST_OUT=str(out)))
        e.update({"HVD_RANK": str(r), "HVD_SIZE": str(np_), "HVD_LOCAL_RANK": str(r),
                  "HVD_LOCAL_SIZE": str(np_), "MASTER_ADDR": "127.0.0.1",
                  "MASTER_PORT": str(port)})
        log = open(os.path.join(str(out), f"log{r}.txt"), "w+b")
        procs.append((subprocess.Popen([sys.executable, script], env=e, stdout=log,
                                       stderr=subprocess.STDOUT), log))
    return procs


def finish(procs, timeout):
    """Waits for every rank (killing what is left at the deadline); the logs."""
    deadline = time.monotonic() + timeout
    text = ""
    for r, (p, log) in enumerate(procs):
        try:
            p.wait(timeout=max(0.5, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.seek(0)
        text += f"[rank {r} rc {p.returncode}]\n" + log.read().decode("utf-8", "replace")
        log.close()
    return text


NEVER_SUBMITS = """
import os, time
import numpy as np
import hvd
hvd.init()
r = hvd.rank()
for i in range(3):
    hvd.allreduce(np.ones(4, np.float32), name="a")
if r == 1:
    time.sleep(5)  # never submits 'b'; the others' stall shutdown fails it there
    hvd.flight_recorder_dump()  # the Python call
else:
    try:
        hvd.allreduce(np.ones(4, np.float32), name="b")
        raise SystemExit("'b' completed without rank 1")
    except hvd.HvdError as e:
        print("b failed:", e)
hvd.shutdown()
"""


def test_rank_never_submits(tmp_path):
    """Rank 1 never submits 'b': the stall shutdown fails it on ranks 0 and 2,
    whose dumps (on the error) and rank 1's (by request) make hvd.trace name
    rank 1 and 'b'."""
    rec = tmp_path / "rec"
    script = harness.write_script(tmp_path, NEVER_SUBMITS)
    job = harness.run_job(3, script, launcher="hvdrun", tmp_path=tmp_path, timeout=120,
                          env={"HVD_FLIGHT_RECORDER_DIR": str(rec), "HVD_STALL_WARNING_TIME": "1",
                               "HVD_STALL_SHUTDOWN_TIME": "2"})
    assert job.ok(), job.describe()
    for r in (0, 2):
        d = record(rec, r)
        assert d["reason"] == "error", d["reason"]
        b = [o for o in d["ops"] if o["name"] == "b"]
        assert b and b[-1]["state"] == "error", b
        assert [o["state"] for o in d["ops"] if o["name"] == "a"] == ["ok"] * 3
    d1 = record(rec, 1)
    assert d1["reason"] == "api" and not any(o["name"] == "b" for o in d1["ops"])
    text, facts = trace(rec)
    assert "rank 1 never submitted allreduce 'b'" in text, text
    assert facts["never_submitted"][0]["ranks"] == [1], facts
    assert facts["never_submitted"][0]["submitted_by"] == [0, 2], facts
    assert facts["behind"][0]["rank"] == 1, text


STOPPED = """
import os, signal, sys, time
import numpy as np
import hvd
out = os.environ["HVD_TEST_OUT"]
hvd.init()
r = hvd.rank()
x = np.ones(4 << 20, np.float32)  # 16 MiB: a transfer long enough to stop inside
i = 0
try:
    for i in range(100000):
        h = hvd.allreduce_async(x, name="big")
        if r == 2 and i == 3:
            os.kill(os.getpid(), signal.SIGSTOP)  # the whole process, its allreduce in flight
        hvd.synchronize(h)
except hvd.HvdError as e:
    print("failed at step", i, ":", e, flush=True)
    open(os.path.join(out, f"failed{r}"), "w").write(str(e))
    os._exit(1)
"""


def test_stopped_rank_is_behind(tmp_path):
    """Rank 2 stops (SIGSTOP) in the middle of an allreduce: ranks 0 and 1 fail
    and dump; once continued, rank 2 fails and dumps too. hvd.trace says rank 2
    is behind, in allreduce 'big'."""
    rec = tmp_path / "rec"
    script = harness.write_script(tmp_path, STOPPED)
    procs = start_ranks(3, script, tmp_path, {
        "HVD_FLIGHT_RECORDER_DIR": str(rec), "HVD_PEER_TIMEOUT": "2",
        "HVD_TRANSPORT_TIMEOUT": "4"})
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not all(
                os.path.exists(tmp_path / f"failed{r}") for r in (0, 1)):
            time.sleep(0.2)
        for r in (0, 1):  # their dumps precede their exit
            procs[r][0].wait(timeout=30)
    finally:
        os.kill(procs[2][0].pid, signal.SIGCONT)
        logs = finish(procs, 60)
    for r in (0, 1):
        d = record(rec, r)
        assert d["failure"] is not None, logs
        last = d["ops"][-1]
        assert last["name"] == "big" and last["state"] == "error", last
    text, facts = trace(rec)
    behind = facts["behind"]
    assert behind and behind[0]["rank"] == 2 and behind[0]["op"] == "big", text + "\n" + logs
    assert "behind: rank 2" in text and "'big'" in text, text


KILLED = """
import os, signal, sys
import numpy as np
import hvd
out = os.environ["HVD_TEST_OUT"]
hvd.init()
r = hvd.rank()
x = np.ones(1 << 16, np.float32)
try:
    for i in range(100000):
        if r == 1 and i == 5:
            os.kill(os.getpid(), signal.SIGKILL)
        hvd.allreduce(x, name="step")
except hvd.HvdError as e:
    print("failed:", e, flush=True)
    os._exit(1)
"""


def test_killed_rank_first_failure(tmp_path):
    """Rank 1 is killed: ranks 0 and 2 dump on their error, and their records
    agree on the first failure: rank 1."""
    rec = tmp_path / "rec"
    script = harness.write_script(tmp_path, KILLED)
    procs = start_ranks(3, script, tmp_path, {"HVD_FLIGHT_RECORDER_DIR": str(rec)})
    logs = finish(procs, 90)
    assert not os.path.exists(rec / "rank-1.json"), logs
    for r in (0, 2):
        d = record(rec, r)
        assert d["failure"] is not None, logs
        assert "rank 1" in d["failure"]["error"], d["failure"]
    text, facts = trace(rec)
    ff = facts["first_failure"]
    assert facts["missing"] == [1], facts
    assert ff["cause"] == 1 and set(ff["causes"].values()) == {1}, text
    assert "names rank 1" in text, text


DUMPS = """
import ctypes, os, signal, time
import numpy as np
import hvd
from hvd import _c_api
out = os.environ["HVD_TEST_OUT"]
rec = os.environ["HVD_FLIGHT_RECORDER_DIR"]
hvd.init()
r = hvd.rank()
for i in range(4):
    hvd.allreduce(np.ones(8, np.float64), name=f"w{i % 2}")
hvd.allgather(np.ones((2, 3), np.int32), name="g")
hvd.broadcast(np.ones(5, np.float32), root_rank=0, name="bc")
mine = os.path.join(rec, f"rank-{r}.json")
# SIGUSR1: the handler only counts it; the background loop writes the file.
os.kill(os.getpid(), signal.SIGUSR1)
deadline = time.monotonic() + 10
while not os.path.exists(mine) and time.monotonic() < deadline:
    time.sleep(0.05)
os.rename(mine, os.path.join(out, f"usr1-{r}.json"))
# The C call, to a file of its own.
lib = ctypes.CDLL(_c_api.library_path())
lib.hvd_flight_recorder_dump.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
rc = lib.hvd_flight_recorder_dump(None, os.path.join(out, f"c-{r}.json").encode())
open(os.path.join(out, f"crc-{r}"), "w").write(str(rc))
hvd.barrier()
hvd.shutdown()
"""


def test_sigusr1_and_c_call(tmp_path):
    """SIGUSR1 and hvd_flight_recorder_dump write every operation with its
    fields; a clean job's records agree and show no failure."""
    rec = tmp_path / "rec"
    script = harness.write_script(tmp_path, DUMPS)
    job = harness.run_job(2, script, launcher="hvdrun", tmp_path=tmp_path, timeout=120,
                          env={"HVD_FLIGHT_RECORDER_DIR": str(rec)})
    assert job.ok(), job.describe()
    for r in (0, 1):
        assert open(tmp_path / f"crc-{r}").read() == "0"
        usr1 = json.load(open(tmp_path / f"usr1-{r}.json"))
        assert usr1["reason"] == "SIGUSR1" and usr1["rank"] == r and usr1["size"] == 2
        assert usr1["pid"] > 0 and usr1["host"] and usr1["failure"] is None
        assert usr1["sets"][0] == {"id": -1, "ranks": [0, 1]}
        ops = usr1["ops"]
        assert [o["name"] for o in ops] == ["w0", "w1", "w0", "w1", "g", "bc"], ops
        assert [o["set_seq"] for o in ops] == list(range(6))
        w = ops[0]
        assert (w["op"], w["reduce"], w["dtype"], w["bytes"], w["state"]) == (
            "allreduce", "average", "float64", 64, "ok"), w
        assert w["algorithm"] and w["peers"] == [1 - r], w
        assert w["submitted_ns"] <= w["negotiated_ns"] <= w["started_ns"] <= w["finished_ns"], w
        assert (ops[4]["op"], ops[4]["dtype"], ops[4]["bytes"]) == ("allgather", "int32", 24)
        assert ops[5]["op"] == "broadcast"
        c = json.load(open(tmp_path / f"c-{r}.json"))
        assert c["reason"] == "api" and [o["name"] for o in c["ops"]][:6] == [o["name"] for o in ops]
    os.makedirs(tmp_path / "both")
    for r in (0, 1):
        os.rename(tmp_path / f"usr1-{r}.json", tmp_path / "both" / f"rank-{r}.json")
    text, facts = trace(tmp_path / "both")
    assert facts["missing"] == [] and facts["never_submitted"] == [] and facts["diverge"] == []
    assert "agree" in text and "behind" not in text, text


REMOTE = """
import os
import numpy as np
import hvd
# The fake ssh marks these ranks remote: their records go to that "host's" disk.
os.environ["HVD_FLIGHT_RECORDER_DIR"] = os.environ["FAKE_REMOTE_DISK"]
hvd.init()
r = hvd.rank()
for i in range(3):
    hvd.allreduce(np.ones(4, np.float32), name="a")
if r == 1:
    os._exit(3)  # dies without a word
try:
    hvd.allreduce(np.ones(4, np.float32), name="after")
except hvd.HvdError as e:
    print("failed:", e, flush=True)
    os._exit(1)
"""

FAKE_SSH = """#!/bin/sh
# ssh to a "remote host" that is this one, whose disk is $FAKE_REMOTE_DISK.
for a; do last=$a; done
case "$last" in
  "exec cat -- "*) eval "set -- ${last#exec cat -- }"; exec cat -- "$FAKE_REMOTE_DISK/$(basename "$1")" ;;
esac
exec sh -c "$last"
"""


def remote_job(tmp_path, source):
    """A job whose every rank runs over the fake ssh: DIR for hvdrun's
    --flight-recorder, the "remote disk", the rank script and the env."""
    rec, disk = tmp_path / "rec", tmp_path / "remote-disk"
    os.makedirs(disk)
    ssh = tmp_path / "fake_ssh"
    ssh.write_text(FAKE_SSH)
    ssh.chmod(0o755)
    script = harness.write_script(tmp_path, source)
    env = harness.child_env({"HVD_TEST_OUT": str(tmp_path), "HVD_LAUNCHER_FORCE_SSH": "1",
                             "HVD_LAUNCHER_SSH": str(ssh), "FAKE_REMOTE_DISK": str(disk)})
    return rec, disk, script, env


def test_hvdrun_collects_remote_records(tmp_path):
    """hvdrun --flight-recorder DIR with every rank over (a fake) ssh: rank 1
    dies, rank 0 fails and records on its host's disk, and hvdrun copies that
    file into DIR once the job has failed."""
    rec, disk, script, env = remote_job(tmp_path, REMOTE)
    p = subprocess.run([harness.find_hvdrun(), "-np", "2", "--flight-recorder", str(rec),
                        sys.executable, script], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=120)
    out = p.stdout.decode("utf-8", "replace")
    assert p.returncode != 0, out
    assert os.path.exists(disk / "rank-0.json"), out
    d = record(rec, 0)  # copied from the "remote" disk
    assert d["failure"] is not None and "rank 1" in d["failure"]["error"], d["failure"]
    assert "rank 1's record on host localhost not copied" in out, out
    assert f"python -m hvd.trace {rec}" in out, out
    text, facts = trace(rec)
    assert facts["missing"] == [1] and facts["first_failure"]["cause"] == 1, text


IDLE = """
import os, sys, time
import numpy as np
import hvd
os.environ["HVD_FLIGHT_RECORDER_DIR"] = os.environ["FAKE_REMOTE_DISK"]
hvd.init()
for i in range(3):
    hvd.allreduce(np.ones(4, np.float32), name="a")
print("ready", hvd.rank(), flush=True)
time.sleep(60)
"""


def test_hvdrun_asks_remote_ranks(tmp_path):
    """hvdrun --flight-recorder DIR, signalled while every rank runs over (a
    fake) ssh: the watcher at the other end of each rank's ssh relays hvdrun's
    request as SIGUSR1, each rank writes its record on its host's disk, and
    hvdrun copies both into DIR."""
    rec, _, script, env = remote_job(tmp_path, IDLE)
    p = subprocess.Popen([harness.find_hvdrun(), "-np", "2", "--flight-recorder", str(rec),
                          sys.executable, script], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    lines = []
    try:
        deadline = time.monotonic() + 60
        while sum(l.startswith("ready") for l in lines) < 2 and time.monotonic() < deadline:
            line = p.stdout.readline().decode("utf-8", "replace")
            if not line:
                break
            lines.append(line.split("] ", 1)[-1])
        assert sum(l.startswith("ready") for l in lines) == 2, "".join(lines)
        p.send_signal(signal.SIGTERM)
        out = "".join(lines) + p.communicate(timeout=60)[0].decode("utf-8", "replace")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode != 0, out
    for r in (0, 1):
        d = record(rec, r)  # written on the "remote" disk on request, copied by hvdrun
        assert d["reason"] == "SIGUSR1", (r, d["reason"], out)
        assert [o["name"] for o in d["ops"]].count("a") == 3, d["ops"]
