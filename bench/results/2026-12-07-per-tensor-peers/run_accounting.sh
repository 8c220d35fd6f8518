#!/bin/bash
# Where a submitted tensor's time goes at 2 ranks on this host (issue 43,
# item 4): hvd-bench fusion steps that differ in the tensor count alone (the
# same bytes: 1000 x 4 KiB and 250 x 16 KiB; no bytes to speak of: 1000 x 4 B
# and 250 x 4 B) and in the buffers' layout (--contiguous: adjacent slices of
# one allocation), the step, its submit time and the executor's time
# (data_us, hvd_metrics), ROUNDS rounds of STEPS steps, cells alternating.
# BUILD: a build folder (bin/, lib/); default build.
set -u
cd "$(dirname "$0")/../../.."
BUILD=${BUILD:-$PWD/build}
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-300}
for r in $(seq 1 "$ROUNDS"); do
  for cell in 1000:4:- 250:4:- 1000:4K:- 250:16K:- 200:16K:- 1000:4K:--contiguous 250:16K:--contiguous; do
    IFS=: read -r n b flag <<< "$cell"
    extra=(); [ "$flag" = - ] || extra=("$flag")
    line=$("$BUILD/bin/hvdrun" -np 2 -x HVD_LIBRARY_PATH="$BUILD/lib" "$BUILD/bin/hvd-bench" fusion \
      --tensors "$n" --tensor-bytes "$b" --steps "$STEPS" "${extra[@]}" 2>&1 | grep '^BENCH')
    layout=separate; [ "$flag" = - ] || layout=contiguous
    echo "round $r ${n}x$b $layout :: $(echo "$line" | grep -o '"\(time_us\|submit_us\|data_us\)":[0-9.]*' | tr '\n' ' ')"
  done
done
