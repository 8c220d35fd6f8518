#!/bin/bash
# Where the fusion step's time goes (issue 43, item 4): hvd-bench fusion's
# step, submit time, executor time and batches a step (data_us,
# batches_per_step: hvd_metrics), 1000 x 4 KiB against 200 x 16 KiB, at 2 and
# 4 ranks on this host, alternating, ROUNDS rounds of STEPS timed steps.
# BUILD: a build folder (bin/, lib/); default build.
set -u
cd "$(dirname "$0")/../../.."
BUILD=${BUILD:-$PWD/build}
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-200}
for r in $(seq 1 "$ROUNDS"); do
  for np in 2 4; do
    for cell in 1000:4K 200:16K; do
      n=${cell%%:*}; b=${cell##*:}
      line=$("$BUILD/bin/hvdrun" -np "$np" -x HVD_LIBRARY_PATH="$BUILD/lib" -x LD_LIBRARY_PATH="$BUILD/lib" \
        "$BUILD/bin/hvd-bench" fusion --tensors "$n" --tensor-bytes "$b" --steps "$STEPS" 2>&1 | grep BENCH)
      echo "round $r np $np ${n}x$b :: $(echo "$line" | grep -o '"\(time_us\|submit_us\|data_us\|batches_per_step\)":[0-9.]*' | tr '\n' ' ')"
    done
  done
done
