#!/usr/bin/env bash
# A peer that never joins: rank 0 of 2 starts alone (torchrun-style
# variables, rank 0 hosts the store). hvd_init must fail within the start
# timeout with an error naming rank 1.
set -u
prog=$1
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start=$(date +%s)
out=$(RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port HVD_START_TIMEOUT=3 timeout 60 "$prog" 2>&1)
rc=$?
took=$(( $(date +%s) - start ))
echo "$out"
[ "$rc" -ne 0 ] || { echo "FAIL: init succeeded without rank 1"; exit 1; }
echo "$out" | grep -q "\[1\]" || { echo "FAIL: error does not name rank 1"; exit 1; }
[ "$took" -le 15 ] || { echo "FAIL: took ${took}s with a 3 s start timeout"; exit 1; }
echo "PASS (${took}s)"
