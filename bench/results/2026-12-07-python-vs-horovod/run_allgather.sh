#!/bin/bash
# The small collectives from Python at 2 ranks on this host, the result path
# before and after (hvd's torch frontend of BEFORE, a worktree of e7cce38,
# and of this tree; the same library), beside Horovod (mpirun): rounds of the
# three jobs, their order rotated (Horovod at a cycle time of 0.1 ms: at its
# default 1 ms a small op on one host takes about 1 ms).
set -u
cd "$(dirname "$0")/../../.."
B=${BUILD:-build}
BEFORE=${BEFORE:?a worktree of e7cce38}
ROUNDS=${ROUNDS:-5}
ARGS=(coll --ops allgather,allreduce,broadcast --sizes 4,64K)
run() {
  case $1 in
    before) "$B/bin/hvdrun" -np 2 python3 "$BEFORE/bench/suite/torch_bench.py" "${ARGS[@]}" --system hvd-torch ;;
    after) "$B/bin/hvdrun" -np 2 python3 bench/suite/torch_bench.py "${ARGS[@]}" --system hvd-torch ;;
    horovod) mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 -x PYTHONPATH -x OMP_NUM_THREADS=1 -x HOROVOD_CYCLE_TIME=0.1 \
               python3 bench/suite/torch_bench.py "${ARGS[@]}" --system horovod ;;
  esac 2>/dev/null | grep '^BENCH' | sed "s/^BENCH /BENCH $1 /"
}
for r in $(seq 1 "$ROUNDS"); do
  order=(before after horovod)
  for i in $(seq 1 $(( (r - 1) % 3 ))); do order=("${order[@]:1}" "${order[0]}"); done
  for j in "${order[@]}"; do run "$j"; done
done
