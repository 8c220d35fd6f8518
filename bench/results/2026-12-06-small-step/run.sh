#!/bin/bash
# 4-byte allreduce at 2 and 4 ranks on one host: hvd's default (no transport
# named) against raw Open MPI (mpi-bench), alternating rounds.
set -u
cd "$(dirname "$0")/../../.."
B=build
ROUNDS=${ROUNDS:-5}
pick() { grep BENCH | sed 's/.*"bytes":\([0-9]*\).*"time_us":\([0-9.]*\),.*/\1:\2/' | tr '\n' ' '; }
for r in $(seq 1 "$ROUNDS"); do
  for np in 2 4; do
    echo "round $r np $np hvd-default :: $("$B/bin/hvdrun" -np $np -x HVD_LIBRARY_PATH="$PWD/$B/lib" -x OMP_NUM_THREADS=1 "$PWD/$B/bin/hvd-bench" coll --system hvd-default --sizes 4 --ops allreduce 2>&1 | pick)"
    echo "round $r np $np mpi :: $(mpirun --allow-run-as-root --oversubscribe --bind-to none -np $np "$PWD/$B/bin/mpi-bench" coll --system mpi --sizes 4 --ops allreduce 2>&1 | pick)"
    echo "round $r np $np mpi-yield :: $(OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np $np "$PWD/$B/bin/mpi-bench" coll --system mpi --sizes 4 --ops allreduce 2>&1 | pick)"
  done
done
