#!/bin/bash
# before/after, alternating builds
B=/tmp/before/build-before; A=/work/main/build
out=/tmp/ba.jsonl; : > $out
for round in 1 2 3 4 5; do
  for which in before after; do
    d=$B; [ $which = after ] && d=$A
    r() { "$@" 2>/dev/null | grep '^BENCH' | sed "s/^BENCH {/{\"build\":\"$which\",\"round\":$round,/" >> $out; }
    r env HVD_LIBRARY_PATH=$d/lib $d/bin/hvd-bench fusion --tensors 1000 --tensor-bytes 4 --system one
    r $d/bin/hvdrun -np 2 $d/bin/hvd-bench latency --system two
    r $d/bin/hvdrun -np 2 $d/bin/hvd-bench fusion --tensors 200 --tensor-bytes 16K --system two
    r $d/bin/hvdrun -np 2 $d/bin/hvd-bench coll --ops allreduce --sizes 4,64K,1M,16M --system two
  done
done
