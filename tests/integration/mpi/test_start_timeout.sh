#!/usr/bin/env bash
# test_start_timeout.sh HVDRUN LATE_START: hvdrun --transport mpi enforces the
# start timeout. Rank 2 of 3 sleeps before hvd_init, so the others wait for it
# inside MPI's initialisation, out of the library's reach: hvdrun must name
# rank 2, stop the job within the timeout plus the grace period and exit 1,
# leaving no process behind. A rank that is late but within the timeout is
# fine, and so is HVD_START_TIMEOUT from the environment.
set -u
hvdrun=$1; prog=$2
command -v "${HVD_LAUNCHER_MPIRUN:-mpirun}" >/dev/null 2>&1 || { echo "SKIP: mpirun not found"; exit 77; }
unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM HVD_TRANSPORT HVD_RANK HVD_SIZE RANK WORLD_SIZE \
      HVD_START_TIMEOUT HVD_START_REPORT_ADDR HVD_START_REPORT_SECRET
mark="hvdmark_$$_${RANDOM}${RANDOM}"
out=$(mktemp)
err=$(mktemp)
cleanup() {
  for p in $(pgrep -f -- "$mark"); do kill -KILL "$p" 2>/dev/null; done
  rm -f "$out" "$err"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$out"; echo "--- stderr"; cat "$err"; exit 1; }
# run LIMIT_S HVDRUN_ARGS...: sets RC and TOOK (seconds, one decimal).
run() {
  local limit=$1; shift
  local t0 t1
  t0=$(date +%s.%N)
  timeout -k 5 "$limit" "$hvdrun" --transport mpi "$@" >"$out" 2>"$err"
  RC=$?
  t1=$(date +%s.%N)
  TOOK=$(echo "$t1 - $t0" | bc)
  echo "hvdrun $* -> exit $RC after ${TOOK}s"
}
no_survivors() {
  sleep 1
  local left
  left=$(pgrep -f -- "$mark" | wc -l)
  [ "$left" -eq 0 ] || fail "$left process(es) of the job are still running"
}

# Rank 2 sleeps 60 s before hvd_init; the start timeout is 5 s (environment).
HVD_START_TIMEOUT=5 run 40 -np 3 --grace-period 3 "$prog" 2 60 "$mark"
[ "$RC" -ne 124 ] && [ "$RC" -ne 137 ] || fail "hvdrun hung (killed by timeout after 40 s)"
[ "$RC" -eq 1 ] || fail "hvdrun exited $RC, want 1"
grep -q "^hvdrun: error: start timeout: ranks \[2\] did not start within 5 s" "$err" ||
  fail "no message naming rank 2"
echo "$TOOK >= 4.9" | bc | grep -q 1 || fail "gave up after ${TOOK}s, before the 5 s start timeout"
echo "$TOOK < 5 + 3 + 4" | bc | grep -q 1 || fail "took ${TOOK}s: more than the timeout, the grace period and 4 s"
grep -q "sum" "$out" && fail "a rank got past its allreduce"
no_survivors

# --start-timeout on the command line; rank 1 is the late one.
run 40 -np 3 --start-timeout 3 --grace-period 3 "$prog" 1 60 "$mark"
[ "$RC" -eq 1 ] || fail "hvdrun exited $RC, want 1"
grep -q "^hvdrun: error: start timeout: ranks \[1\] did not start within 3 s" "$err" ||
  fail "no message naming rank 1"
no_survivors

# Late but within the timeout: the job runs.
run 60 -np 3 --start-timeout 20 "$prog" 2 2 "$mark"
[ "$RC" -eq 0 ] || fail "hvdrun exited $RC for a rank 2 s late with a 20 s start timeout"
n=$(grep -c "^rank [0-2] of 3: sum 3$" "$out")
[ "$n" -eq 3 ] || fail "$n of 3 ranks finished their allreduce"
grep -q "start timeout" "$err" && fail "a start-timeout message in a job that started in time"
echo PASS
