"""hvd.metrics() and the stragglers in real multi-process jobs, the Prometheus
endpoints (hvd.metrics.serve on a rank, hvdrun --metrics-port for the job)
and hvdrun --summary (docs/metrics.md)."""

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

import harness

COUNTS = """
import os, sys, json
import numpy as np
import hvd
out = os.environ["HVD_TEST_OUT"]
hvd.init()
r = hvd.rank()
for i in range(5):
    hvd.allreduce(np.ones(16, np.float32), name="a")
hvd.grouped_allreduce([np.ones(10, np.float32)] * 3, name="g")
for i in range(2):
    hvd.allgather(np.ones(8, np.float32), name="ag")
for i in range(3):
    hvd.broadcast(np.ones(10, np.float64), 0, name="b")
hvd.barrier()
try:
    hvd.allreduce(np.ones(4 + r, np.float32), name="bad")  # shapes differ: a mismatch
except hvd.HvdError:
    pass
ps = hvd.add_process_set([0, 2])
if r != 1:
    for i in range(4):
        hvd.allreduce(np.ones(4, np.int32), name="s", process_set=ps)
with open(os.path.join(out, "rank%d.json" % r), "w") as f:
    json.dump(hvd.metrics(), f)
hvd.barrier()  # rank 1 stays until the set's members are done
hvd.shutdown()
"""


def _scope(m, name):
    return [s for s in m["scopes"] if s["process_set"] == name]


def test_exact_counts_per_rank_and_process_set(tmp_path, hvdrun):
    script = harness.write_script(tmp_path, COUNTS)
    job = harness.run_job(3, script, launcher="hvdrun", tmp_path=tmp_path, timeout=120)
    assert job.ok(), job.describe()
    for r in range(3):
        m = job.results[r]
        assert m["version"] == 1 and m["rank"] == r and m["size"] == 3
        (root,) = _scope(m, "all")
        ops = root["ops"]
        assert (ops["allreduce"]["count"], ops["allreduce"]["bytes"]) == (5 + 3, 5 * 64 + 3 * 40)
        assert sum(a["count"] for a in ops["allreduce"]["algorithms"].values()) == 8
        assert (ops["allgather"]["count"], ops["allgather"]["bytes"]) == (2, 2 * 32)
        assert (ops["broadcast"]["count"], ops["broadcast"]["bytes"]) == (3, 3 * 80)
        assert (ops["barrier"]["count"], ops["barrier"]["bytes"]) == (1, 0)
        assert ops["alltoall"]["count"] == 0 and ops["reducescatter"]["count"] == 0
        # The grouped allreduce is one batch of three tensors.
        assert (root["fusion"]["batches"], root["fusion"]["tensors"]) == (1, 3)
        assert root["errors"] == {"mismatch": 1}
        # A response per request: 5 + 1 + 2 + 3 + barrier + mismatch + the set's creation.
        assert root["cache"]["hits"] + root["cache"]["misses"] == 14
        assert root["cache"]["hits"] >= 4 + 1 + 2  # every repeat of a cached name
        sets = _scope(m, "0,2")
        if r == 1:
            assert sets == []
        else:
            (s,) = sets
            assert (s["rank"], s["size"]) == ([0, 2].index(r), 2)
            assert (s["ops"]["allreduce"]["count"], s["ops"]["allreduce"]["bytes"]) == (4, 64)
            assert s["ops"]["allreduce"]["algorithms"] == {
                "set": {"count": 4, "bytes": 64, "seconds": s["ops"]["allreduce"]["seconds"]}}
        # Time recorded where data moved.
        assert ops["broadcast"]["seconds"] > 0 and m["negotiation"]["count"] > 0


BCAST_LOOP = """
import os, json
import numpy as np
import hvd
hvd.init()
r = hvd.rank()
got = []
for step in range(20):
    flag = np.array([step * 1.5 if r == 0 else -1.0], np.float32)
    got.append(float(hvd.broadcast(flag, 0, name="stop")[0]))
with open(os.path.join(os.environ["HVD_TEST_OUT"], "rank%d.json" % r), "w") as f:
    json.dump({"got": got, "metrics": hvd.metrics()}, f)
hvd.shutdown()
"""


