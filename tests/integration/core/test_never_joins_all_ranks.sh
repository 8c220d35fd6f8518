#!/usr/bin/env bash
# Rank 2 of 3 never starts (torchrun-style variables, no launcher; rank 0
# hosts the store). Every rank that did start must fail within the start
# timeout naming rank 2, whichever rank's timeout ends first: rank 0 going
# away with its store must not leave rank 1 saying only that the store shut
# down, nor naming no rank at all.
# Runs: ranks 0 and 1 together; rank 1 half a second later (rank 0's timeout
# ends first, while rank 1 waits); rank 1 with the shorter timeout (rank 1's
# ends first). Each twice.
set -u
prog=$1
fail() { echo "FAIL: $*"; exit 1; }
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
T=3
one_run() {  # one_run DELAY_OF_RANK_1 TIMEOUT_OF_RANK_1
  local delay=$1 t1=$2 port out0 out1 p0 p1 rc0 rc1 start took
  port=$(free_port)
  out0=$(mktemp)
  out1=$(mktemp)
  start=$(date +%s)
  RANK=0 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port HVD_START_TIMEOUT=$T \
    timeout 60 "$prog" >"$out0" 2>&1 &
  p0=$!
  sleep "$delay"
  RANK=1 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port HVD_START_TIMEOUT=$t1 \
    timeout 60 "$prog" >"$out1" 2>&1 &
  p1=$!
  wait "$p0"; rc0=$?
  wait "$p1"; rc1=$?
  took=$(( $(date +%s) - start ))
  echo "--- rank 1 delayed ${delay}s, its timeout ${t1}s: took ${took}s"
  sed 's/^/rank 0: /' "$out0"
  sed 's/^/rank 1: /' "$out1"
  local bad=""
  [ "$rc0" -ne 0 ] || bad="rank 0 succeeded without rank 2"
  [ "$rc1" -ne 0 ] || bad="rank 1 succeeded without rank 2"
  grep -q "ranks \[2\] did not join within" "$out0" || bad="${bad:+$bad; }rank 0 does not name rank 2"
  grep -q "ranks \[2\] did not join within" "$out1" || bad="${bad:+$bad; }rank 1 does not name rank 2"
  [ "$took" -le 20 ] || bad="${bad:+$bad; }took ${took}s with ${T} s start timeouts"
  rm -f "$out0" "$out1"
  [ -z "$bad" ] || fail "$bad"
}
for _ in 1 2; do
  one_run 0 $T
  one_run 0.5 $T
  one_run 0 2
done
echo PASS
