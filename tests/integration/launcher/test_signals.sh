# SIGTERM or SIGINT to hvdrun stops the whole job: every rank and its
# children go, hvdrun exits 128+signal, and nothing survives.
. "$(dirname "$0")/lib.sh"

# start_job: hvdrun in the background, three ranks that connect then sleep
# (each with a child of its own); waits until every rank has connected.
start_job() {
  : >"$TMP/out"  # before the job starts: the wait below must not see an earlier job's lines
  "$HVDRUN" -np 3 -v "$@" sh -c '
    "$1" sleep 60 "$0" &
    exec "$1" connect --sleep 60 "$0"' "$MARK" "$RANK_HELPER" >"$TMP/out" 2>"$TMP/err" </dev/null &
  JOB=$!
  local i
  for i in $(seq 1 100); do
    [ "$(grep -c '^connected rank=' "$TMP/out")" = 3 ] && return 0
    sleep 0.1
  done
  fail "the ranks did not start"
}

stop_job() {  # stop_job SIGNAL EXPECTED_RC
  local t0 rc
  t0=$(now)
  kill -s "$1" "$JOB"
  wait "$JOB"
  rc=$?
  ELAPSED=$(elapsed_since "$t0")
  RC=$rc
  expect_rc "$2" "hvdrun after SIG$1"
  expect_faster 8 "stopping on SIG$1"
  expect_in "$TMP/err" "^hvdrun: received SIG$1, stopping the job$"
  expect_not_in "$TMP/err" 'exited with code [1-9]'
  expect_no_survivors
}

start_job
stop_job TERM 143

start_job
stop_job INT 130

# Ranks that ignore SIGTERM are killed after the grace period.
: >"$TMP/out"
"$HVDRUN" -np 2 --grace-period 1 sh -c 'trap "" TERM; "$1" connect --sleep 60 "$0"; "$1" sleep 60 "$0"' \
  "$MARK" "$RANK_HELPER" >"$TMP/out" 2>"$TMP/err" </dev/null &
JOB=$!
for i in $(seq 1 100); do
  [ "$(grep -c '^connected rank=' "$TMP/out")" = 2 ] && break
  sleep 0.1
done
stop_job TERM 143
expect_in "$TMP/err" 'SIGKILL'

echo PASS
