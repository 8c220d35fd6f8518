"""Elastic jobs with real processes: hvdrun --min-np/--max-np
--host-discovery-script running examples/elastic/train_torch_elastic.py.

  - a worker killed (SIGKILL) mid-training: the survivors go back to the last
    commit, form the job again and finish; their final loss equals the one
    process reference (--reference) for the same membership schedule;
  - a host added through the discovery script: the new worker gets the state
    at the commit where it joins, and the final loss equals the reference;
  - fewer workers than --min-np: hvdrun fails with a message naming it, and
    no worker process is left;
  - process sets: the one whose ranks still exist is made again and works,
    the other is dropped with a warning.

The hosts are loopback addresses (127.0.0.1, .2, .3: one slot each), so that a
failed worker's host can be left out without the others. The reference
computes each rank's gradient in one process and averages them, float64; the
job's allreduce may sum in another order, so the losses are compared to a
relative 1e-9 (in practice they agree to the last bit).
"""

import glob
import json
import math
import os
import re
import subprocess
import sys
import time

import pytest

import harness

pytest.importorskip("torch", reason="torch is not installed (requirements-test.txt)")
pytest.importorskip("sklearn", reason="scikit-learn is not installed (the example's data)")

from elastic_helpers import DISCOVER, EXAMPLE_DIR, JOB_TIMEOUT, elastic_missing  # noqa: E402

EXAMPLE = os.path.join(EXAMPLE_DIR, "train_torch_elastic.py")
RTOL = 1e-9

_REASON = elastic_missing()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=str(_REASON))

# Runs the example, first leaving this worker's pid where the test finds it.
WRAPPER = """
import os, sys
open(os.path.join({out!r}, "pid-%d" % os.getpid()), "w").close()
sys.path.insert(0, {ex!r})
import train_torch_elastic
train_torch_elastic.main(sys.argv[1:])
"""


class Job:
    def __init__(self, proc, out_dir):
        self.rc = proc.returncode
        self.output = proc.stdout.decode("utf-8", "replace")
        self.results = []
        for path in sorted(glob.glob(os.path.join(out_dir, "result-*.json"))):
            with open(path) as f:
                self.results.append(json.load(f))
        self.pids = [int(os.path.basename(p)[4:])
                     for p in glob.glob(os.path.join(out_dir, "pid-*"))]

    def describe(self):
        return f"hvdrun exit code {self.rc}\n--- output ---\n{self.output[-8000:]}"


def run_elastic(tmp_path, hosts, np_, min_np, max_np, args, script=None, timeout_s=30,
                hvdrun_args=()):
    out = tmp_path / "out"
    out.mkdir()
    hosts_file = tmp_path / "hosts.txt"
    hosts_file.write_text("".join(f"{h}:1\n" for h in hosts))
    if script is None:
        script = harness.write_script(tmp_path, WRAPPER.format(out=str(out), ex=EXAMPLE_DIR),
                                      name="worker.py")
        args = ["--result-dir", str(out), *args]
    env = harness.child_env({"HVD_HOSTS_FILE": str(hosts_file), "HVD_TEST_OUT": str(out)})
    cmd = [harness.find_hvdrun(), "-np", str(np_), "--min-np", str(min_np), "--max-np",
           str(max_np), "--host-discovery-script", DISCOVER, "--elastic-timeout",
           str(timeout_s), *hvdrun_args, "--", sys.executable, script, *map(str, args)]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=JOB_TIMEOUT)
    return Job(proc, str(out)), hosts_file


def reference(tmp_path, schedule, args):
    p = subprocess.run([sys.executable, EXAMPLE, "--reference", schedule, *map(str, args)],
                       env=harness.child_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=JOB_TIMEOUT)
    text = p.stdout.decode("utf-8", "replace")
    assert p.returncode == 0, text
    last = text.strip().splitlines()[-1]
    assert last.startswith("final loss "), text
    return float(last.split()[-1])


