#!/usr/bin/env bash
# run_hvdrun.sh HOW NP LIMIT_S HVDRUN PROG [ARGS...]: runs PROG as NP ranks
# with hvdrun over the UCX plugin (HOW: "flag" = --transport ucx, "env" =
# HVD_TRANSPORT=ucx) and the core's shared-memory path off (HVD_SHM=0), at
# debug log level. Passes when hvdrun exits 0 within LIMIT_S seconds, every
# rank printed " 0 failed" and every rank logged that transport 'ucx'
# connected as a plugin with point-to-point and without shared memory, and,
# where TEST_UCX_LANES is set, that every endpoint runs on a UCX transport
# matching that extended regex (the plugin's "connected over ...: LANES to
# ranks ..." line).
set -u
how=$1; np=$2; limit=$3; hvdrun=$4; shift 4
unset HVD_TRANSPORT HVD_RANK HVD_SIZE RANK WORLD_SIZE HVD_RENDEZVOUS_ADDR HVD_SECRET HVD_GLOO_SHM
args=()
case "$how" in
  flag) args=(--transport ucx) ;;
  env) export HVD_TRANSPORT=ucx ;;
  *) echo "FAIL: bad HOW '$how'"; exit 1 ;;
esac
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s)
HVD_SHM=0 HVD_LOG_LEVEL=debug timeout -k 10 "$limit" "$hvdrun" -np "$np" "${args[@]}" \
  --start-timeout 60 "$@" >"$out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
grep -v "DEBUG: \(negotiat\|cycle\)" "$out"
fail() { echo "FAIL: $*"; exit 1; }
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "still running after ${limit}s"
[ "$rc" -eq 0 ] || fail "hvdrun exited with $rc"
n=$(grep -cE " 0 failed$" "$out")
[ "$n" -eq "$np" ] || fail "$n of $np ranks printed a line matching ' 0 failed$'"
n=$(grep -cE "transport 'ucx' connected \(plugin, point-to-point\)" "$out")
[ "$n" -eq "$np" ] || fail "$n of $np ranks connected over the ucx plugin's point-to-point alone"
n=$(grep -cE "ucx: rank [0-9]+ of $np connected over" "$out")
[ "$n" -eq "$np" ] || fail "$n of $np ranks logged the plugin's own connection"
if [ -n "${TEST_UCX_LANES:-}" ]; then
  # "...connected over <where>: sysv/memory to ranks 1, 2; tcp/lo to rank 3"
  while IFS= read -r line; do
    lanes=${line##*: }
    while IFS= read -r group; do
      [ -n "$group" ] || continue
      echo "$group" | grep -qE "^(${TEST_UCX_LANES}) to ranks? " ||
        fail "an endpoint is not on ${TEST_UCX_LANES}: $line"
    done < <(echo "$lanes" | tr ';' '\n' | sed 's/^ *//')
  done < <(grep -E "ucx: rank [0-9]+ of $np connected over" "$out")
fi
echo "PASS (${took}s)"
