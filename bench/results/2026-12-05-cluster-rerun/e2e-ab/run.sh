#!/bin/bash
# The 2-host training step (hvd-bench e2e: ResNet-50's gradients, 100 ms of
# compute slept) on 2 simulated hosts, 1 rank each, unshaped, in alternating
# rounds; one BENCH record per run appended to $OUT.
#   run.sh            hvd over ucx, hvd over gloo, torch.distributed (gloo):
#                     5 rounds (OUT default results.jsonl)
#   run.sh gloo       hvd over gloo with its defaults, HVD_FUSION_THRESHOLD
#                     25 MiB and 8 MiB, HVD_CYCLE_TIME=5: 4 rounds (OUT
#                     default gloo_settings.jsonl)
# REPO (default: this checkout) and BUILD (default REPO/build). Root only (the
# cluster's namespaces); the cluster is torn down on every path.
set -u
mode=${1:-systems}
R=${REPO:-$(cd "$(dirname "$0")/../../../.." && pwd)}; B=${BUILD:-$R/build}; CL=$R/tests/cluster/cluster.sh
if [ "$mode" = gloo ]; then OUT=${OUT:-gloo_settings.jsonl}; rounds=4; else OUT=${OUT:-results.jsonl}; rounds=5; fi
export HVDC_ID=e2eab HVDC_DIR=/tmp/hvd-cluster-e2eab
store=""
trap '$CL down >/dev/null 2>&1; [ -n "$store" ] && rm -rf "$store"' EXIT
$CL up 2 >/dev/null || { echo "cluster up failed"; exit 1; }
eval "$($CL env | sed 's/^/export /')"
export HVD_LIBRARY_PATH=$B/lib OMP_NUM_THREADS=1
STEP=(--compute-ms 100 --netdev eth0 --steps 12 --warmup 2)
record() { grep '^BENCH' | sed 's/^BENCH //' >>"$OUT"; }
# hvd TRANSPORT LABEL [-x VAR=VALUE ...]
hvd() {
  local t=$1 label=$2
  shift 2
  $CL exec h1 "$B/bin/hvdrun" -H hvd-h1,hvd-h2 --network-interface eth0 --start-timeout 30 \
    --transport "$t" -x "HVD_LIBRARY_PATH=$B/lib" -x OMP_NUM_THREADS=1 "$@" \
    "$B/bin/hvd-bench" e2e --system "$label" "${STEP[@]}" 2>/dev/null | record
}
torch_step() {
  # torch.distributed's ranks meet in a FileStore on the hosts' shared /tmp.
  store=$(mktemp -d -p /tmp)
  $CL exec h1 "$B/bin/hvdrun" -H hvd-h1,hvd-h2 --network-interface eth0 --start-timeout 0 \
    -x GLOO_SOCKET_IFNAME=eth0 -x OMP_NUM_THREADS=1 \
    python3 "$R/bench/suite/torch_bench.py" e2e --system torch "${STEP[@]}" --store "$store" 2>/dev/null | record
  rm -rf "$store"
  store=""
}
for _ in $(seq 1 $rounds); do
  if [ "$mode" = gloo ]; then
    hvd gloo gloo
    hvd gloo gloo-fuse25M -x HVD_FUSION_THRESHOLD=26214400
    hvd gloo gloo-fuse8M -x HVD_FUSION_THRESHOLD=8388608
    hvd gloo gloo-cycle5 -x HVD_CYCLE_TIME=5
  else
    hvd ucx hvd-ucx -x HVD_UCX_SPIN_US=0
    hvd gloo hvd-gloo
    torch_step
  fi
done
