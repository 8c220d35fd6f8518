#!/usr/bin/env bash
# Starts a job whose ranks count as several hosts on this one machine: each
# rank gets torchrun-style variables plus HVD_HOSTNAME and HVD_HOST_ID naming
# its simulated host, so topology, shared memory and the hierarchical
# collectives see several hosts (the wire between them is this machine's
# loopback). Usage: launch_sim_hosts.sh LAYOUT TIMEOUT_S prog args...
#   LAYOUT: ranks per host, e.g. 2,2 or 2,1,3 (hosts in rank order;
#   SIM_HOSTS_INTERLEAVED=1: round robin over hosts of equal counts).
# EXPECT_LOG=REGEX: also require REGEX in the job's output EXPECT_LOG_COUNT
# times (default: once per rank).
set -u
layout=$1; limit=$2; shift 2
IFS=, read -r -a per_host <<< "$layout"
n=0
for c in "${per_host[@]}"; do n=$((n + c)); done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
out=$(mktemp)
trap 'rm -f "$out"' EXIT
pids=()
# SIM_HOSTS_INTERLEAVED=1 (hosts of equal rank counts): rank r on host
# r mod H, so no host's ranks are consecutive (as mpirun --map-by node).
nh=${#per_host[@]}
for ((r = 0; r < n; r++)); do
  if [ "${SIM_HOSTS_INTERLEAVED:-0}" = 1 ]; then
    h=$((r % nh)); l=$((r / nh))
  else
    h=0; l=$r
    while [ "$l" -ge "${per_host[h]}" ]; do l=$((l - per_host[h])); h=$((h + 1)); done
  fi
  RANK=$r WORLD_SIZE=$n LOCAL_RANK=$l LOCAL_WORLD_SIZE=${per_host[h]} MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$port HVD_HOSTNAME=simhost$h HVD_HOST_ID=simhost$h \
    timeout -k 5 "$limit" "$@" >> "$out" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do
  wait "$p" || rc=1
done
cat "$out"
if [ -n "${EXPECT_LOG:-}" ]; then
  want=${EXPECT_LOG_COUNT:-$n}
  got=$(grep -cE -- "$EXPECT_LOG" "$out")
  if [ "$got" -ne "$want" ]; then
    echo "FAIL: '$EXPECT_LOG' logged $got times, want $want"
    rc=1
  fi
fi
exit $rc
