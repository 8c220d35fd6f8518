#!/usr/bin/env bash
# hvdrun -np 2: rank 1 exits 3 mid-job. Expect: rank 0's pending handle fails
# with an error within seconds, hvdrun exits 3 naming rank 1.
# An optional third argument is an extended regex rank 0's output must match
# (e.g. how the shared-memory path names the dead rank).
set -u
hvdrun=$1; prog=$2; expect=${3:-}
out=$(mktemp)
start=$(date +%s)
# A dead peer is seen at once when its socket reports the reset; a transfer
# that Gloo does not wake ends at the transport timeout, 5 s here.
HVD_TRANSPORT_TIMEOUT=5 timeout 60 "$hvdrun" -np 2 --grace-period 20 "$prog" >"$out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
cat "$out"
fail() { echo "FAIL: $*"; rm -f "$out"; exit 1; }
[ "$rc" -eq 3 ] || fail "hvdrun exited $rc, expected 3"
grep -q "rank 1" "$out" || fail "hvdrun did not name rank 1"
grep -q "rank 0: pending handle finished after" "$out" || fail "rank 0 never reported its handle"
grep "rank 0: pending handle" "$out" | grep -qE "with (transport failure|timed out):" || fail "rank 0's handle did not fail with a transport error or timeout"
grep -qE "rank 0: next allreduce: (transport failure|timed out)" "$out" || fail "the broken context accepted new work"
[ -z "$expect" ] || grep -qE "$expect" "$out" || fail "output does not match: $expect"
[ "$took" -lt 30 ] || fail "took ${took}s"
rm -f "$out"
echo "PASS (${took}s)"
