# One failing rank stops the job: hvdrun exits with its code within seconds,
# names it, and no process of the job survives.
. "$(dirname "$0")/lib.sh"

# Rank 2 exits 3 after a moment; the others sleep (and start a child each, to
# check that whole process groups go). The long grace period makes sure that
# SIGTERM, not the later SIGKILL, ends them.
run_hvdrun -np 4 --grace-period 30 sh -c '
  if [ "$HVD_RANK" = 2 ]; then sleep 1; echo "rank 2 fails"; exit 3; fi
  "$1" sleep 60 "$0" &
  exec "$1" sleep 60 "$0"' "$MARK" "$RANK_HELPER"
expect_rc 3 "a rank exiting 3"
expect_faster 6 "stopping after rank 2 failed"
expect_in "$TMP/err" '^hvdrun: rank 2 \(host localhost\) exited with code 3$'
expect_in "$TMP/out" '^rank 2 fails$'
[ "$(grep -c 'exited with code\|killed by signal' "$TMP/err")" = 1 ] || fail "more than one rank reported as failed"
expect_no_survivors

# A rank killed by a signal: 128 + signal.
run_hvdrun -np 2 sh -c '
  if [ "$HVD_RANK" = 1 ]; then sleep 0.5; kill -KILL $$; fi
  exec "$1" sleep 60 "$0"' "$MARK" "$RANK_HELPER"
expect_rc 137 "a rank killed by SIGKILL"
expect_faster 8 "stopping after rank 1 was killed"
expect_in "$TMP/err" '^hvdrun: rank 1 \(host localhost\) killed by signal 9'
expect_no_survivors

# Ranks that ignore SIGTERM get SIGKILL after the grace period.
run_hvdrun -np 3 --grace-period 1 sh -c '
  trap "" TERM
  if [ "$HVD_RANK" = 0 ]; then sleep 0.5; exit 5; fi
  "$1" sleep 60 "$0"; "$1" sleep 60 "$0"' "$MARK" "$RANK_HELPER"
expect_rc 5 "ranks ignoring SIGTERM"
expect_faster 8 "SIGKILL after the grace period"
expect_in "$TMP/err" '^hvdrun: rank 0 \(host localhost\) exited with code 5$'
expect_no_survivors

# The grace period from the environment.
HVD_LAUNCHER_GRACE=0.5 run_hvdrun -np 2 sh -c '
  trap "" TERM
  if [ "$HVD_RANK" = 0 ]; then exit 4; fi
  "$1" sleep 60 "$0"; "$1" sleep 60 "$0"' "$MARK" "$RANK_HELPER"
expect_rc 4 "HVD_LAUNCHER_GRACE"
expect_faster 5 "SIGKILL after HVD_LAUNCHER_GRACE"
expect_no_survivors

# All ranks exit 0: exit 0, nothing reported.
run_hvdrun -np 3 sh -c 'echo "rank $HVD_RANK done"' "$MARK"
expect_rc 0 "every rank exiting 0"
[ "$(grep -c done "$TMP/out")" = 3 ] || fail "missing output"
[ ! -s "$TMP/err" ] || fail "unexpected messages on stderr"

echo PASS
