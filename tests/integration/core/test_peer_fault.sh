#!/usr/bin/env bash
# test_peer_fault.sh HVDRUN PEER_FAULT FAULT PHASE COLLECTIVE NP VICTIM [RUNS]
# Runs hvdrun -np NP peer_fault FAULT PHASE COLLECTIVE VICTIM, RUNS times in
# a row (default 1), under the caller's environment (transport, algorithm,
# HVD_PEER_TIMEOUT, PEER_FAULT_MIB; PEER_FAULT_HVDRUN_ARGS: hvdrun's own,
# e.g. "--transport mpi"). In every run, every surviving rank must
# report its collective's failure, naming the victim by rank and host, within
# 1 s of the victim's death (FAULT kill) or within the peer timeout + 1 s of
# its stop (FAULT stop), measured from the moment the victim printed, and
# without the launcher's help: survivors ignore SIGTERM, the grace period is
# longer than any bound. Prints each run's slowest survivor's time.
set -u
hvdrun=$1; prog=$2; fault=$3; phase=$4; coll=$5; np=$6; victim=$7; runs=${8:-1}
mark="hvdmark_$$_${RANDOM}${RANDOM}"
out=$(mktemp)
cleanup() {
  for p in $(pgrep -f -- "$mark"); do kill -KILL "$p" 2>/dev/null; done
  rm -f "$out"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
unset HVD_RANK HVD_SIZE RANK WORLD_SIZE HVD_RENDEZVOUS_ADDR HVD_SECRET
peer_timeout=${HVD_PEER_TIMEOUT:-10}
if [ "$fault" = kill ]; then bound=1; else bound=$(awk -v p="$peer_timeout" 'BEGIN{print p + 1}'); fi
named="rank $victim \\(host [^)]+\\)"
worst_all=0
for run in $(seq 1 "$runs"); do
  : >"$out"  # before the job starts: the wait below must not read the last run's lines
  start=$(date +%s)
  # shellcheck disable=SC2086
  timeout -k 5 120 "$hvdrun" ${PEER_FAULT_HVDRUN_ARGS:-} -np "$np" --grace-period 60 "$prog" "$fault" "$phase" "$coll" \
    "$victim" "$mark" >"$out" 2>&1 &
  job=$!
  # The survivors report well before the grace period; a stopped victim
  # never exits, so the job is ended here once every survivor has reported.
  for _ in $(seq 1 600); do
    [ "$(grep -c "^rank [0-9]*: failed at" "$out")" -ge $((np - 1)) ] && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  for p in $(pgrep -f -- "$mark"); do kill -KILL "$p" 2>/dev/null; done
  wait "$job" 2>/dev/null
  took=$(( $(date +%s) - start ))
  at=$(sed -n "s/^rank $victim: fault at \([0-9.]*\)$/\1/p" "$out")
  if [ -z "$at" ]; then cat "$out"; fail "run $run: rank $victim never reached its fault"; fi
  worst=0
  for r in $(seq 0 $((np - 1))); do
    [ "$r" -eq "$victim" ] && continue
    line=$(grep "^rank $r: failed at" "$out")
    if [ -z "$line" ]; then cat "$out"; fail "run $run: rank $r never reported a failure (${took}s)"; fi
    t=$(echo "$line" | sed 's/^rank [0-9]*: failed at \([0-9.]*\) .*/\1/')
    d=$(awk -v a="$at" -v b="$t" 'BEGIN{printf "%.3f", b - a}')
    echo "$line" | grep -qE "$named" ||
      { cat "$out"; fail "run $run: rank $r's error does not name rank $victim with its host"; }
    awk -v d="$d" -v b="$bound" 'BEGIN{exit !(d <= b)}' ||
      { cat "$out"; fail "run $run: rank $r failed ${d}s after the fault (bound ${bound}s)"; }
    worst=$(awk -v a="$worst" -v d="$d" 'BEGIN{print (d > a) ? d : a}')
  done
  worst_all=$(awk -v a="$worst_all" -v d="$worst" 'BEGIN{print (d > a) ? d : a}')
  [ "$runs" -gt 1 ] || cat "$out"
  echo "run $run: every survivor failed within ${worst}s of rank $victim's $fault ($coll, $phase)"
done
echo "PASS: $runs run(s), slowest survivor ${worst_all}s (bound ${bound}s)"
