#!/usr/bin/env bash
# Faults of whole hosts on the simulated cluster (cluster.sh in this folder),
# with Gloo (named: across hosts the default is UCX where every rank loads
# it), or UCX for a GROUP ending in _ucx, and a short peer timeout: each case runs
# `cluster_probe loop` under hvdrun (hvdrun on hvd-h1, the other hosts' ranks
# over ssh; the ranks ignore SIGTERM and the grace period is long, so what
# each rank reports is its own detection, not the launcher stopping it) and
# asserts every rank's error text (the ranks it blames, with their hosts,
# are on the other side of the fault: not a healthy neighbour's secondary
# "connection reset") and its time, measured from the fault on
# the wall clock the hosts share (docs/failures.md states the bounds).
#   test_fault_cluster.sh GROUP
# with HVDRUN and PROBE (cluster_probe) in the environment. A GROUP shares
# one cluster; its cases run one after another:
#   fault_2x2    2 hosts x 2 ranks (hierarchical collectives), in order:
#     idle       an allreduce every 5 s (idle for longer than the peer
#                timeout, 3 s): steps 1 and 2 must complete (no false
#                alarm); once every rank has done step 2, hvd-h2 is cut off
#                (cluster.sh partition) while every rank sleeps: each rank
#                finds the cut (its first logged error) within the peer
#                timeout + 1 s of it (the idle ranks' background
#                negotiation), and its next allreduce fails naming the other
#                host, within 0.5 s of its submission or of that finding,
#                whichever is later.
#     cut        an allreduce every 20 ms; once every rank is up, hvd-h2 is
#                cut off: every rank fails within the peer timeout + 1 s of
#                the cut, the ranks on hvd-h1 naming a rank on hvd-h2, those
#                on hvd-h2 a rank on hvd-h1.
#     kill       the same loop; every process of hvd-h2 is SIGKILLed at once
#                (cluster.sh kill-host, as a power loss: its link stays up):
#                both ranks of hvd-h1 fail within 1 s, naming a rank on
#                hvd-h2 (rank 1 too, whose only cross-host peer is rank 0's
#                leader link: not a "connection reset" from rank 0).
#   fault_4x1    4 hosts x 1 rank (no hierarchy): cut (hvd-h3 cut off, every
#                rank within the peer timeout + 1 s, ranks 0, 1 and 3 naming
#                rank 2 on hvd-h3, rank 2 naming a rank of another host),
#                then kill (hvd-h4 killed, ranks 0-2 within 1 s naming rank
#                3 on hvd-h4).
# After each case hvdrun must end (within the grace-free bound below), the
# cut host is healed, and no process of the job may be left on any host.
# KEEP_WORK=DIR keeps a copy of the work directory (hvdrun's output, each
# rank's report and log); CASES="cut kill" runs only the cases named.
# Exit 77 (ctest: skipped) with the reason where this machine cannot make the
# cluster. The cluster is torn down on every path (trap).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cluster="$here/cluster.sh"
group=${1:?usage: test_fault_cluster.sh fault_2x2|fault_4x1}
export HVDC_ID="t$$"
export HVDC_DIR="/tmp/hvd-cluster-$HVDC_ID"
work=$(mktemp -d /tmp/hvd-fault-cluster.XXXXXX)
T0=$(date +%s.%N)
job=""

. "$here/cluster_test_lib.sh"

fail() { echo "FAIL: $*"; exit 1; }

teardown() {
  local rc=$?
  [ -z "${KEEP_WORK:-}" ] || { mkdir -p "$KEEP_WORK" && cp -a "$work/." "$KEEP_WORK/"; } || true
  # hvdrun first (its ranks ignore SIGTERM: KILL), then the cluster.
  if [ -n "$job" ] && kill -0 "$job" 2>/dev/null; then kill -KILL "$job" 2>/dev/null || true; fi
  end_test $rc
}
trap teardown EXIT
trap 'exit 130' INT TERM

[ -n "${HVDRUN:-}" ] && [ -x "$HVDRUN" ] || fail "HVDRUN (hvdrun) is not set or not executable"
[ -n "${PROBE:-}" ] && [ -x "$PROBE" ] || fail "PROBE (cluster_probe) is not set or not executable"
reap_stale_clusters