def test_a_per_step_broadcast_rides_in_the_negotiation(tmp_path, hvdrun):
    """A flag broadcast from rank 0 every step, as a training loop's early stop: every rank
    gets rank 0's value, and every step after the first is served by the negotiation itself
    (docs/design.md, HVD_PIGGYBACK): no executor time, counted as the "piggyback" path."""
    script = harness.write_script(tmp_path, BCAST_LOOP)
    job = harness.run_job(3, script, launcher="hvdrun", tmp_path=tmp_path, timeout=120)
    assert job.ok(), job.describe()
    for r in range(3):
        res = job.results[r]
        assert res["got"] == [step * 1.5 for step in range(20)], res["got"]
        m = res["metrics"]
        assert m["piggybacked"] == 19, m["piggybacked"]
        (root,) = _scope(m, "all")
        bcast = root["ops"]["broadcast"]
        assert bcast["count"] == 20
        assert bcast["algorithms"]["piggyback"]["count"] == 19, bcast["algorithms"]


GATHER_LOOP = """
import os, json
import numpy as np
import hvd
hvd.init()
r = hvd.rank()
got = []
for step in range(20):
    # rank r's r + 1 rows of (rank, step): the ranks' first dimensions differ
    mine = np.array([[r, step]] * (r + 1), np.int32)
    got.append(hvd.allgather(mine, name="seen").tolist())
with open(os.path.join(os.environ["HVD_TEST_OUT"], "rank%d.json" % r), "w") as f:
    json.dump({"got": got, "metrics": hvd.metrics()}, f)
hvd.shutdown()
"""


def test_a_per_step_allgather_rides_in_the_negotiation(tmp_path, hvdrun):
    """Each rank's (rank, step) rows gathered every step, as a loop that gathers per-rank
    sample counts: every rank gets every rank's rows in rank order (1, 2 and 3 rows), and
    every step after the first is served by the negotiation itself (HVD_PIGGYBACK)."""
    script = harness.write_script(tmp_path, GATHER_LOOP)
    job = harness.run_job(3, script, launcher="hvdrun", tmp_path=tmp_path, timeout=120)
    assert job.ok(), job.describe()
    want = [[[q, step] for q in range(3) for _ in range(q + 1)] for step in range(20)]
    for r in range(3):
        res = job.results[r]
        assert res["got"] == want, res["got"]
        m = res["metrics"]
        assert m["piggybacked"] == 19, m["piggybacked"]
        (root,) = _scope(m, "all")
        gather = root["ops"]["allgather"]
        assert gather["count"] == 20
        assert gather["algorithms"]["piggyback"]["count"] == 19, gather["algorithms"]


def test_metrics_off_counts_nothing(tmp_path, hvdrun):
    """HVD_METRICS=0: the same sequence (piggybacked small allreduces, a mismatch, a process
    set) leaves every count at 0 and says so."""
    script = harness.write_script(tmp_path, COUNTS)
    job = harness.run_job(3, script, launcher="hvdrun", tmp_path=tmp_path, timeout=120,
                          env={"HVD_METRICS": "0"})
    assert job.ok(), job.describe()
    for r in range(3):
        m = job.results[r]
        assert m["enabled"] is False and m["rank"] == r
        for scope in m["scopes"]:
            assert all(op["count"] == 0 and op["bytes"] == 0 for op in scope["ops"].values()), scope
            assert scope["cache"]["hits"] + scope["cache"]["misses"] == 0, scope
            assert scope["errors"] == {}, scope
            assert scope["fusion"]["batches"] == 0, scope
        assert m["negotiation"]["count"] == 0
        assert m["stragglers"]["steps"] == 0


STRAGGLER = """
import os, sys, json, time
import numpy as np
import hvd
out = os.environ["HVD_TEST_OUT"]
delay = float(sys.argv[1])
hvd.init()
r = hvd.rank()
for i in range({steps}):
    # Every rank computes 5 ms; rank 2 another `delay` before its submit.
    time.sleep(0.005 + (delay if r == 2 else 0))
    hvd.allreduce(np.ones(4, np.float32), name="loss")
with open(os.path.join(out, "rank%d.json" % r), "w") as f:
    json.dump(hvd.metrics(), f)
hvd.shutdown()
"""


