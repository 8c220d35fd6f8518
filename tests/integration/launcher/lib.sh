# Shared by the launcher tests: sourced, never run.
set -u
: "${HVDRUN:?HVDRUN must name the hvdrun binary}"
: "${RANK_HELPER:?RANK_HELPER must name the rank_helper binary}"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/hvdrun-test.XXXXXX")
# A unique word put on the command line of every process a test starts, so
# the test can find any that survive.
MARK="hvdmark_$$_${RANDOM}${RANDOM}"

# Zombies are dead already (and reaped by init in its own time): not counted.
survivors() {
  local p
  for p in $(pgrep -f -- "$MARK"); do
    [ "$(awk '{ print $3 }' "/proc/$p/stat" 2>/dev/null)" = Z ] || echo "$p"
  done
}

cleanup() {
  local p
  for p in $(survivors); do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  for f in "$TMP"/out "$TMP"/err; do
    if [ -s "$f" ]; then echo "--- $(basename "$f") (last 40 lines)" >&2; tail -n 40 "$f" | cut -c1-200 >&2; fi
  done
  exit 1
}

now() { date +%s.%N; }
elapsed_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
less_than() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

# run_hvdrun ARGS...: runs hvdrun with stdout in $TMP/out, stderr in $TMP/err;
# sets RC and ELAPSED (seconds).
run_hvdrun() {
  local t0
  t0=$(now)
  "$HVDRUN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
  RC=$?
  ELAPSED=$(elapsed_since "$t0")
}

expect_rc() {
  [ "$RC" = "$1" ] || fail "expected exit code $1, got $RC (${2:-})"
}

expect_in() {  # expect_in FILE REGEX
  grep -Eq -- "$2" "$1" || fail "no line matching /$2/ in $(basename "$1")"
}

expect_not_in() {
  if grep -Eq -- "$2" "$1"; then fail "unexpected line matching /$2/ in $(basename "$1")"; fi
}

expect_faster() {  # expect_faster LIMIT WHAT
  less_than "$ELAPSED" "$1" || fail "$2 took ${ELAPSED}s (limit $1 s)"
}

expect_no_survivors() {
  local left i
  for i in 1 2 3 4 5 6 7 8 9 10; do
    left=$(survivors)
    [ -z "$left" ] && return 0
    sleep 0.2
  done
  ps -o pid,ppid,pgid,stat,args -p "$(echo $left | tr ' ' ',')" >&2 || true
  fail "processes of the job survived: $left"
}

# hanging_ssh FILE MATCH: a stand-in ssh client at FILE. It runs the remote
# script here, in a session of its own like a remote host's (hvdrun's signals
# to the ssh client's group do not reach it; the script ends its command once
# its input from hvdrun closes), except for a script that contains MATCH: for
# that one it hangs instead, as ssh does when the login hangs during
# authentication, so the script's start marker never comes. MATCH is put in
# double quotes in a case pattern (no double quotes, $ or backquotes in it).
hanging_ssh() {
  cat >"$1" <<EOF
#!/bin/sh
for a; do last=\$a; done
case "\$last" in
  *"$2"*) exec sh -c 'while :; do sleep 0.2; done' "\$last" ;;
esac
exec setsid -w sh -c "\$last"
EOF
  chmod +x "$1"
}