def assert_no_process_left(job):
    assert job.pids, "no worker started:\n" + job.describe()
    deadline = time.monotonic() + 10
    alive = job.pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _alive(p)]
        time.sleep(0.2)
    assert not alive, f"workers {alive} still running after hvdrun returned\n" + job.describe()


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie has exited
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def assert_same_loss(got, want):
    assert abs(got - want) <= RTOL * abs(want), f"loss {got!r} != reference {want!r}"


TRAIN = ["--epochs", "2", "--commit-every", "5"]


def _first_epoch_steps(ranks, batch=16):
    """Steps in an epoch of the example at `ranks` ranks (its ElasticSampler
    pads the digits data to a multiple of the ranks)."""
    from sklearn.datasets import load_digits
    return math.ceil(math.ceil(len(load_digits().target) / ranks) / batch)


@pytest.mark.parametrize("exit_at", ["mid_epoch", "epoch_end"])
def test_worker_killed_survivors_finish_like_the_reference(tmp_path, exit_at):
    # 3 workers; the worker of rank 1 dies at the start of step 12: the last
    # commit was at step 10, so 3 ranks trained steps 0-9 and 2 from 10 on.
    # epoch_end: it dies in the first step after the first epoch's end (a
    # commit, not a multiple of 5), where the sampler began the next epoch.
    exit_step = 12 if exit_at == "mid_epoch" else _first_epoch_steps(3)
    back = 10 if exit_at == "mid_epoch" else exit_step
    assert exit_at == "mid_epoch" or exit_step % 5 != 0
    job, _ = run_elastic(tmp_path, ["127.0.0.1", "127.0.0.2", "127.0.0.3"], 3, 2, 3,
                         TRAIN + ["--exit-at-step", str(exit_step), "--exit-rank", "1"])
    assert job.rc == 0, job.describe()
    assert len(job.results) == 2, job.describe()
    assert sorted(r["rank"] for r in job.results) == [0, 1]
    for r in job.results:
        assert r["size"] == 2 and r["sizes"] == [2] and r["first_step"] == 0, r
    assert job.results[0]["checksum"] == job.results[1]["checksum"]
    assert job.results[0]["loss"] == job.results[1]["loss"]
    assert f"going on from step {back}\n" in job.output, job.describe()
    want = reference(tmp_path, f"3@0,2@{back}", TRAIN)
    assert_same_loss(job.results[0]["loss"], want)
    # the failure made a difference: without it the loss is another one
    assert abs(want - reference(tmp_path, "3@0", TRAIN)) > 1e-6
    assert_no_process_left(job)


def test_added_host_gets_the_state(tmp_path):
    # 2 workers; at step 10 rank 0 adds 127.0.0.3 to the discovery script's
    # file and every rank commits there: the new worker joins at step 10.
    hosts_file = tmp_path / "hosts.txt"
    job, _ = run_elastic(tmp_path, ["127.0.0.1", "127.0.0.2"], 2, 2, 3,
                         TRAIN + ["--add-host-at-step", "10", "--add-host", "127.0.0.3:1",
                                  "--hosts-file", str(hosts_file)])
    assert job.rc == 0, job.describe()
    assert len(job.results) == 3, job.describe()
    assert sorted(r["rank"] for r in job.results) == [0, 1, 2]
    new = [r for r in job.results if r["worker"].startswith("127.0.0.3:")]
    old = [r for r in job.results if not r["worker"].startswith("127.0.0.3:")]
    assert len(new) == 1 and len(old) == 2, job.results
    assert new[0]["first_step"] == 10 and new[0]["sizes"] == [], new  # synced, no reset
    for r in old:
        assert r["first_step"] == 0 and r["sizes"] == [3], r
    assert len({r["checksum"] for r in job.results}) == 1, job.results
    want = reference(tmp_path, "2@0,3@10", TRAIN)
    for r in job.results:
        assert_same_loss(r["loss"], want)
    assert abs(want - reference(tmp_path, "2@0", TRAIN)) > 1e-6
    assert_no_process_left(job)