peer=3          # HVD_PEER_TIMEOUT: short, well above a loaded machine's pauses
# The transport: gloo, or ucx (GROUP_ucx; the default across hosts where
# every rank loads UCX).
xport=gloo
case "$group" in *_ucx) xport=ucx; group=${group%_ucx} ;; esac
transport=30    # the transport timeout stays at its default: the peer timeout must catch it
now() { date +%s.%N; }
diff_s() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
count() { grep -cE -- "$2" "$1" 2>/dev/null || true; }

# start_job NAME HOSTS [PAUSE_MS [STEPS]]: `cluster_probe loop` on HOSTS
# (hvdrun's -H) in the background; job: hvdrun's pid (via cluster.sh exec),
# out: its output, ranks: the ranks' report folder.
start_job() {
  local name=$1 hosts=$2
  shift 2
  out="$work/$name.out" ranks="$work/$name"
  mkdir -p "$ranks"
  HVD_PEER_TIMEOUT=$peer timeout -k 5 100 "$cluster" exec h1 "$HVDRUN" --transport "$xport" -H "$hosts" \
    --start-timeout 30 --gloo-timeout-seconds $transport --grace-period 60 \
    "$PROBE" loop "$ranks" "$@" >"$out" 2>&1 &
  job=$!
}

# await_lines REGEX N WHAT: waits (at most 40 s) until N lines of $out match.
await_lines() {
  local t
  for t in $(seq 1 200); do
    [ "$(count "$out" "$1")" -ge "$2" ] && return 0
    kill -0 "$job" 2>/dev/null || break
    sleep 0.2
  done
  cat "$out"
  fail "$case_name: $3"
}

