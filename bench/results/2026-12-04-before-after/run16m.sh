#!/bin/bash
# The 16 MiB cell again, alone, ROUNDS alternating rounds (run.sh's first
# pass showed 1.25x on it, with the fastest runs 1.12x apart).
set -u
for round in $(seq 1 "${ROUNDS:-10}"); do
  for which in before after; do
    d=$BEFORE; [ $which = after ] && d=$AFTER
    $d/bin/hvdrun -np 2 $d/bin/hvd-bench coll --ops allreduce --sizes 16M --system two 2>/dev/null |
      grep '^BENCH' | sed "s/^BENCH {/{\"build\":\"$which\",\"round\":$round,/"
  done
done
