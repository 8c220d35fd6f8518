# A rank that never connects to the rendezvous store fails the job after the
# start timeout, naming it; ranks that finish without connecting are fine.
. "$(dirname "$0")/lib.sh"

# Rank 0 connects and waits; rank 1 just sleeps.
run_hvdrun -np 2 --start-timeout 3 --grace-period 2 sh -c '
  if [ "$HVD_RANK" = 0 ]; then exec "$1" connect --sleep 60 "$0"; fi
  exec "$1" sleep 60 "$0"' "$MARK" "$RANK_HELPER"
[ "$RC" != 0 ] || fail "hvdrun succeeded although rank 1 never connected"
expect_rc 1 "start timeout"
expect_faster 9 "start timeout of 3 s (+ 2 s grace)"
less_than 2.9 "$ELAPSED" || fail "gave up after ${ELAPSED}s, before the 3 s start timeout"
expect_in "$TMP/err" 'start timeout: 1 running rank\(s\) did not connect to the rendezvous store at 127\.0\.0\.1:[0-9]+ within 3 s: rank 1 \(host localhost\)$'
expect_in "$TMP/out" '^connected rank=0$'
expect_no_survivors

# The timeout from the environment.
HVD_START_TIMEOUT=1 run_hvdrun -np 1 "$RANK_HELPER" sleep 30 "$MARK"
expect_rc 1 "HVD_START_TIMEOUT"
expect_faster 8 "HVD_START_TIMEOUT=1"
expect_in "$TMP/err" 'within 1 s: rank 0 \(host localhost\)$'
expect_no_survivors

# Ranks that exit 0 before the timeout without ever connecting are fine,
# and so are ranks that connect late but within it.
run_hvdrun -np 2 --start-timeout 2 sh -c '
  if [ "$HVD_RANK" = 0 ]; then exit 0; fi
  sleep 1; exec "$1" connect --sleep 2 "$0"' "$MARK" "$RANK_HELPER"
expect_rc 0 "a plain command and a late connection"

# 0 disables the start timeout (and is not passed on: the library wants a
# positive number).
HVD_START_TIMEOUT=1 run_hvdrun -np 1 --start-timeout 0 sh -c 'sleep 1.5; echo "timeout=${HVD_START_TIMEOUT-unset}"' "$MARK"
expect_rc 0 "--start-timeout 0"
expect_in "$TMP/out" '^timeout=unset$'
HVD_START_TIMEOUT=0 run_hvdrun -np 1 sh -c 'sleep 1.5; echo "timeout=${HVD_START_TIMEOUT-unset}"' "$MARK"
expect_rc 0 "HVD_START_TIMEOUT=0"
expect_in "$TMP/out" '^timeout=unset$'

echo PASS
