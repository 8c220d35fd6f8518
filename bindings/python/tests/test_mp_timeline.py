"""hvd.start_timeline / hvd.stop_timeline (Horovod's) in a 2-rank job: rank 0
writes the Chrome trace, the other rank only checks arguments; a second
start switches files (the first closed as complete JSON); mark_cycles adds
CYCLE_START instants; a file that cannot be written fails on rank 0 alone;
stopping with nothing recorded does nothing."""

import json
import os

import harness

JOB = """
import os, sys
import numpy as np
import hvd
sys.path.insert(0, {workers!r})
from common import write
out = os.environ["HVD_TEST_OUT"]
hvd.init()
r = hvd.rank()
res = {{"rank": r}}
hvd.stop_timeline()  # nothing recorded yet: a no-op
hvd.start_timeline(os.path.join(out, "tl1.json"), mark_cycles=True)
for i in range(3):
    hvd.allreduce(np.ones(8), name="tl.alpha")
hvd.stop_timeline()
hvd.start_timeline(os.path.join(out, "tl2.json"))
hvd.allreduce(np.ones(8), name="tl.beta")
hvd.start_timeline(os.path.join(out, "tl3.json"))  # switches: tl2 closed
hvd.allreduce(np.ones(8), name="tl.gamma")
hvd.stop_timeline()
try:
    hvd.start_timeline(os.path.join(out, "no-such-dir", "x.json"))
    res["bad_dir"] = None
except hvd.InvalidArgumentError as e:
    res["bad_dir"] = str(e)
try:
    hvd.start_timeline("")
    res["empty"] = None
except ValueError as e:
    res["empty"] = str(e)
hvd.allreduce(np.ones(8), name="tl.after")  # the context still works
write(r, res)
hvd.shutdown()
"""


def _events(path):
    with open(path) as f:
        return json.load(f)  # complete JSON, or this raises


def _rows(events):
    return {e["args"]["name"] for e in events if e.get("ph") == "M"}


def test_start_stop_timeline(tmp_path, hvdrun):
    script = harness.write_script(tmp_path, JOB.format(workers=harness.WORKERS))
    job = harness.run_job(2, script, launcher="hvdrun", tmp_path=tmp_path, timeout=120)
    assert job.ok(), job.describe()
    tl1, tl2, tl3 = (_events(os.path.join(tmp_path, f"tl{i}.json")) for i in (1, 2, 3))
    assert "tl.alpha" in _rows(tl1)
    assert sum(1 for e in tl1 if e.get("ph") == "X") >= 3
    assert any(e.get("name") == "CYCLE_START" and e.get("ph") == "i" for e in tl1)
    assert "tl.beta" in _rows(tl2) and "tl.gamma" not in _rows(tl2)
    assert "tl.gamma" in _rows(tl3) and "tl.beta" not in _rows(tl3)
    assert not any(e.get("name") == "CYCLE_START" for e in tl2 + tl3)  # mark_cycles off
    # Rank 0 writes; rank 1 checked the path only.
    assert "cannot write the timeline" in (job.results[0]["bad_dir"] or ""), job.results[0]
    assert job.results[1]["bad_dir"] is None, job.results[1]
    for r in (0, 1):
        assert "empty" in (job.results[r]["empty"] or ""), job.results[r]


# A loss averaged every step, as a training loop does it: from the second
# step on, the negotiation carries it (HVD_PIGGYBACK, on by default), which
# the timeline shows as its allreduce "in_negotiation"; with HVD_PIGGYBACK=0
# every step runs its own allreduce. The values are exact either way.
PIGGYBACK_JOB = """
import os, sys
import numpy as np
import hvd
sys.path.insert(0, {workers!r})
from common import write
out = os.environ["HVD_TEST_OUT"]
hvd.init()
r, n = hvd.rank(), hvd.size()
hvd.start_timeline(os.path.join(out, "piggy.json"))
got = []
for step in range(6):
    loss = np.array([float(r + step)], dtype=np.float32)
    got.append(float(hvd.allreduce(loss, name="loss", op=hvd.Average)[0]))
hvd.stop_timeline()
want = [sum(q + step for q in range(n)) / n for step in range(6)]
write(r, {{"got": got, "want": want}})
hvd.shutdown()
"""


def _loss_allreduces(events):
    tid = {e["tid"] for e in events if e.get("ph") == "M" and e["args"]["name"] == "loss"}
    return [e for e in events if e.get("ph") == "X" and e.get("tid") in tid
            and e.get("name") == "ALLREDUCE"]


def test_small_allreduce_rides_in_the_negotiation(tmp_path, hvdrun):
    script = harness.write_script(tmp_path, PIGGYBACK_JOB.format(workers=harness.WORKERS))
    for setting, riding in (("1", 5), ("0", 0)):
        job = harness.run_job(2, script, launcher="hvdrun", tmp_path=tmp_path, timeout=120,
                              env={"HVD_PIGGYBACK": setting})
        assert job.ok(), job.describe()
        for r in (0, 1):
            assert job.results[r]["got"] == job.results[r]["want"], job.results[r]
        spans = _loss_allreduces(_events(os.path.join(tmp_path, "piggy.json")))
        assert len(spans) == 6, spans
        carried = [e for e in spans if e.get("args", {}).get("in_negotiation")]
        assert len(carried) == riding, (setting, spans)
