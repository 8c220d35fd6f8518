#!/usr/bin/env bash
# Starts N copies of a program with torchrun-style variables (rank 0 hosts the
# rendezvous store on MASTER_PORT), waits for all, and fails if any failed or
# the job outlived its time limit. Usage: launch_env.sh N TIMEOUT_S prog args...
set -u
n=$1; limit=$2; shift 2
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    timeout -k 5 "$limit" "$@" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do
  wait "$p" || rc=1
done
exit $rc
