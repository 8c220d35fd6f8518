#!/usr/bin/env bash
# test_late_hvd_init.sh PROG: under plain mpirun, the MPI transport's start-up
# collectives are bounded by the start timeout. The application initialised MPI
# itself; world rank 2 of 3 reaches hvd_init 60 s late and the start timeout is
# 3 s: ranks 0 and 1 must fail hvd_init within the timeout (plus slack) with a
# message naming the start timeout, instead of waiting in MPI_Comm_dup. A rank
# late by less than the timeout is fine.
set -u
prog=$1
mpirun=${MPIRUN:-mpirun}
command -v "$mpirun" >/dev/null 2>&1 || { echo "SKIP: $mpirun not found"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset HVD_TRANSPORT HVD_RANK HVD_SIZE HVD_LOCAL_RANK HVD_LOCAL_SIZE HVD_CROSS_RANK HVD_CROSS_SIZE \
      HVD_RENDEZVOUS_ADDR HVD_SECRET RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT \
      HVD_START_TIMEOUT HVD_START_REPORT_ADDR HVD_START_REPORT_SECRET
mark="hvdmark_$$_${RANDOM}${RANDOM}"
out=$(mktemp)
cleanup() {
  for p in $(pgrep -f -- "$mark"); do kill -KILL "$p" 2>/dev/null; done
  rm -f "$out"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- output"; cat "$out"; exit 1; }

# run LIMIT START_TIMEOUT LATE_SECONDS: sets RC and TOOK (seconds, 0.1 s).
run() {
  local t0 t1
  t0=$(date +%s%N)
  timeout -k 5 "$1" "$mpirun" --oversubscribe --bind-to none -np 3 -x HVD_START_TIMEOUT="$2" \
    "$prog" 2 "$3" "$mark" >"$out" 2>&1
  RC=$?
  t1=$(date +%s%N)
  TOOK=$(( (t1 - t0) / 100000000 ))  # tenths of a second
  echo "start timeout $2 s, rank 2 late by $3 s -> mpirun exit $RC after $((TOOK / 10)).$((TOOK % 10))s"
}

run 50 3 60
[ "$RC" -ne 124 ] && [ "$RC" -ne 137 ] || fail "ranks hung in hvd_init (killed after 50 s)"
[ "$RC" -ne 0 ] || fail "mpirun exited 0 although rank 2 never reached hvd_init in time"
for r in 0 1; do
  grep -q "^rank $r: init failed: .*start timeout" "$out" || fail "rank $r did not fail naming the start timeout"
done
# The timeout runs from hvd_init, after MPI's own start-up: at least 3 s.
[ "$TOOK" -lt 30 ] && fail "the job ended after $TOOK tenths of a second, before the 3 s start timeout"
[ "$TOOK" -lt 250 ] || fail "took $TOOK tenths of a second: the start timeout did not bound hvd_init"
grep -q "sum" "$out" && fail "a rank got past its allreduce"

# Late but within the timeout: the job runs (sum of 1+2+3).
run 60 20 1
[ "$RC" -eq 0 ] || fail "mpirun exited $RC for a rank 1 s late with a 20 s start timeout"
n=$(grep -c "of 3: sum 6$" "$out")
[ "$n" -eq 3 ] || fail "$n of 3 ranks printed the right sum"
echo "ok"
