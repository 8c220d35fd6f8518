#!/bin/bash
# A/B of the Gloo plugin's event-loop policy (HVD_GLOO_LOOP_SCHED=normal: the
# old behaviour; batch: the default), same build, alternating, on one host
# (2 ranks under hvdrun) and on a simulated cluster of 2 hosts x 2 ranks.
# Prints one line per run: setting, policy, then size:median_us pairs.
set -u
cd "$(dirname "$0")/../../.."
B=${BUILD:-build}
ROUNDS=${ROUNDS:-3}
coll() {  # coll POLICY EXTRA...
  local pol=$1; shift
  "$B/bin/hvdrun" "$@" -x HVD_GLOO_LOOP_SCHED=$pol -x HVD_LIBRARY_PATH=$PWD/$B/lib -x OMP_NUM_THREADS=1 \
    "$PWD/$B/bin/hvd-bench" coll --system hvd-gloo --sizes 4,64K,1M,16M --ops allreduce 2>&1 |
    grep BENCH | sed 's/.*"bytes":\([0-9]*\).*"time_us":\([0-9.]*\),.*/\1:\2/' | tr '\n' ' '
}
for r in $(seq 1 "$ROUNDS"); do
  for pol in normal batch; do
    echo "one-host HVD_SHM=0 $pol :: $(coll $pol -np 2 --transport gloo -x HVD_SHM=0)"
    echo "one-host default    $pol :: $(coll $pol -np 2 --transport gloo)"
  done
done
export HVDC_ID=gloolp
trap 'bash tests/cluster/cluster.sh down >/dev/null 2>&1' EXIT
bash tests/cluster/cluster.sh up 2 >/dev/null || { echo "cluster: cannot be made"; exit 0; }
eval "$(bash tests/cluster/cluster.sh env | sed 's/^/export /')"
for r in $(seq 1 "$ROUNDS"); do
  for pol in normal batch; do
    echo "cluster 2x2        $pol :: $(bash tests/cluster/cluster.sh exec 1 bash -c "$(declare -f coll); B=$B; coll $pol -H hvd-h1:2,hvd-h2:2 --network-interface eth0 --transport gloo")"
  done
done
