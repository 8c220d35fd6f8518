#!/usr/bin/env bash
# A/B of the ring's progress between reduction pieces (an experiment, not kept: README.md), on
# the simulated cluster: hvd-bench allreduce over ucx, mpi and gloo (control:
# its plugin has its own progress thread, so nothing changes for it), 2x2 and
# 4x1, flat and hierarchical, alternating the build without it (BEFORE) and
# with it (AFTER) in every repeat. Output: one JSON record per line, tagged.
#   BEFORE=/path/build AFTER=/path/build REPS=4 run.sh > output.jsonl
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
CL="$ROOT/tests/cluster/cluster.sh"
export HVDC_ID=ab$$
trap 'bash "$CL" down >/dev/null 2>&1 || true' EXIT
bash "$CL" up 4 >&2
eval "$(bash "$CL" env | sed 's/^/export /')"
export HVDC_ID=ab$$
for rep in $(seq 1 "${REPS:-4}"); do
  for build in BEFORE AFTER; do
    b=${!build}
    for layout in 2x2 4x1; do
      if [ "$layout" = 2x2 ]; then hosts=hvd-h1:2,hvd-h2:2; else hosts=hvd-h1,hvd-h2,hvd-h3,hvd-h4; fi
      for t in ucx mpi gloo; do
        for hier in 0 1; do
          xs=(-x "HVD_LIBRARY_PATH=$b/lib" -x OMP_NUM_THREADS=1 -x "HVD_HIERARCHICAL=$hier")
          [ "$t" = ucx ] && xs+=(-x HVD_UCX_SPIN_US=0)
          [ "$t" = mpi ] && { xs+=(-x OMPI_MCA_mpi_yield_when_idle=1); export OMPI_MCA_mpi_yield_when_idle=1; }
          out=$(bash "$CL" exec h1 "$b/bin/hvdrun" -H "$hosts" --network-interface eth0 --start-timeout 30 \
                  --transport "$t" "${xs[@]}" "$b/bin/hvd-bench" coll --system "hvd-$t" --ops allreduce \
                  --sizes 64K,1M,16M --iters-scale 0.3 2>/dev/null | sed -n 's/^BENCH //p' || true)
          unset OMPI_MCA_mpi_yield_when_idle
          while IFS= read -r line; do
            [ -n "$line" ] && echo "{\"build\":\"$build\",\"rep\":$rep,\"layout\":\"$layout\",\"hier\":$hier,${line#\{}"
          done <<< "$out"
        done
      done
    done
  done
done
