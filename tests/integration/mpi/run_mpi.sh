#!/usr/bin/env bash
# run_mpi.sh NP LIMIT_S PROG [ARGS...]: runs PROG as NP ranks under mpirun
# (oversubscribed, allowed as root, no binding), shows the output, and passes
# when mpirun exits 0 within LIMIT_S seconds and every rank printed a line
# matching $EXPECT_EACH (default: " 0 failed$").
#   EXPECT_LOG=REGEX    also require REGEX in hvd's debug log $EXPECT_LOG_COUNT
#                       times (default NP), e.g. "transport 'mpi' connected"
#   SKIP_UNLESS=VAR     skip (exit 77) unless $VAR is 1
#   MPIRUN              the mpirun program (default: mpirun)
# Exit 77 (skipped) when mpirun is not installed.
set -u
np=$1; limit=$2; shift 2
if [ -n "${SKIP_UNLESS:-}" ] && [ "${!SKIP_UNLESS:-0}" != 1 ]; then
  echo "SKIP: set $SKIP_UNLESS=1 to run this test"; exit 77
fi
mpirun=${MPIRUN:-mpirun}
command -v "$mpirun" >/dev/null 2>&1 || { echo "SKIP: $mpirun not found"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Settings of the caller's shell must not steer the job (the transport is
# chosen automatically under mpirun; the topology is mpirun's).
unset HVD_TRANSPORT HVD_RANK HVD_SIZE HVD_LOCAL_RANK HVD_LOCAL_SIZE HVD_CROSS_RANK HVD_CROSS_SIZE \
      HVD_RENDEZVOUS_ADDR HVD_SECRET RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
extra=()
[ -n "${EXPECT_LOG:-}" ] && extra+=(-x HVD_LOG_LEVEL=debug)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s)
timeout -k 10 "$limit" "$mpirun" --oversubscribe --bind-to none -np "$np" "${extra[@]}" "$@" >"$out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
grep -v "DEBUG: \(negotiat\|cycle\)" "$out"
fail() { echo "FAIL: $*"; exit 1; }
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "still running after ${limit}s"
[ "$rc" -eq 0 ] || fail "mpirun exited with $rc"
each=${EXPECT_EACH:- 0 failed$}
n=$(grep -cE -- "$each" "$out")
[ "$n" -eq "$np" ] || fail "$n of $np ranks printed a line matching '$each'"
if [ -n "${EXPECT_LOG:-}" ]; then
  want=${EXPECT_LOG_COUNT:-$np}
  n=$(grep -cE -- "$EXPECT_LOG" "$out")
  [ "$n" -eq "$want" ] || fail "'$EXPECT_LOG' logged $n times, want $want"
fi
echo "PASS (${took}s)"
