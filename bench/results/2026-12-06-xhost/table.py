"""Ratios against raw Open MPI from one cluster_bench invocation's log.

  python3 table.py RUN_DIR|LOG [...]

Reads RUN_DIR/raw/log.txt (or a copy of it, LOG) (run_all.py --parts cluster): every job's label
("### cluster <rate> <layout> <system> [hier]") and its BENCH records. Per
(rate, layout, op, size) and system, the fastest run's median time (as the
suite's report keeps it); prints a markdown table of each hvd transport's
time over raw MPI's, and the 64 MiB allreduce's share of the link bound
(2(N-1)/N of the bytes over each host's link) where the rate is capped.
"""
import json
import os
import re
import sys

RATE_BPS = {"10gbit": 10e9, "1gbit": 1e9}


def load(path):
    best = {}
    label = None
    for line in open(path, errors="replace"):
        if line.startswith("### "):
            label = line[4:].split()
            continue
        if not line.startswith("BENCH ") or not label or label[0] != "cluster" or "e2e" in label:
            continue
        rec = json.loads(line[6:])
        rate, layout = label[1], label[2]
        system = "mpi" if label[3:5] == ["raw", "mpi"] else label[3]
        key = (rate, layout, rec["op"], rec["bytes"], system)
        t = rec["time_us"]
        best[key] = min(best.get(key, t), t)
    return best


def fmt(us):
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def main(dirs):
    best = {}
    for d in dirs:
        for k, v in load(d + "/raw/log.txt" if os.path.isdir(d) else d).items():
            best[k] = min(best.get(k, v), v)
    systems = sorted({k[4] for k in best if k[4] != "mpi"})
    print("| rate | layout | op | size | raw MPI | " + " | ".join(f"{s} (× MPI)" for s in systems) + " |")
    print("|---|---|---|--:|--:|" + "--:|" * len(systems))
    for key in sorted({k[:4] for k in best}, key=lambda k: (k[0], k[1], k[2], k[3])):
        rate, layout, op, nbytes = key
        if layout == "2x1":
            continue
        mpi = best.get(key + ("mpi",))
        cells = []
        for s in systems:
            t = best.get(key + (s,))
            cells.append("–" if t is None else fmt(t) + (f" ({t / mpi:.2f}×)" if mpi else ""))
        print(f"| {rate} | {layout} | {op} | {nbytes} | {fmt(mpi) if mpi else '–'} | " + " | ".join(cells) + " |")
    print()
    for key in sorted({k[:4] for k in best}):
        rate, layout, op, nbytes = key
        if rate not in RATE_BPS or op != "allreduce" or nbytes < 64 << 20 or layout == "2x1":
            continue
        n = int(layout.split("x")[0]) * int(layout.split("x")[1])
        hosts = int(layout.split("x")[0])
        # Each host's link carries 2(H-1)/H of the bytes (ring over hosts; on 2x2 the
        # hierarchy's leaders, or a flat ring's 2 crossings of the 4).
        bound_us = 2 * (hosts - 1) / hosts * nbytes * 8 / RATE_BPS[rate] * 1e6
        parts = [f"{s} {bound_us / best[key + (s,)]:.0%}" for s in systems + ["mpi"] if key + (s,) in best]
        print(f"- {rate} {layout} 64 MiB allreduce, link bound {fmt(bound_us)} (n={n}): " + ", ".join(parts))


if __name__ == "__main__":
    main(sys.argv[1:])
