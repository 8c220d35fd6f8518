#!/bin/bash
# The piggyback's rivals before and after, on the simulated cluster: the
# default transport and raw Open MPI, unshaped and 10 Gbit/s, 2 x 2 and
# 4 x 1, SIZES (4 B to 64 MiB), 4 repeats a run; BEFORE and AFTER are build folders
# (bin/ and lib/) of the library without and with the change; runs
# alternate, ROUNDS of each. Each run's folder lands in OUT.
set -u
cd "$(dirname "$0")/../../.."
: "${BEFORE:?build folder without the change}" "${AFTER:?build folder with it}" "${OUT:?where the runs go}"
ROUNDS=${ROUNDS:-2}
SIZES=${SIZES:-4,64K,1M,64M}
for r in $(seq 1 "$ROUNDS"); do
  if (( r % 2 )); then order="before after"; else order="after before"; fi
  for run in $order; do
    dir=$BEFORE; [ "$run" = after ] && dir=$AFTER
    HVD_BENCH_CLUSTER_RATES=10gbit HVD_BENCH_CLUSTER_TRANSPORTS=default HVD_BENCH_CLUSTER_HIER=auto \
    HVD_BENCH_CLUSTER_PEERS=mpi HVD_BENCH_CLUSTER_E2E=0 \
      python3 bench/run_all.py --no-build --build-dir "$dir" --parts cluster --sizes "$SIZES" \
      --coll-repeats 4 --out "$OUT/$run.$r" > "$OUT/$run.$r.log" 2>&1 || echo "run $run $r failed"
  done
done
