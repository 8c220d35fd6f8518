#!/usr/bin/env bash
# test_rank_abort.sh MODE NP PROG: under mpirun, rank 1 of NP leaves the job
# mid-way (MODE exit: exits with code 3; MODE stop: SIGSTOP, never answers).
# Passes when the whole job is over within a bounded time with a failure
# status, no process of it is left, and (stop) the other ranks' pending
# operations failed with an error first. Runs with the plugin's defaults
# (shared memory on: every rank is on this host).
set -u
mode=$1; np=$2; prog=$3
mpirun=${MPIRUN:-mpirun}
command -v "$mpirun" >/dev/null 2>&1 || { echo "SKIP: $mpirun not found"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset HVD_TRANSPORT HVD_RANK HVD_SIZE RANK WORLD_SIZE HVD_RENDEZVOUS_ADDR HVD_SECRET
mark="hvdmark_$$_${RANDOM}${RANDOM}"
out=$(mktemp)
cleanup() {
  for p in $(pgrep -f -- "$mark"); do kill -KILL "$p" 2>/dev/null; done
  rm -f "$out"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

start=$(date +%s)
timeout -k 5 90 "$mpirun" --oversubscribe --bind-to none -np "$np" \
  -x HVD_TRANSPORT_TIMEOUT=3 "$prog" "$mode" "$mark" >"$out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
cat "$out"
echo "mpirun exited with $rc after ${took}s"
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the job hung (killed by timeout after 90s)"
[ "$rc" -ne 0 ] || fail "mpirun exited 0 although a rank left the job"
[ "$took" -lt 60 ] || fail "the job took ${took}s to end"
sleep 1
left=$(pgrep -f -- "$mark" | wc -l)
[ "$left" -eq 0 ] || fail "$left process(es) of the job are still running"
n=$(grep -c "up over mpi" "$out")
[ "$n" -eq "$np" ] || fail "$n of $np ranks came up over the mpi transport"
case "$mode" in
  exit)
    # mpirun names the rank and its exit code when it ends the job; or, over
    # the shared-memory path (all ranks on this host), the other ranks see
    # rank 1's pid vanish first and fail, naming it.
    grep -qiE "exit code:? *3|exited .*code 3|status 3" "$out" ||
      grep -qE "rank 1 \((host [^,]+, )?pid [0-9]+\) died" "$out" ||
      fail "neither mpirun nor the other ranks reported rank 1's exit"
    ;;
  stop)
    # Every other rank saw its pending operation fail (transport timeout).
    n=$(grep -cE "pending handle finished after [0-9.]+ s with (timed out|transport failure)" "$out")
    [ "$n" -eq $((np - 1)) ] || fail "$n of $((np - 1)) waiting ranks saw their operation fail"
    n=$(grep -cE "next allreduce: (timed out|transport failure)" "$out")
    [ "$n" -eq $((np - 1)) ] || fail "the broken context accepted new work on $((np - 1 - n)) rank(s)"
    ;;
esac
echo "PASS (${took}s)"
