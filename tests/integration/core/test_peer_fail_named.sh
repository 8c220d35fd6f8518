#!/usr/bin/env bash
# test_peer_fail_named.sh HVDRUN PEER_FAIL MODE: hvdrun -np 3 over Gloo TCP
# (HVD_GLOO_SHM=0), rank 2 fails mid-run (MODE exit: exits with code 3; MODE
# stop: SIGSTOP, never answers). Ranks 0 and 1 must each report an error that
# names rank 2 by rank and host (and the address, where Gloo quoted one),
# within a bounded time, and hvdrun
# must end the job. Gloo does not wake every wait when a connection fails
# (a transfer under way waits for the transport timeout, 3 s here), so the
# survivors get a grace period beyond it to report.
set -u
hvdrun=$1; prog=$2; mode=$3
mark="hvdmark_$$_${RANDOM}${RANDOM}"
out=$(mktemp)
cleanup() {
  for p in $(pgrep -f -- "$mark"); do kill -KILL "$p" 2>/dev/null; done
  rm -f "$out"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
unset HVD_TRANSPORT HVD_RANK HVD_SIZE RANK WORLD_SIZE HVD_RENDEZVOUS_ADDR HVD_SECRET
start=$(date +%s)
HVD_GLOO_SHM=0 HVD_TRANSPORT_TIMEOUT=3 timeout -k 5 60 "$hvdrun" -np 3 --grace-period 8 \
  "$prog" "$mode" 2 "$mark" >"$out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
cat "$out"
echo "hvdrun exited with $rc after ${took}s"
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the job hung"
case "$mode" in
  exit) [ "$rc" -eq 3 ] || fail "hvdrun exited $rc, expected 3 (rank 2's code)" ;;
  stop) [ "$rc" -eq 4 ] || fail "hvdrun exited $rc, expected 4 (the survivors' code)" ;;
esac
[ "$took" -lt 30 ] || fail "took ${took}s"
n=$(grep -c "^rank [0-9]: up$" "$out")
[ "$n" -eq 3 ] || fail "$n of 3 ranks came up"
# rank 2 (host NAME) or rank 2 (host NAME, [127.0.0.1]:PORT): what happened
named='rank 2 \(host [^,()]+(, \[?127\.0\.0\.1\]?:[0-9]+)?\)'
for r in 0 1; do
  line=$(grep "^rank $r: failed after" "$out")
  [ -n "$line" ] || fail "rank $r never reported its failure"
  echo "$line" | grep -qE "with (transport failure|timed out): " || fail "rank $r: not a transport error or timeout"
  echo "$line" | grep -qE "$named" || fail "rank $r's error does not name rank 2 with its host"
  if [ "$mode" = stop ]; then
    echo "$line" | grep -qE "timed out after 3 s waiting for $named" ||
      fail "rank $r's error does not say it timed out waiting for rank 2"
  fi
  grep -qE "^rank $r: next allreduce: (transport failure|timed out)$" "$out" ||
    fail "rank $r's broken context accepted new work"
done
# Gloo's own wording stays out of the message (it is logged at debug level).
grep "^rank [01]: failed after" "$out" | grep -q "pair.cc" && fail "Gloo's source location leaked into the error"
echo "PASS (${took}s)"
