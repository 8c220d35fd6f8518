#!/usr/bin/env bash
# UCX idle waits on hosts whose CPUs their ranks share: sleep at once
# (HVD_UCX_SPIN_US=0, the cluster bench's setting), spin 100 us giving the
# CPU away between rounds (HVD_UCX_SPIN_YIELD=1), or spin 100 us busy; hvd-mpi
# (yield_when_idle) beside. 2x2 and 4x1, flat and hierarchical, alternating.
set -euo pipefail
B=${BUILD:?}
ROOT=${ROOT:?}
CL="$ROOT/tests/cluster/cluster.sh"
export HVDC_ID=uy$$
trap 'bash "$CL" down >/dev/null 2>&1 || true' EXIT
bash "$CL" up 4 >&2
eval "$(bash "$CL" env | sed "s/^/export /")"
for rep in $(seq 1 "${REPS:-3}"); do
  for layout in 2x2 4x1; do
    if [ "$layout" = 2x2 ]; then hosts=hvd-h1:2,hvd-h2:2; else hosts=hvd-h1,hvd-h2,hvd-h3,hvd-h4; fi
    for variant in sleep yield spin mpi; do
      for hier in 0 1; do
        t=ucx; xs=(-x "HVD_LIBRARY_PATH=$B/lib" -x OMP_NUM_THREADS=1 -x "HVD_HIERARCHICAL=$hier")
        case $variant in
          sleep) xs+=(-x HVD_UCX_SPIN_US=0) ;;
          yield) xs+=(-x HVD_UCX_SPIN_US=100 -x HVD_UCX_SPIN_YIELD=1) ;;
          spin) xs+=(-x HVD_UCX_SPIN_US=100) ;;
          mpi) t=mpi; xs+=(-x OMPI_MCA_mpi_yield_when_idle=1); export OMPI_MCA_mpi_yield_when_idle=1 ;;
        esac
        out=$(bash "$CL" exec h1 "$B/bin/hvdrun" -H "$hosts" --network-interface eth0 --start-timeout 30 \
                --transport "$t" "${xs[@]}" "$B/bin/hvd-bench" coll --system "hvd-$t" --ops allreduce \
                --sizes 4,64K,1M,16M --iters-scale 0.3 2>/dev/null | sed -n 's/^BENCH //p' || true)
        unset OMPI_MCA_mpi_yield_when_idle
        while IFS= read -r line; do
          [ -n "$line" ] && echo "{\"variant\":\"$variant\",\"rep\":$rep,\"layout\":\"$layout\",\"hier\":$hier,${line#\{}"
        done <<< "$out"
      done
    done
  done
done
