"""Launch paths other than hvdrun, and failures across processes."""

import pytest

import harness

SMALL_JOB = """
import os, sys, time, json
import numpy as np
import hvd
sys.path.insert(0, {workers!r})
from common import write
hvd.init()
r, n = hvd.rank(), hvd.size()
s = hvd.allreduce(np.full(4, r + 1, np.int64), op=hvd.Sum, name="sum")
write(r, {{"rank": r, "size": n, "local": [hvd.local_rank(), hvd.local_size()],
          "sum": s.tolist(), "transport": hvd.transport()}})
hvd.shutdown()
"""


@pytest.mark.parametrize("launcher", ["torchrun", "env"])
def test_torchrun_style_launch(tmp_path, launcher):
    """RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT as torchrun sets them: rank 0
    hosts the rendezvous store, no hvdrun involved."""
    script = harness.write_script(tmp_path, SMALL_JOB.format(workers=harness.WORKERS))
    job = harness.run_job(3, script, launcher=launcher, tmp_path=tmp_path, timeout=120)
    assert job.ok(), job.describe()
    for r in range(3):
        res = job.results[r]
        assert (res["rank"], res["size"], res["local"]) == (r, 3, [r, 3])
        assert res["sum"] == [6] * 4 and res["transport"] == "gloo"


DYING_JOB = """
import os, sys, time
import numpy as np
import hvd
sys.path.insert(0, {workers!r})
from common import write
hvd.init(stall_shutdown_s=15.0, transport_timeout_s=15.0)
r = hvd.rank()
hvd.allreduce(np.ones(4), name="before")
if r == 2:
    os._exit(3)  # dies without a word: no shutdown, sockets just close
t0 = time.time()
outcome = None
try:
    for i in range(100):
        hvd.allreduce(np.ones(1 << 16), name=f"after.{{i}}")
    outcome = "no error"
except hvd.HvdError as e:
    outcome = f"{{type(e).__name__}} status={{e.status}}: {{e}}"
write(r, {{"outcome": outcome, "is_hvd_error": outcome != "no error",
          "seconds": time.time() - t0}})
try:
    hvd.shutdown()
except hvd.HvdError:
    pass
"""


def test_rank_that_dies_gives_hvd_error_not_hang(tmp_path):
    script = harness.write_script(tmp_path, DYING_JOB.format(workers=harness.WORKERS))
    job = harness.run_job(3, script, launcher="env", tmp_path=tmp_path, timeout=120)
    assert job.returncodes[2] == 3, job.describe()
    for r in (0, 1):
        assert job.returncodes[r] == 0, job.describe()
        res = job.results[r]
        assert res["is_hvd_error"], res
        assert res["seconds"] < 60, res  # bounded by the stall/transport timeouts


def test_hvdrun_reports_a_failing_rank(tmp_path, hvdrun):
    body = ("import sys, numpy as np, hvd\nhvd.init()\n"
            "hvd.allreduce(np.ones(2), name='x')\n"
            "sys.exit(7 if hvd.rank() == 1 else 0)\n")
    script = harness.write_script(tmp_path, body)
    job = harness.run_job(2, script, launcher="hvdrun", tmp_path=tmp_path, timeout=120)
    assert job.returncodes == [7], job.describe()
