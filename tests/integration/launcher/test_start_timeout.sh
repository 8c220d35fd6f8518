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

# Ranks on a remote host, through a stand-in ssh client that runs the remote
# script here, except for rank 1's, whose login hangs (hanging_ssh in lib.sh).
# Rank 0 connects, rank 2 starts but never connects. The start timeout blames
# the login for rank 1, the store for rank 2 only.
hanging_ssh "$TMP/fake_ssh" "'HVD_RANK=1'"
HVD_LAUNCHER_FORCE_SSH=1 HVD_LAUNCHER_SSH="$TMP/fake_ssh" run_hvdrun -np 3 --start-timeout 3 \
  --grace-period 2 sh -c '
  if [ "$HVD_RANK" = 0 ]; then exec "$1" connect --sleep 60 "$0"; fi
  exec "$1" sleep 60 "$0"' "$MARK" "$RANK_HELPER"
expect_rc 1 "start timeout, remote ranks"
expect_faster 9 "start timeout of 3 s (+ 2 s grace), remote ranks"
first=$(grep -m1 '^hvdrun: ' "$TMP/err")
echo "$first" | grep -Eq "^hvdrun: start timeout: rank 1 \(host localhost\): ssh to host localhost did not complete the login \(authentication\) within 3 s: .*try 'ssh -v localhost true'$" ||
  fail "the first message does not say rank 1's login did not complete: $first"
expect_in "$TMP/err" 'start timeout: 1 running rank\(s\) did not connect to the rendezvous store at [0-9.]+:[0-9]+ within 3 s: rank 2 \(host localhost\)$'
expect_not_in "$TMP/err" 'rendezvous store.*rank 1 '
expect_not_in "$TMP/err" 'remote-started'
expect_in "$TMP/out" '^connected rank=0$'
expect_no_survivors

# Every remote rank's login hangs: nothing about the store at all.
HVD_LAUNCHER_FORCE_SSH=1 HVD_LAUNCHER_SSH="$TMP/fake_ssh" run_hvdrun -H localhost:1,127.0.0.1:1 \
  --start-timeout 2 "$RANK_HELPER" connect --sleep 60 "$MARK"
expect_rc 1 "start timeout, a remote login that hangs"
expect_faster 8 "start timeout of 2 s, a remote login that hangs"
expect_in "$TMP/err" "^hvdrun: start timeout: rank 1 \(host 127\.0\.0\.1\): ssh to host 127\.0\.0\.1 did not complete the login \(authentication\) within 2 s"
expect_not_in "$TMP/err" 'store'
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
