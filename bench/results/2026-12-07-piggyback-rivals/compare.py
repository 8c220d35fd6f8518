"""Before and after from run.sh's folders: per (rate, layout, op, size), the
fastest repeat's time of hvd's default over all runs of each side, raw Open
MPI's over all runs, and the ratios.

  python3 compare.py OUT
"""
import glob
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "2026-12-06-xhost"))
from table import fmt, load  # noqa: E402


def side(out, name):
    best = {}
    for d in sorted(glob.glob(os.path.join(out, name + ".*"))):
        if os.path.isdir(d):
            for k, v in load(os.path.join(d, "raw", "log.txt")).items():
                best[k] = min(best.get(k, v), v)
    return best


def main(out):
    b, a = side(out, "before"), side(out, "after")
    print("| rate | layout | op | size | raw MPI | before (× MPI) | after (× MPI) | after ÷ before |")
    print("|---|---|---|--:|--:|--:|--:|--:|")
    for key in sorted({k[:4] for k in b if k[1] != "2x1"}):
        mpi = min(x for x in (b.get(key + ("mpi",)), a.get(key + ("mpi",))) if x)
        tb, ta = b[key + ("hvd-default",)], a[key + ("hvd-default",)]
        print(f"| {' | '.join(str(x) for x in key)} | {fmt(mpi)} | {fmt(tb)} ({tb / mpi:.2f}×) | "
              f"{fmt(ta)} ({ta / mpi:.2f}×) | {ta / tb:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1])
