#!/usr/bin/env python3
"""Medians over the rounds of output.txt (run.sh): one row per place and system,
piggyback off / on side by side, and raw Open MPI's of the same rounds."""
import collections, statistics, sys
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1] if len(sys.argv) > 1 else "output.txt"):
    if "::" not in line:
        continue
    head, vals = line.split("::")
    parts = head.split()
    where = " ".join(parts[:2])
    what = " ".join(parts[2:])
    seen = set()
    for kv in vals.split():
        size, us = kv.split(":")
        if size in seen:  # raw MPI prints a second variant per size
            continue
        seen.add(size)
        rows[(where, what)][int(size)].append(float(us))
sizes = sorted({s for r in rows.values() for s in r})
print("| where | system | " + " | ".join(f"{s} B" for s in sizes) + " |")
print("|---|---|" + "--:|" * len(sizes))
for (where, what), r in rows.items():
    cells = [f"{statistics.median(r[s]):.1f}" if r.get(s) else "" for s in sizes]
    print(f"| {where} | {what} | " + " | ".join(cells) + " |")
