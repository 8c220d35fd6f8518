#!/bin/bash
# The 4-byte allreduce at 2 and 4 ranks on one host: hvd's default (no
# transport named), a build before and after, against raw Open MPI
# (mpi-bench; oversubscribed, Open MPI yields when idle), alternating
# rounds, 50,000 timed iterations each. BEFORE, AFTER: build folders
# (bin/, lib/); AFTER defaults to build.
set -u
cd "$(dirname "$0")/../../.."
AFTER=${AFTER:-$PWD/build}
BEFORE=${BEFORE:-}
ROUNDS=${ROUNDS:-5}
pick() { grep BENCH | sed 's/.*"variant":"\([a-z]*\)".*"bytes":\([0-9]*\).*"time_us":\([0-9.]*\),.*/\1:\3/' | tr '\n' ' '; }
hvd() {  # build np
  "$1/bin/hvdrun" -np "$2" -x HVD_LIBRARY_PATH="$1/lib" -x LD_LIBRARY_PATH="$1/lib" -x OMP_NUM_THREADS=1 \
    "$1/bin/hvd-bench" coll --system hvd-default --sizes 4 --ops allreduce --iters-scale 1000 2>&1 | pick
}
for r in $(seq 1 "$ROUNDS"); do
  for np in 2 4; do
    [ -n "$BEFORE" ] && echo "round $r np $np hvd-before :: $(hvd "$BEFORE" $np)"
    echo "round $r np $np hvd-after :: $(hvd "$AFTER" $np)"
    echo "round $r np $np mpi :: $(mpirun --allow-run-as-root --oversubscribe --bind-to none -np $np "$AFTER/bin/mpi-bench" coll --system mpi --sizes 4 --ops allreduce --iters-scale 1000 2>&1 | pick)"
  done
done
