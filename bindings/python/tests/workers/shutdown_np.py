"""A rank that leaves while the others still run process-set collectives
without it (4 ranks; sets [0, 2] and [0, 1, 2]). Modes:

* orderly: rank 3 (in neither set) calls hvd.shutdown() at once; ranks 0-2 run
  their sets' allreduces for a while (exact sums), then a collective of the
  whole context (it must fail naming rank 3), then shut down.
* member: rank 1 (in [0, 1, 2] only) shuts down at once; ranks 0 and 2 go on
  in [0, 2], and their [0, 1, 2] allreduce fails naming rank 1; rank 3 shuts
  down at once too.
* exit: rank 3 leaves without shutting down (os._exit); the others' next
  collectives fail, naming rank 3.

Each rank writes $HVD_TEST_OUT/rank<r>.json: what it ran, its errors and the
times (time.time()) of the events the test compares."""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import write  # noqa: E402

import hvd  # noqa: E402

STEPS = 40  # set allreduces before, and again after, the whole context's


def run_sets(sets, rank, first, out):
    """STEPS allreduces in each of `sets`, checked exactly; False on an error."""
    try:
        for step in range(first, first + STEPS):
            for ps in sets:
                x = np.arange(1000, dtype=np.int64) * (rank + 1) + step
                got = hvd.allreduce(x, op=hvd.Sum, name=f"s{step}", process_set=ps)
                want = sum(np.arange(1000, dtype=np.int64) * (r + 1) + step for r in ps.ranks)
                if not np.array_equal(got, want):
                    raise AssertionError(f"step {step}, set {ps.ranks}: {got[:4]} != {want[:4]}")
                out["checked"] += 1
            time.sleep(0.002)
        return True
    except Exception as e:  # noqa: BLE001 - the test reads it
        out["errors"]["sets"] = f"{type(e).__name__}: {e}"
        out["failed_at"] = time.time()
        return False


def fails(key, out, **kw):
    """A collective that involves the rank that left: its error, or None."""
    try:
        hvd.allreduce(np.ones(4), name=f"after.{key}", **kw)
        out["errors"][key] = None
    except Exception as e:  # noqa: BLE001
        out["errors"][key] = f"{type(e).__name__}: {e}"


def main(mode):
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    assert size == 4, size
    ps02 = hvd.add_process_set([0, 2])
    ps012 = hvd.add_process_set([0, 1, 2])
    out = {"rank": rank, "mode": mode, "errors": {}, "checked": 0}
    leaver = 1 if mode == "member" else 3
    if rank == leaver or (mode == "member" and rank == 3):
        out["left_at"] = time.time()
        if mode == "exit":
            write(rank, out)
            os._exit(0)
        hvd.shutdown()
        out["shutdown_returned_at"] = time.time()
        write(rank, out)
        return
    sets = [ps02] if mode == "member" else [s for s in (ps02, ps012) if s.included()]
    # Set collectives while the other rank leaves, then one of the whole
    # context (it waits for the departure, and fails naming the rank), then
    # set collectives again, after the departure.
    if run_sets(sets, rank, 0, out):
        fails("global", out)
        if mode == "member":
            fails("ps012", out, process_set=ps012)
        if run_sets(sets, rank, STEPS, out):
            # Removing a set is collective over its members only: it works
            # (a set with the departed rank in it is gone already).
            out["removed"] = [hvd.remove_process_set(ps02), hvd.remove_process_set(ps012)]
    out["shutdown_at"] = time.time()
    write(rank, out)  # before the shutdown, in case it does not return
    hvd.shutdown()
    out["shutdown_returned_at"] = time.time()
    write(rank, out)


if __name__ == "__main__":
    main(sys.argv[1])