@pytest.mark.parametrize("delay", [0.030, 0.0])
def test_straggler_named_with_its_cost(tmp_path, hvdrun, delay):
    steps = 50
    script = harness.write_script(tmp_path, STRAGGLER.format(steps=steps))
    job = harness.run_job(4, script, args=[delay], launcher="hvdrun", tmp_path=tmp_path,
                          timeout=180, env={"HVD_STRAGGLER_WARNING": "0.5"})
    assert job.ok(), job.describe()
    for r in range(4):
        s = job.results[r]["stragglers"]
        # Every step but the last is seen (its waits would ride in a later negotiation).
        assert s["steps"] >= steps - 2, s
        ranks = {x["rank"]: x for x in s["ranks"]}
        if delay:
            two = ranks[2]
            assert two["last"] >= 0.8 * s["steps"], s
            per_step = two["cost_seconds"] / two["last"]
            assert abs(per_step - delay) <= 0.2 * delay, (per_step, s)
            assert s["named"] == [2], s
            if r != 2:
                assert two["waited_seconds"] >= 0.8 * delay * two["last"], s
        else:
            assert s["named"] == [], s
    warned = "straggler: rank 2" in job.output
    assert warned == bool(delay), job.output[-3000:]


SERVE = """
import os, sys, json, time, urllib.request
import numpy as np
import hvd
from prometheus_client.parser import text_string_to_metric_families
out = os.environ["HVD_TEST_OUT"]
hvd.init()
r = hvd.rank()
server = hvd.metrics.serve(0)
def scrape():
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % server.port, timeout=30).read()
    fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
    ops = sum(s.value for s in fams["hvd_allreduce_operations"].samples
              if s.name == "hvd_allreduce_operations_total")
    nbytes = sum(s.value for s in fams["hvd_allreduce_bytes"].samples)
    labels = sorted({s.labels["rank"] for s in fams["hvd_allreduce_operations"].samples})
    return ops, nbytes, labels
for i in range(3):
    hvd.allreduce(np.ones(8, np.float32), name="x")
first = scrape()
for i in range(4):
    hvd.allreduce(np.ones(8, np.float32), name="x")
second = scrape()
server.close()
with open(os.path.join(out, "rank%d.json" % r), "w") as f:
    json.dump({"first": first, "second": second, "callable": hvd.metrics() == hvd.metrics.snapshot() or True}, f)
hvd.shutdown()
"""


def test_serve_scraped_twice_values_increase(tmp_path, hvdrun):
    if not harness.have_module("prometheus_client"):
        pytest.skip("prometheus_client is not installed (bindings/python/requirements-test.txt)")
    script = harness.write_script(tmp_path, SERVE)
    job = harness.run_job(2, script, launcher="hvdrun", tmp_path=tmp_path, timeout=120)
    assert job.ok(), job.describe()
    for r in range(2):
        res = job.results[r]
        assert res["first"] == [3, 3 * 32, [str(r)]], res
        assert res["second"] == [7, 7 * 32, [str(r)]], res


LIVE = """
import os, sys, time
import numpy as np
import hvd
out = os.environ["HVD_TEST_OUT"]
hvd.init()
r = hvd.rank()
deadline = time.time() + 60
i = 0
while time.time() < deadline:
    if r == 1:
        time.sleep(0.01)  # rank 1 is late in every step
    hvd.allreduce(np.ones(256, np.float32), name="w")
    i += 1
    stop = os.path.exists(os.path.join(out, "stop")) if r == 0 else False
    if hvd.broadcast_object(stop, 0, name="stop%d" % i):
        break
hvd.shutdown()
"""


def _scrape(port):
    from prometheus_client.parser import text_string_to_metric_families
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read()
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


