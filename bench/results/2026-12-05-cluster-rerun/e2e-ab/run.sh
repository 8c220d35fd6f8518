#!/bin/bash
# 2 simulated hosts, 1 rank each: hvd-bench e2e (hvd over ucx, gloo) and torch_bench e2e, alternating.
set -u
R=${REPO:-$(cd "$(dirname "$0")/../../../.." && pwd)}; B=${BUILD:-$R/build}; CL=$R/tests/cluster/cluster.sh
export HVDC_ID=e2eab HVDC_DIR=/tmp/hvd-cluster-e2eab
trap '$CL down >/dev/null 2>&1' EXIT
$CL up 2 >/dev/null || { echo "cluster up failed"; exit 1; }
eval "$($CL env | sed 's/^/export /')"
export HVD_LIBRARY_PATH=$B/lib OMP_NUM_THREADS=1
STEP="--compute-ms 100 --netdev eth0 --steps 12 --warmup 2"
for r in 1 2 3 4 5; do
  for t in ucx gloo; do
    x=(-x HVD_LIBRARY_PATH=$B/lib -x OMP_NUM_THREADS=1); [ $t = ucx ] && x+=(-x HVD_UCX_SPIN_US=0)
    $CL exec h1 $B/bin/hvdrun -H hvd-h1,hvd-h2 --network-interface eth0 --start-timeout 30 --transport $t "${x[@]}" \
      $B/bin/hvd-bench e2e --system hvd-$t $STEP 2>/dev/null | grep '^BENCH' | sed "s/^BENCH //" >> "${OUT:-results.jsonl}"
  done
  st=$(mktemp -d /tmp/e2estore.XXXX)
  $CL exec h1 $B/bin/hvdrun -H hvd-h1,hvd-h2 --network-interface eth0 --start-timeout 0 -x GLOO_SOCKET_IFNAME=eth0 -x OMP_NUM_THREADS=1 \
    python3 $R/bench/suite/torch_bench.py e2e --system torch $STEP --store $st 2>/dev/null | grep '^BENCH' | sed "s/^BENCH //" >> "${OUT:-results.jsonl}"
  rm -rf $st
done
