#!/bin/bash
# Before/after of the executor's entry points (stream-ordered completion):
# BEFORE and AFTER are build folders; the two alternate, ROUNDS rounds.
#   BEFORE=/path/build AFTER=/path/build ROUNDS=5 run.sh > results.jsonl
set -u
for round in $(seq 1 "${ROUNDS:-5}"); do
  for which in before after; do
    d=$BEFORE; [ $which = after ] && d=$AFTER
    r() { "$@" 2>/dev/null | grep '^BENCH' | sed "s/^BENCH {/{\"build\":\"$which\",\"round\":$round,/"; }
    r env HVD_LIBRARY_PATH=$d/lib $d/bin/hvd-bench fusion --tensors 1000 --tensor-bytes 4 --system one
    r $d/bin/hvdrun -np 2 $d/bin/hvd-bench latency --system two
    r $d/bin/hvdrun -np 2 $d/bin/hvd-bench fusion --tensors 200 --tensor-bytes 16K --system two
    r $d/bin/hvdrun -np 2 $d/bin/hvd-bench coll --ops allreduce --sizes 4,64K,1M,16M --system two
  done
done
