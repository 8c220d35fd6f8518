#!/usr/bin/env bash
# test_peer_silent.sh HVDRUN PEER_SILENT MODE: hvdrun -np 3 with a peer
# timeout of 3 s (HVD_PEER_TIMEOUT=3) and the default transport timeout
# (30 s); the caller picks the path (HVD_GLOO_SHM=0: TCP).
#  MODE stop: rank 2 stops itself (SIGSTOP) mid-run. Ranks 0 and 1 must each
#    fail within the peer timeout + 2 s, naming rank 2 and its host; hvdrun
#    must end the job and no process may be left.
#  MODE slow: rank 2 computes 8 s between two submits (not stopped). Every
#    rank must complete both allreduces with exact results.
set -u
hvdrun=$1; prog=$2; mode=$3
mark="hvdmark_$$_${RANDOM}${RANDOM}"
out=$(mktemp)
cleanup() {
  for p in $(pgrep -f -- "$mark"); do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
  rm -f "$out"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
unset HVD_TRANSPORT HVD_RANK HVD_SIZE RANK WORLD_SIZE HVD_RENDEZVOUS_ADDR HVD_SECRET \
  HVD_TRANSPORT_TIMEOUT HVD_STALL_SHUTDOWN_TIME HVD_STALL_WARNING_TIME
bound=3
start=$(date +%s)
HVD_PEER_TIMEOUT=$bound timeout -k 5 60 "$hvdrun" -np 3 --grace-period 2 \
  "$prog" "$mode" 2 "$mark" >"$out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
cat "$out"
echo "hvdrun exited with $rc after ${took}s"
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the job hung"
n=$(grep -c "^rank [0-9]: up$" "$out")
[ "$n" -eq 3 ] || fail "$n of 3 ranks came up"
left=$(pgrep -f -- "$mark")
[ -z "$left" ] || fail "processes left after hvdrun exited: $left"
if [ "$mode" = slow ]; then
  [ "$rc" -eq 0 ] || fail "hvdrun exited $rc, expected 0"
  for r in 0 1 2; do
    grep -qE "^rank $r: ok after [0-9.]+ s$" "$out" || fail "rank $r did not complete exactly"
  done
  # The slow rank really was slow: the others waited for it.
  line=$(grep "^rank 0: ok after" "$out")
  secs=$(echo "$line" | sed -E 's/.* after ([0-9.]+) s$/\1/')
  awk -v s="$secs" 'BEGIN { exit !(s >= 7.5) }' || fail "rank 0 did not wait for rank 2 ($secs s)"
  echo "PASS (${took}s)"
  exit 0
fi
[ "$rc" -eq 4 ] || fail "hvdrun exited $rc, expected 4 (the survivors' code)"
named="rank 2 \\(host [^)]+\\) has not answered for $bound s \\(stopped or cut off\\?"
for r in 0 1; do
  line=$(grep "^rank $r: failed after" "$out")
  [ -n "$line" ] || fail "rank $r never reported its failure"
  echo "$line" | grep -qE "with (transport failure|timed out): " || fail "rank $r: not a transport error or timeout"
  echo "$line" | grep -qE "$named" || fail "rank $r's error does not say rank 2 went silent"
  secs=$(echo "$line" | sed -E 's/.* failed after ([0-9.]+) s .*/\1/')
  awk -v s="$secs" -v b="$bound" 'BEGIN { exit !(s < b + 2) }' ||
    fail "rank $r noticed after $secs s, beyond the peer timeout ($bound s) + 2 s"
done
echo "PASS (${took}s)"
