"""Shutdown is not a failure (4 ranks, process sets [0, 2] and [0, 1, 2]; see
workers/shutdown_np.py): a rank that shuts down while the others run
collectives without it lets them finish with exact results, and waits for
them in its own shutdown; what involves it fails naming it; a rank that exits
without shutting down is a failure the others see, naming it."""

import os

import pytest

import harness

WORKER = os.path.join(harness.WORKERS, "shutdown_np.py")
STEPS = 40


def _run(mode, tmp_path):
    # The env launcher: no launcher ends the job for them (hvdrun would not
    # either, every rank exits 0); each rank reports what it saw.
    job = harness.run_job(4, WORKER, args=(mode,), launcher="env", tmp_path=tmp_path,
                          timeout=120, env={"HVD_STALL_SHUTDOWN_TIME": "60"})
    assert set(job.results) == {0, 1, 2, 3}, "not every rank reported:\n" + job.describe()
    return job


def _named(err, rank):
    assert err is not None, "the collective succeeded"
    assert "AbortedError" in err and f"rank {rank} " in err and "shut down its context" in err, err


def test_orderly_shutdown_lets_the_others_finish(tmp_path):
    job = _run("orderly", tmp_path)
    assert job.ok(), job.describe()
    res = job.results
    for r in (0, 1, 2):
        assert "sets" not in res[r]["errors"], f"rank {r}: {res[r]['errors']['sets']}"
        assert res[r]["checked"] == 2 * STEPS * (2 if r in (0, 2) else 1), res[r]
        _named(res[r]["errors"]["global"], 3)
        assert res[r]["removed"] == [True, True], res[r]
        assert "shutdown_returned_at" in res[r], res[r]
    # Rank 3 waited in its shutdown for every other rank's.
    last = max(res[r]["shutdown_at"] for r in (0, 1, 2))
    assert res[3]["shutdown_returned_at"] >= last, res


def test_a_member_that_shuts_down_fails_its_sets_only(tmp_path):
    job = _run("member", tmp_path)
    assert job.ok(), job.describe()
    res = job.results
    for r in (0, 2):
        assert "sets" not in res[r]["errors"], f"rank {r}: {res[r]['errors']['sets']}"
        assert res[r]["checked"] == 2 * STEPS, res[r]
        assert res[r]["removed"] == [True, True], res[r]
        _named(res[r]["errors"]["ps012"], 1)
        assert "set [0, 1, 2]" in res[r]["errors"]["ps012"], res[r]["errors"]["ps012"]
        # Ranks 1 and 3 both leave, announcing in one negotiation or in two;
        # the whole context's collective fails naming the departures known
        # when it is refused: both, or whichever came first (under load rank
        # 3's shutdown can be seen before rank 1's).
        glob = res[r]["errors"]["global"]
        assert glob is not None and ("shut down its context" in glob
                                     or "shut down their contexts" in glob), glob
        assert any(who in glob for who in ("rank 1 ", "ranks 1 ", "rank 3 ")), glob


def test_exit_without_shutdown_is_a_named_failure(tmp_path):
    job = _run("exit", tmp_path)
    res = job.results
    left = res[3]["left_at"]
    for r in (0, 1, 2):
        err = res[r]["errors"].get("sets")
        assert err is not None, f"rank {r} did not fail: {res[r]}"
        assert "rank 3" in err, err
        # Noticed at once (the connection closes), not at a timeout.
        assert res[r]["failed_at"] - left < 10, (res[r]["failed_at"] - left, err)