# check_rank R HOST OTHER_HOST LIMIT [BY_SUBMIT]: rank R (on HOST) reported
# a failure within LIMIT s of $event (or, with BY_SUBMIT, within 1 s of its
# failed allreduce's submission where that came later than the LIMIT), and
# every rank its error blames is on OTHER_HOST (an ERE).
check_rank() {
  local r=$1 host=$2 other=$3 limit=$4 by_submit=${5:-} f="$ranks/rank-$1.txt" line err named
  local t="$ranks/rank-$1.time" failed submitted took deadline
  # The report may come up to the bound of the idle case (submission + 1 s).
  while [ ! -s "$t" ] &&
      awk -v a="$event" -v b="$(now)" -v l="$limit" 'BEGIN { exit !(b - a < l + 8) }'; do
    sleep 0.1
  done
  [ -s "$t" ] || fail "$case_name: rank $r (on $host) reported no failure within $limit s (+8) of the $what"
  read -r failed submitted detected <"$t"
  line=$(head -1 "$f")
  took=$(diff_s "$event" "$failed")
  echo "  rank $r failed $took s after the $what (submitted $(diff_s "$event" "$submitted") s after it): $line"
  echo "$line" | grep -qE "^rank $r \(host $host\): failed after [0-9.]+ s with [a-z ]+: .+" ||
    fail "$case_name: rank $r: unexpected report: $line"
  err=${line#*: failed after * s with }
  err=${err#*: }
  # The ranks it blames: a rank named with the failure it saw ("rank 2
  # (host h, addr): Read error: ...", UCX's "rank 2 (host h): connection
  # lost (...)", "rank 2 (host h) has not answered"),
  # not one that passed the news on ("rank 0 (host h) broke the
  # communicator: ...", "(as rank 2 (host h) reported)"): all on the other
  # side, and at least one.
  named=$(echo "$err" | grep -oE "rank [0-9]+ \(host [a-z0-9-]+[^)]*\)(: [A-Z]|: connection lost| has not answered)" |
          grep -oE "^rank [0-9]+ \(host [a-z0-9-]+" | sort -u || true)
  [ -n "$named" ] || fail "$case_name: rank $r's error blames no rank: $err"
  if echo "$named" | grep -vqE "^rank [0-9]+ \(host ($other)$"; then
    fail "$case_name: rank $r's error blames $(echo "$named" | grep -vE "\(host ($other)$" | sed 's/$/)/' | tr '\n' ' ')not only ranks on $other: $err"
  fi
  deadline=$limit
  if [ -n "$by_submit" ]; then
    # Idle: the fault is found within LIMIT (the library's first error),
    # and the next allreduce fails at once (0.5 s) if submitted after that.
    awk -v d="$detected" 'BEGIN { exit !(d > 0) }' ||
      fail "$case_name: rank $r (on $host) logged no error before its allreduce failed"
    local found
    found=$(diff_s "$event" "$detected")
    echo "  rank $r found it $found s after the $what"
    awk -v t="$found" -v b="$limit" 'BEGIN { exit !(t <= b) }' ||
      fail "$case_name: rank $r (on $host) found the $what $found s after it, beyond $limit s"
    deadline=$(awk -v l="$limit" -v s="$(diff_s "$event" "$submitted")" -v d="$found" \
      'BEGIN { m = (s > d ? s : d) + 0.5; print (m > l ? m : l) }')
  fi
  awk -v t="$took" -v b="$deadline" 'BEGIN { exit !(t <= b) }' ||
    fail "$case_name: rank $r (on $host) failed $took s after the $what, beyond $deadline s"
}

# finish_job: heals a cut host, hvdrun ends (the ranks have all reported:
# within 20 s), and nothing of the job is left on any host.
finish_job() {
  local rc=0 t
  [ -z "${cut_host:-}" ] || "$cluster" heal "$cut_host"
  cut_host=""
  for t in $(seq 1 100); do kill -0 "$job" 2>/dev/null || break; sleep 0.2; done
  kill -0 "$job" 2>/dev/null && { cat "$out"; fail "$case_name: hvdrun still runs 20 s after every rank reported"; }
  wait "$job" || rc=$?
  job=""
  [ "$rc" -ne 0 ] || fail "$case_name: hvdrun exited 0 after the $what"
  no_leftovers 15
  echo "$case_name: passed at $(elapsed) s"
}

# fault_case NAME HOSTS FAULT HOST LIMIT "R:HOST:OTHER ..." [PAUSE_MS STEPS]:
# starts the loop on HOSTS, waits until every rank is up (or, with PAUSE_MS,
# has done step 2), applies FAULT (partition | kill-host) to HOST, checks
# each listed rank against LIMIT.
fault_case() {
  case_name=$1
  if [ -n "${CASES:-}" ] && [[ " $CASES " != *" $1 "* ]]; then return 0; fi
  local hosts=$2 fault=$3 host=$4 limit=$5 checks=$6 pause=${7:-} n spec
  n=$(echo "$hosts" | tr , '\n' | awk -F: '{ n += $2 } END { print n }')
  [ "$fault" = partition ] && what="cut" || what="kill"
  if [ -n "$pause" ]; then
    start_job "$case_name" "$hosts" "$pause" 100
    await_lines "^probe rank [0-9]+: step 2 done$" "$n" "not every rank did step 2 (idle ${pause} ms between steps)"
    sleep 0.3
  else
    start_job "$case_name" "$hosts"
    await_lines "^probe rank [0-9]+: up$" "$n" "the job did not come up"
    sleep 0.5
  fi
  event=$(now)
  "$cluster" "$fault" "$host"
  [ "$fault" = partition ] && cut_host=$host
  echo "$case_name: $host ${what} at $(elapsed) s"
  for spec in $checks; do
    IFS=: read -r r rhost other <<<"$spec"
    check_rank "$r" "$rhost" "$other" "$limit" ${pause:+by_submit}
  done
  finish_job
}

bound_cut=$((peer + 1))
case "$group" in
  fault_2x2)
    up 2
    fault_case idle hvd-h1:2,hvd-h2:2 partition h2 $bound_cut \
      "0:hvd-h1:hvd-h2 1:hvd-h1:hvd-h2 2:hvd-h2:hvd-h1 3:hvd-h2:hvd-h1" 5000
    fault_case cut hvd-h1:2,hvd-h2:2 partition h2 $bound_cut \
      "0:hvd-h1:hvd-h2 1:hvd-h1:hvd-h2 2:hvd-h2:hvd-h1 3:hvd-h2:hvd-h1"
    fault_case kill hvd-h1:2,hvd-h2:2 kill-host h2 1 "0:hvd-h1:hvd-h2 1:hvd-h1:hvd-h2"
    ;;
  fault_4x1)
    up 4
    fault_case cut4 hvd-h1:1,hvd-h2:1,hvd-h3:1,hvd-h4:1 partition h3 $bound_cut \
      "0:hvd-h1:hvd-h3 1:hvd-h2:hvd-h3 2:hvd-h3:hvd-h[124] 3:hvd-h4:hvd-h3"
    fault_case kill4 hvd-h1:1,hvd-h2:1,hvd-h3:1,hvd-h4:1 kill-host h4 1 \
      "0:hvd-h1:hvd-h4 1:hvd-h2:hvd-h4 2:hvd-h3:hvd-h4"
    ;;
  *) fail "unknown group '$group' (fault_2x2, fault_4x1)" ;;
esac
echo "PASS: $group"
