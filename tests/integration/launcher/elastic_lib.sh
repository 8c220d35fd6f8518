# Shared by the elastic launcher tests (test_elastic_*.sh): sourced after lib.sh.
WORKER="$(cd "$(dirname "$0")" && pwd)/elastic_worker.sh"
export RANK_HELPER
unset FAKE_PLAN FAKE_FINISH

# wait_for FILE REGEX SECONDS: until a line of FILE matches, or fail.
wait_for() {
  local i
  for i in $(seq 1 $(( $3 * 10 ))); do
    grep -Eq -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "no line matching /$2/ in $(basename "$1") within $3 s"
}

# start_hvdrun ARGS...: hvdrun in the background (stdout $TMP/out, stderr
# $TMP/err); HVDRUN_PID is its pid. finish_hvdrun SECONDS waits for it (or
# kills it and fails) and sets RC and ELAPSED.
start_hvdrun() {
  T0=$(now)
  : >"$TMP/out"; : >"$TMP/err"  # the waits must not see an earlier run's lines
  "$HVDRUN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null &
  HVDRUN_PID=$!
}
finish_hvdrun() {
  local i
  for i in $(seq 1 $(( $1 * 10 ))); do
    kill -0 "$HVDRUN_PID" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$HVDRUN_PID" 2>/dev/null; then
    kill -KILL "$HVDRUN_PID"
    wait "$HVDRUN_PID" 2>/dev/null
    fail "hvdrun did not end within $1 s"
  fi
  wait "$HVDRUN_PID"
  RC=$?
  ELAPSED=$(elapsed_since "$T0")
}

# joins: the workers' "join" lines, sorted (W <id> join <n>: <answer>).
joins() { grep -E '^W [^ ]+ join [0-9]+: ' "$TMP/out" | sort; }

# expect_joins LINE...: exactly these join lines, in any order.
expect_joins() {
  local want got
  want=$(printf '%s\n' "$@" | sort)
  got=$(joins)
  [ "$got" = "$want" ] || fail "join answers differ:
--- expected
$want
--- got
$got"
}