def test_summary_counts_the_last_epochs_ranks(tmp_path):
    # --summary in an elastic job: the ranks publish under per-epoch keys, and
    # the summary reads the epoch that finished (3 ranks after the added host),
    # not the 2 of epoch 0; rank 2 joined at step 10 and ran allreduces too.
    hosts_file = tmp_path / "hosts.txt"
    job, _ = run_elastic(tmp_path, ["127.0.0.1", "127.0.0.2"], 2, 2, 3,
                         TRAIN + ["--add-host-at-step", "10", "--add-host", "127.0.0.3:1",
                                  "--hosts-file", str(hosts_file)],
                         hvdrun_args=["--summary"])
    assert job.rc == 0, job.describe()
    assert len(job.results) == 3, job.describe()
    m = re.search(r"summary \((\d+) of (\d+) ranks reported[^\n]*elastic epoch (\d+)", job.output)
    assert m, job.describe()
    assert (int(m.group(1)), int(m.group(2))) == (3, 3), m.group(0)
    assert int(m.group(3)) >= 1, m.group(0)
    assert "bus bandwidth" in job.output, job.describe()
    assert_no_process_left(job)


def test_below_min_np_fails_clearly_and_leaves_no_process(tmp_path):
    t0 = time.monotonic()
    job, _ = run_elastic(tmp_path, ["127.0.0.1", "127.0.0.2"], 2, 2, 2,
                         TRAIN + ["--exit-at-step", "3", "--exit-rank", "1"], timeout_s=5)
    assert job.rc != 0, job.describe()
    assert "min-np" in job.output, job.describe()
    assert not job.results, job.describe()  # nobody finished training
    assert_no_process_left(job)
    assert time.monotonic() - t0 < 120, "the job took too long to give up"


PROCESS_SETS = """
import json, os, sys, warnings
import numpy as np
import hvd
out = os.environ["HVD_TEST_OUT"]
open(os.path.join(out, "pid-%d" % os.getpid()), "w").close()
hvd.init(process_sets=[hvd.ProcessSet([0, 1]), hvd.ProcessSet([0, 2])])
first, second = hvd.elastic._backend.registry().live()
state = hvd.elastic.ObjectState(step=0)
res = {"worker": os.environ.get("HVD_ELASTIC_WORKER")}

@hvd.elastic.run
def train(state):
    while state.step < 6:
        if state.step == 3 and hvd.rank() == 2 and hvd.elastic.membership().epoch == 0:
            os.kill(os.getpid(), 9)
        hvd.allreduce(np.ones(4), name="step")
        state.step += 1
        state.commit()

with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    train(state)
res["warnings"] = [str(x.message) for x in w if "elastic" in str(x.message)]
res["rank"], res["size"] = hvd.rank(), hvd.size()
res["first_id"] = first.process_set_id
res["second_id"] = second.process_set_id
res["first_sum"] = hvd.allreduce(np.array([hvd.rank() + 1.0]), op=hvd.Sum,
                                 process_set=first).tolist()
try:
    hvd.allreduce(np.ones(1), process_set=second)
    res["second_error"] = None
except ValueError as e:
    res["second_error"] = str(e)
with open(os.path.join(out, "result-%d.json" % os.getpid()), "w") as f:
    json.dump(res, f)
hvd.shutdown()
"""


def test_process_sets_after_a_reset(tmp_path):
    script = harness.write_script(tmp_path, PROCESS_SETS, name="sets.py")
    job, _ = run_elastic(tmp_path, ["127.0.0.1", "127.0.0.2", "127.0.0.3"], 3, 2, 3, [],
                         script=script)
    assert job.rc == 0, job.describe()
    assert len(job.results) == 2, job.describe()
    for r in job.results:
        assert r["size"] == 2
        assert r["first_id"] == 1 and r["first_sum"] == [3.0], r  # ranks 0 and 1: 1 + 2
        assert r["second_id"] is None, r
        assert "dropped by an elastic reset" in (r["second_error"] or ""), r
        assert len(r["warnings"]) == 1 and "[0, 2]" in r["warnings"][0], r
    assert_no_process_left(job)