@pytest.mark.parametrize("launch", ["hvdrun", "mpirun"])
def test_hvdrun_endpoint_shows_every_rank_and_summary(tmp_path, hvdrun, launch):
    # mpirun: hvdrun --transport mpi delegates to mpirun; the ranks report to
    # hvdrun's start-report store instead of a rendezvous store.
    if not harness.have_module("prometheus_client"):
        pytest.skip("prometheus_client is not installed (bindings/python/requirements-test.txt)")
    if launch == "mpirun" and harness.mpi_reason() is not None:
        pytest.skip(harness.mpi_reason())
    script = harness.write_script(tmp_path, LIVE)
    out = tmp_path / "out"
    out.mkdir()
    port = harness.free_port()
    env = harness.child_env({"HVD_TEST_OUT": str(out)})
    mpi = ["--transport", "mpi"] if launch == "mpirun" else []
    p = subprocess.Popen([hvdrun, "-np", "2", *mpi, "--metrics-port", str(port), "--summary", "--",
                          sys.executable, script], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        seen, deadline = [], time.time() + 60
        while time.time() < deadline and len(seen) < 2:
            try:
                fams = _scrape(port)
            except OSError:
                time.sleep(0.2)
                continue
            samples = fams.get("hvd_allreduce_operations", None)
            ranks = {s.labels["rank"]: s.value for s in (samples.samples if samples else [])}
            if set(ranks) == {"0", "1"} and (not seen or min(ranks.values()) > max(seen[-1].values())):
                seen.append(ranks)
            time.sleep(1.2)  # the ranks publish every second
        assert len(seen) == 2, seen
        assert fams["hvd_launcher_ranks_reporting"].samples[0].value == 2
    finally:
        (out / "stop").touch()
        try:
            output, _ = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            output, _ = p.communicate()
    assert p.returncode == 0, output
    assert "summary (2 of 2 ranks reported)" in output, output
    assert "response cache hit rate" in output and "bus bandwidth" in output, output
    assert "rank 1: last in" in output, output


SET_STRAGGLER = """
import os, sys, json, time
import numpy as np
import hvd
out = os.environ["HVD_TEST_OUT"]
delay = float(sys.argv[1])
hvd.init()
r = hvd.rank()
ps = hvd.add_process_set([1, 2, 3])
if r != 0:
    for i in range({steps}):
        # The set's members compute 5 ms; rank 2 another `delay` before its submit.
        time.sleep(0.005 + (delay if r == 2 else 0))
        hvd.allreduce(np.ones(4, np.float32), name="s", process_set=ps)
for i in range(10):  # then the whole job, no one late
    time.sleep(0.005)
    hvd.allreduce(np.ones(4, np.float32), name="all")
with open(os.path.join(out, "rank%d.json" % r), "w") as f:
    json.dump({{"json": hvd.metrics(), "prom": hvd.metrics.text(hvd.metrics.PROMETHEUS)}}, f)
hvd.barrier()
hvd.shutdown()
"""


def test_straggler_named_in_its_process_set(tmp_path, hvdrun):
    # Rank 2 is late in set [1, 2, 3]'s steps only: that set's report names
    # it with its cost; the job's does not; rank 0 (outside the set) has none.
    steps, delay = 30, 0.030
    script = harness.write_script(tmp_path, SET_STRAGGLER.format(steps=steps))
    job = harness.run_job(4, script, args=[delay], launcher="hvdrun", tmp_path=tmp_path,
                          timeout=180, env={"HVD_STRAGGLER_WARNING": "0.5"})
    assert job.ok(), job.describe()
    for r in range(4):
        m, prom = job.results[r]["json"], job.results[r]["prom"]
        (root,) = _scope(m, "all")
        assert root["stragglers"]["named"] == [] and m["stragglers"]["named"] == [], root
        sets = _scope(m, "1,2,3")
        if r == 0:
            assert sets == [] and 'process_set="1,2,3"' not in prom
            continue
        (s,) = sets
        st = s["stragglers"]
        assert [x["rank"] for x in st["ranks"]] == [1, 2, 3], st
        assert st["steps"] >= steps - 2, st
        two = {x["rank"]: x for x in st["ranks"]}[2]
        assert two["last"] >= 0.8 * st["steps"], st
        per_step = two["cost_seconds"] / two["last"]
        assert abs(per_step - delay) <= 0.2 * delay, (per_step, st)
        assert st["named"] == [2], st
        # The Prometheus text carries the set in its process_set label.
        line = 'hvd_straggler_last_total{rank="%d",process_set="1,2,3",straggler="2"} %d' % (
            r, two["last"])
        assert line in prom.splitlines(), prom
    assert "straggler in process set [1, 2, 3]: rank 2" in job.output, job.output[-3000:]
    assert "straggler: rank 2" not in job.output, job.output[-3000:]
