#!/bin/bash
# A/B of UCX's tcp segment sizes under hvd's UCX plugin: UCX's own 8 KiB /
# 64 KiB (UCX_TCP_TX_SEG_SIZE=8k UCX_TCP_RX_SEG_SIZE=64k in the job's
# environment) against 1 MiB / 1 MiB; same build, alternating, over tcp on
# one host (2 ranks, HVD_SHM=0 UCX_TLS=tcp,self: all over loopback tcp) and on
# simulated clusters of 2 hosts x 2 ranks and 4 hosts x 1 rank. Prints one
# line per run: setting, segments, then size:median_us pairs. hvd over Gloo
# (its TCP) runs in the same rounds, the issue's yardstick for UCX over tcp.
set -u
cd "$(dirname "$0")/../../.."
B=${BUILD:-build}
ROUNDS=${ROUNDS:-3}
SIZES=${SIZES:-4,64K,1M,16M}
coll() {  # coll TX RX EXTRA... (TX gloo: hvd over Gloo)
  local tx=$1 rx=$2 t=ucx; shift 2
  [ "$tx" = gloo ] && t=gloo
  "$B/bin/hvdrun" "$@" --transport $t -x UCX_TCP_TX_SEG_SIZE=$tx -x UCX_TCP_RX_SEG_SIZE=$rx \
    -x HVD_LIBRARY_PATH=$PWD/$B/lib -x OMP_NUM_THREADS=1 \
    "$PWD/$B/bin/hvd-bench" coll --system hvd-$t --sizes "$SIZES" --ops allreduce 2>&1 |
    grep BENCH | sed 's/.*"bytes":\([0-9]*\).*"time_us":\([0-9.]*\),.*/\1:\2/' | tr '\n' ' '
}
for r in $(seq 1 "$ROUNDS"); do
  for seg in "8k 64k" "1m 1m" "gloo -"; do
    echo "one-host tcp  ${seg/ //} :: $(coll $seg -np 2 -x HVD_SHM=0 -x UCX_TLS=tcp,self)"
  done
done
trap 'HVDC_ID=ucxseg2 bash tests/cluster/cluster.sh down >/dev/null 2>&1; HVDC_ID=ucxseg4 bash tests/cluster/cluster.sh down >/dev/null 2>&1' EXIT
for layout in 2x2 4x1; do
  n=${layout%x*}
  export HVDC_ID=ucxseg$n
  bash tests/cluster/cluster.sh up "$n" >/dev/null || { echo "cluster: cannot be made"; exit 0; }
  eval "$(bash tests/cluster/cluster.sh env | sed 's/^/export /')"
  hosts=$(for i in $(seq 1 "$n"); do printf 'hvd-h%d:%s,' "$i" "${layout#*x}"; done); hosts=${hosts%,}
  for r in $(seq 1 "$ROUNDS"); do
    for seg in "8k 64k" "1m 1m" "gloo -"; do
      echo "cluster $layout   ${seg/ //} :: $(bash tests/cluster/cluster.sh exec 1 bash -c "$(declare -f coll); B=$B; SIZES=$SIZES; coll $seg -H $hosts --network-interface eth0")"
    done
  done
  bash tests/cluster/cluster.sh down >/dev/null 2>&1
done
