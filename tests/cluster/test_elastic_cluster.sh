#!/usr/bin/env bash
# Elastic training across the hosts of the simulated cluster (cluster.sh in
# this folder): examples/elastic/train_torch_elastic.py under hvdrun --min-np
# --max-np --host-discovery-script (examples/elastic/discover_hosts.sh on a
# hosts file of the test's), hvdrun on hvd-h1, the other hosts' workers
# started over ssh, one slot per host.
#   test_elastic_cluster.sh CASE
# with HVDRUN and HVD_LIBRARY_PATH (the library every worker loads) in the
# environment; PYTHON (default python3) needs torch and scikit-learn.
# CASE:
#   elastic_host_lost   3 hosts; the worker on hvd-h2 (rank 1) SIGKILLs
#                itself at step 12 (--exit-at-step): hvdrun leaves hvd-h2 out,
#                epoch 1 forms with hvd-h1 and hvd-h3 from the commit at step
#                10, and both finish with the loss of --reference 3@0,2@10.
#   elastic_host_added  hvd-h1 and hvd-h2 listed; at step 10 rank 0 appends
#                hvd-h3:1 to the hosts file (--add-host-at-step): a worker
#                starts on hvd-h3, gets the state at step 10 without a reset
#                of its own, and all 3 finish with the loss of --reference
#                2@0,3@10.
#   elastic_host_cut    3 hosts, each step at least 20 ms (--step-time:
#                the whole job would take ~0.2 s); once every rank is past
#                step 20, hvd-h3's switch port is taken down (ip link set h3
#                down in the switch namespace). The survivors must fail
#                within the transport timeout (+3 s), one of them naming
#                rank 2 on hvd-h3 (the other may fail on the first one's
#                leaving), hvdrun must drop
#                worker hvd-h3:0:2 by name once its ssh client gives up on the
#                cut host (ssh probes every 2 s, 3 unanswered: well before the
#                start timeout of 30 s), the survivors finish with the loss
#                of --reference 3@0,2@C (C: the commit they went back to, from
#                rank 0's log: one every 5 steps or at the end of an epoch,
#                not before step 20), and no process of the job may be left
#                on any host, the cut-off one included.
#   elastic_below_min   hvd-h1 and hvd-h2 listed, --min-np 2: the worker on
#                hvd-h2 SIGKILLs itself at step 12, leaving one worker, fewer
#                than --min-np; once hvdrun says it waits for more, the test
#                appends hvd-h3:1 to the hosts file: a worker starts there,
#                gets the state of the commit at step 10, and both finish with
#                the loss of --reference 2@0,2@10 (Horovod's issue 3494: a deadlock).
#   elastic_sync_hang   hvd-h1 and hvd-h2; at step 10 hvd-h3 is added and its
#                new worker stops itself (SIGSTOP) as its state sync begins
#                (--stop-in-sync): the others, waiting for it in the state
#                broadcast, fail within the peer timeout (3 s) + 3 s naming
#                rank 2 on hvd-h3, hvdrun drops the stopped worker once it has
#                not asked to join the next epoch within the start timeout,
#                and the two finish with the loss of --reference 2@0,2@10
#                (Horovod's issue 2652: the job hung).
#   elastic_host_killed 3 hosts, hvd-h3 with 2 slots (4 workers), each step
#                at least 20 ms; once every rank is past step 20 every
#                process of hvd-h3 is killed (cluster.sh kill-host: its sshd
#                too): the survivors fail at once naming a rank on hvd-h3,
#                hvdrun leaves hvd-h3 out, and the two survivors finish with
#                the loss of --reference 4@0,2@C (Horovod's issue 3264: every
#                worker died).
# Losses are compared to a relative 1e-9 (test_mp_elastic.py's tolerance).
# Every worker logs its steps with the time (--log-steps; the hosts share
# this machine's clock), and every output line gets the time it reached the
# test, so each case prints how long the recovery took.
# KEEP_WORK=DIR keeps a copy of the work directory (the job's output, the
# workers' results) for a look afterwards.
# Exit 77 (ctest: skipped) with the reason where this machine cannot make
# the cluster or the example cannot run. The cluster is torn down on every
# path (trap).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cluster="$here/cluster.sh"
example="$repo/examples/elastic/train_torch_elastic.py"
discover="$repo/examples/elastic/discover_hosts.sh"
case_=${1:?usage: test_elastic_cluster.sh CASE}
PYTHON=${PYTHON:-python3}
export HVDC_ID="t$$"
export HVDC_DIR="/tmp/hvd-cluster-$HVDC_ID"
work=$(mktemp -d /tmp/hvd-elastic-cluster.XXXXXX)
T0=$(date +%s.%N)
job=""

. "$here/cluster_test_lib.sh"

teardown() {
  local rc=$?
  # Kills every process of every host, hvdrun and the workers included.
  cluster_down_checked || rc=1
  # The job's pipeline on this side (timeout, the time stamper) ends once
  # hvdrun is gone; what has not after 5 s is killed.
  if [ -n "$job" ]; then
    for _ in $(seq 1 50); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$job" 2>/dev/null; then
      local p
      for p in $(ps -o pid= --ppid "$job" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
      kill -KILL "$job" 2>/dev/null || true
    fi
  fi
  [ -n "${KEEP_WORK:-}" ] && cp -r "$work" "$KEEP_WORK"
  rm -rf "$work"
  echo "($(elapsed) s in all)"
  exit $rc
}
trap teardown EXIT
trap 'exit 130' INT TERM

fail() { echo "FAIL: $*"; exit 1; }

require_job_env
command -v "$PYTHON" >/dev/null || skip "no $PYTHON"
"$PYTHON" -c "import torch, sklearn" 2>/dev/null || skip "$PYTHON lacks torch or scikit-learn (the example's needs)"

reap_stale_clusters

# The workers (and the reference) load this package and this library
# (HVD_* travels to the remote workers with hvdrun; PYTHONPATH with -x).
export PYTHONPATH="$repo/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
export HVD_LIBRARY_PATH OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
export HVD_HOSTS_FILE="$work/hosts.txt"
TRAIN=(--epochs 2 --commit-every 5)
mkdir -p "$work/out"
cd "$work"

# Each line of the job's output prefixed with the time it arrived here.
STAMP='import sys, time
while True:
    line = sys.stdin.readline()
    if not line:
        break
    sys.stdout.write("%.3f %s" % (time.time(), line))
    sys.stdout.flush()'

# start_job LIMIT hvdrun-args... -- example-args...: the elastic job, hvdrun
# on hvd-h1, in the background; its output (stamped) in $work/job, its exit
# code in $work/job.rc once it ends.
start_job() {
  local limit=$1
  shift
  (
    set +e
    timeout -k 5 "$limit" "$cluster" exec h1 "$HVDRUN" -v --host-discovery-script "$discover" \
      -x PYTHONPATH -x OMP_NUM_THREADS -x PYTHONUNBUFFERED "$@" 2>&1 |
      "$PYTHON" -u -c "$STAMP" >"$work/job"
    echo "${PIPESTATUS[0]}" >"$work/job.rc"
  ) &
  job=$!
  echo "job started after $(elapsed) s"
}

# wait_job: waits for the job (bounded by start_job's limit), prints its
# output, sets rc.
wait_job() {
  wait "$job" || true
  job=""
  cat "$work/job"
  rc=$(cat "$work/job.rc" 2>/dev/null || echo "?")
  echo "hvdrun exited $rc after $(elapsed) s"
  [ "$rc" != 124 ] && [ "$rc" != 137 ] || fail "the job ran past its time limit"
}

has() { grep -qE -- "$1" "$work/job"; }
expect() { has "$1" || fail "hvdrun's output lacks /$1/: $2"; }

# reference SCHEDULE: the final loss one process computes for it.
# (Run in $(...): it says what went wrong on stderr and returns 1.)
reference() {
  local out
  out=$("$PYTHON" "$example" --reference "$1" "${TRAIN[@]}" 2>&1) ||
    { echo "--reference $1 failed: $out" >&2; return 1; }
  echo "$out" | tail -1 | grep -qE "^final loss [0-9.e+-]+$" ||
    { echo "--reference $1 gave no final loss: $out" >&2; return 1; }
  echo "$out" | tail -1 | awk '{ print $3 }'
}

# check_results REF_LOSS RANK:SIZE:HOST:FIRST_STEP:SIZES...: the workers that
# finished (result-*.json), in rank order, are exactly these, with one model
# (checksum), and each one's loss is REF_LOSS to a relative 1e-9.
check_results() {
  "$PYTHON" - "$work/out" "$@" <<'PY'
import glob, json, os, sys
d, ref, want = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
res = []
for p in glob.glob(os.path.join(d, "result-*.json")):
    with open(p) as f:
        res.append(json.load(f))
res.sort(key=lambda r: r["rank"])
got = ["%d:%d:%s:%d:%s" % (r["rank"], r["size"], r["host"], r["first_step"],
                           json.dumps(r["sizes"]).replace(" ", "")) for r in res]
errs = []
if got != want:
    errs.append("the workers that finished: %s, want %s" % (got, want))
if len({r["checksum"] for r in res}) > 1:
    errs.append("the workers' models differ: %s" % [r["checksum"] for r in res])
for r in res:
    print("rank %d on %s (worker %s): loss %r, reference %r" % (r["rank"], r["host"], r["worker"],
                                                               r["loss"], ref))
    if not abs(r["loss"] - ref) <= 1e-9 * abs(ref):
        errs.append("rank %d's loss %r is not the reference's %r" % (r["rank"], r["loss"], ref))
if errs:
    print("FAIL: " + "; ".join(errs))
    sys.exit(1)
PY
}

# worker_time PATTERN: the worker's own stamp (the second field) on the first
# output line matching PATTERN; empty when none does.
worker_time() { grep -E -- "$1" "$work/job" | head -1 | awk '{ print $2 }'; }
# arrival_time PATTERN: when the first line matching PATTERN reached the test.
arrival_time() { grep -E -- "$1" "$work/job" | head -1 | awk '{ print $1 }'; }
diff_s() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
at_most() { awk -v x="$1" -v l="$2" 'BEGIN { exit !(x <= l) }'; }


case "$case_" in
  elastic_host_lost)
    up 3
    printf 'hvd-h1:1\nhvd-h2:1\nhvd-h3:1\n' >"$HVD_HOSTS_FILE"
    start_job 60 -np 3 --min-np 2 --max-np 3 --start-timeout 30 --elastic-timeout 30 \
      -- "$PYTHON" "$example" "${TRAIN[@]}" --log-steps --result-dir "$work/out" \
      --exit-at-step 12 --exit-rank 1
    wait_job
    [ "$rc" -eq 0 ] || fail "hvdrun exited $rc"
    expect "epoch 0 formed: size 3, hosts_version 0: 0=hvd-h1:0:0 1=hvd-h2:0:1 2=hvd-h3:0:2$" "the first epoch"
    expect "rank 1: exiting at step 12 \(--exit-at-step\)" "rank 1's death"
    expect "hvdrun: worker hvd-h2:0:1 exited with code 137; host hvd-h2 is left out for good$" "the death, reported"
    expect "epoch 1 formed: size 2, hosts_version 0: 0=hvd-h1:0:0 1=hvd-h3:0:2$" "the survivors' epoch"
    expect "reset: elastic epoch 1, 2 workers, going on from step 10$" "the survivors went back to step 10"
    has "epoch 2 formed" && fail "a second reset"
    ref=$(reference 3@0,2@10) || fail "the reference"
    check_results "$ref" "0:2:hvd-h1:0:[2]" "1:2:hvd-h3:0:[2]" || fail "the survivors' results"
    died=$(worker_time "rank 1: exiting at step 12")
    t0=$(worker_time "rank 0 of 2: step 11 done")
    t1=$(worker_time "rank 1 of 2: step 11 done")
    [ -n "$died" ] && [ -n "$t0" ] && [ -n "$t1" ] || fail "time stamps missing"
    last=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print (a > b ? a : b) }')
    took=$(diff_s "$died" "$last")
    echo "TIMING host lost: death (step 12, hvd-h2) -> first step at size 2 on hvd-h1 $(diff_s "$died" "$t0") s," \
      "on hvd-h3 $(diff_s "$died" "$t1") s"
    # Nothing on this path waits for a timeout: the survivors' connections
    # to the dead worker are reset at once.
    at_most "$took" 15 || fail "the survivors took $took s to train again, beyond 15 s"
    no_leftovers 10
    ;;
  elastic_host_added)
    up 3
    printf 'hvd-h1:1\nhvd-h2:1\n' >"$HVD_HOSTS_FILE"
    start_job 60 -np 2 --min-np 2 --max-np 3 --start-timeout 30 --elastic-timeout 30 \
      -- "$PYTHON" "$example" "${TRAIN[@]}" --log-steps --result-dir "$work/out" \
      --add-host-at-step 10 --add-host hvd-h3:1 --hosts-file "$HVD_HOSTS_FILE"
    wait_job
    [ "$rc" -eq 0 ] || fail "hvdrun exited $rc"
    expect "epoch 0 formed: size 2, hosts_version 0: 0=hvd-h1:0:0 1=hvd-h2:0:1$" "the first epoch"
    expect "hvdrun: hosts: hvd-h1:1, hvd-h2:1, hvd-h3:1 \(hosts_version 1\)$" "the added host, seen"
    expect "hvdrun: worker hvd-h3:0:2 ssh client started" "a worker started on hvd-h3 over ssh"
    expect "epoch 1 formed: size 3, hosts_version 1: 0=hvd-h1:0:0 1=hvd-h2:0:1 2=hvd-h3:0:2$" "the grown epoch"
    expect "reset: elastic epoch 1, 3 workers, going on from step 10$" "the job grew at step 10"
    has "epoch 2 formed" && fail "a second reset"
    grep -qx "hvd-h1:1 hvd-h2:1 hvd-h3:1" <(tr '\n' ' ' <"$HVD_HOSTS_FILE" | sed 's/ $//') ||
      fail "the hosts file: $(cat "$HVD_HOSTS_FILE")"
    ref=$(reference 2@0,3@10) || fail "the reference"
    # The new worker starts at step 10 with the state it was sent (no reset
    # of its own: sizes []).
    check_results "$ref" "0:3:hvd-h1:0:[3]" "1:3:hvd-h2:0:[3]" "2:3:hvd-h3:10:[]" || fail "the workers' results"
    added=$(worker_time "rank 0 of 2: step 10 done")
    first=$(worker_time "rank 2 of 3: step 11 done")
    [ -n "$added" ] && [ -n "$first" ] || fail "time stamps missing"
    echo "TIMING host added: step 10 (hvd-h3 appended to the hosts file) -> the new worker's first step" \
      "$(diff_s "$added" "$first") s (ssh, Python and torch start-up, the state sent)"
    no_leftovers 10
    ;;
  elastic_host_cut)
    up 3
    printf 'hvd-h1:1\nhvd-h2:1\nhvd-h3:1\n' >"$HVD_HOSTS_FILE"
    peer=3 transport=5 start=30
    # Long grace: a worker that ends is one that noticed by itself.
    HVD_PEER_TIMEOUT=$peer start_job 75 -np 3 --min-np 2 --max-np 3 --start-timeout $start \
      --elastic-timeout 30 --gloo-timeout-seconds $transport --grace-period 30 \
      -- "$PYTHON" "$example" "${TRAIN[@]}" --log-steps --step-time 0.02 --result-dir "$work/out"
    for _ in $(seq 1 450); do
      n=0
      for r in 0 1 2; do has "rank $r of 3: step 20 done" && n=$((n + 1)); done
      [ $n -eq 3 ] && break
      kill -0 "$job" 2>/dev/null || break
      sleep 0.1
    done
    [ $n -eq 3 ] || { cat "$work/job"; fail "the 3 workers did not reach step 20 within 45 s"; }
    cut=$(date +%s.%N)
    ip -n "hvdc-$HVDC_ID-sw" link set h3 down
    echo "hvd-h3's switch port down at $(elapsed) s"
    wait_job
    [ "$rc" -eq 0 ] || fail "hvdrun exited $rc"
    expect "epoch 0 formed: size 3, hosts_version 0: 0=hvd-h1:0:0 1=hvd-h2:0:1 2=hvd-h3:0:2$" "the first epoch"
    # Both survivors fail; the first to notice names the silent rank 2, the
    # other may fail on it or on the first one's leaving the old epoch.
    for r in 0 1; do expect "\[hvd $r\] ERROR: " "rank $r's failure"; done
    expect "\[hvd [01]\] ERROR: .*rank 2 \(host hvd-h3\)" "a survivor's failure naming rank 2 on hvd-h3"
    expect "hvdrun: worker hvd-h3:0:2 .*; host hvd-h3 is left out for good$" \
      "hvdrun naming the cut-off worker (its ssh client gave up)"
    has "did not ask to join epoch 1 within the start timeout" &&
      fail "hvdrun waited the start timeout for the cut-off worker"
    expect "epoch 1 formed: size 2, hosts_version 0: 0=hvd-h1:0:0 1=hvd-h2:0:1$" "the survivors' epoch"
    has "epoch 2 formed" && fail "a second reset"
    back=$(grep -E "reset: elastic epoch 1, 2 workers, going on from step [0-9]+$" "$work/job" | awk '{ print $NF }')
    # The last commit before the cut: every 5 steps, and at the end of each
    # epoch (rank 0's "epoch N: 3 workers, step S" line; a cut right after
    # an epoch's end can lose the next commit), at or after step 20, and no
    # later than rank 0 got at size 3.
    reached=$(grep -E "rank 0 of 3: step [0-9]+ done" "$work/job" | awk '{ print $(NF - 1) }' | sort -n | tail -1)
    ends=" $(grep -E "^[0-9.]+ epoch [0-9]+: 3 workers, step [0-9]+," "$work/job" | awk '{ print $7 }' | tr -d , | tr '\n' ' ' || true)"
    [ -n "$back" ] && { [ $((back % 5)) -eq 0 ] || [[ "$ends" == *" $back "* ]]; } &&
      [ "$back" -ge 20 ] && [ "$back" -le "$reached" ] ||
      fail "the survivors went back to step '${back}' (rank 0 had reached $reached at size 3; epochs ended at${ends})"
    ref=$(reference "3@0,2@$back") || fail "the reference"
    check_results "$ref" "0:2:hvd-h1:0:[2]" "1:2:hvd-h2:0:[2]" || fail "the survivors' results"
    asked=$(arrival_time "hvdrun: worker hvd-h[12]:0:[01] asks to join \(join 1\)")
    dropped=$(arrival_time "hvdrun: worker hvd-h3:0:2 .*; host hvd-h3 is left out")
    t0=$(worker_time "rank 0 of 2: step $((back + 1)) done")
    t1=$(worker_time "rank 1 of 2: step $((back + 1)) done")
    [ -n "$asked" ] && [ -n "$dropped" ] && [ -n "$t0" ] && [ -n "$t1" ] || fail "time stamps missing"
    last=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print (a > b ? a : b) }')
    echo "TIMING host cut: cut -> first survivor asks to join $(diff_s "$cut" "$asked") s," \
      "-> hvd-h3's worker dropped $(diff_s "$cut" "$dropped") s," \
      "-> first step at size 2 on hvd-h1 $(diff_s "$cut" "$t0") s, on hvd-h2 $(diff_s "$cut" "$t1") s"
    at_most "$(diff_s "$cut" "$asked")" $((transport + 3)) ||
      fail "the survivors noticed the cut $(diff_s "$cut" "$asked") s after it, beyond the transport timeout ($transport s) + 3 s"
    at_most "$(diff_s "$cut" "$last")" $((transport + 14)) ||
      fail "the survivors trained again $(diff_s "$cut" "$last") s after the cut, beyond the transport timeout + ssh's 3 probes (6 s) + 8 s"
    # hvd-h3's processes end once its sshd gives up on the session (2 s x 3)
    # and the session's watcher stops the worker.
    no_leftovers 15
    ;;
  elastic_below_min)
    up 3
    printf 'hvd-h1:1\nhvd-h2:1\n' >"$HVD_HOSTS_FILE"
    start_job 90 -np 2 --min-np 2 --max-np 2 --start-timeout 30 --elastic-timeout 40 \
      -- "$PYTHON" "$example" "${TRAIN[@]}" --log-steps --result-dir "$work/out" \
      --exit-at-step 12 --exit-rank 1
    for _ in $(seq 1 600); do
      has "fewer than --min-np 2: waiting" && break
      kill -0 "$job" 2>/dev/null || break
      sleep 0.1
    done
    has "fewer than --min-np 2: waiting" || { cat "$work/job"; fail "hvdrun did not wait for more workers"; }
    below=$(date +%s.%N)
    echo "hvd-h3:1" >>"$HVD_HOSTS_FILE"
    echo "hvd-h3 added at $(elapsed) s"
    wait_job
    [ "$rc" -eq 0 ] || fail "hvdrun exited $rc"
    expect "epoch 0 formed: size 2, hosts_version 0: 0=hvd-h1:0:0 1=hvd-h2:0:1$" "the first epoch"
    expect "hvdrun: worker hvd-h2:0:1 exited with code 137; host hvd-h2 is left out for good$" "the death, reported"
    expect "epoch 1 formed: size 2, hosts_version 1: 0=hvd-h1:0:0 1=hvd-h3:0:2$" "the epoch with the late worker"
    expect "reset: elastic epoch 1, 2 workers, going on from step 10$" "the job went back to step 10"
    has "epoch 2 formed" && fail "a second reset"
    ref=$(reference 2@0,2@10) || fail "the reference"
    check_results "$ref" "0:2:hvd-h1:0:[2]" "1:2:hvd-h3:10:[]" || fail "the workers' results"
    first=$(worker_time "rank 1 of 2: step 11 done")
    [ -n "$first" ] || fail "time stamps missing"
    echo "TIMING below --min-np: hvd-h3 added -> the late worker's first step $(diff_s "$below" "$first") s"
    at_most "$(diff_s "$below" "$first")" 30 || fail "the job took $(diff_s "$below" "$first") s to train again, beyond 30 s"
    no_leftovers 10
    ;;
  elastic_sync_hang)
    up 3
    printf 'hvd-h1:1\nhvd-h2:1\n' >"$HVD_HOSTS_FILE"
    peer=3 start=12
    HVD_PEER_TIMEOUT=$peer start_job 90 -np 2 --min-np 2 --max-np 3 --start-timeout $start \
      --elastic-timeout 30 --grace-period 3 \
      -- "$PYTHON" "$example" "${TRAIN[@]}" --log-steps --result-dir "$work/out" \
      --add-host-at-step 10 --add-host hvd-h3:1 --hosts-file "$HVD_HOSTS_FILE" --stop-in-sync
    wait_job
    [ "$rc" -eq 0 ] || fail "hvdrun exited $rc"
    expect "epoch 1 formed: size 3, hosts_version 1: 0=hvd-h1:0:0 1=hvd-h2:0:1 2=hvd-h3:0:2$" "the grown epoch"
    expect "rank 2: stopping in the state sync \(--stop-in-sync\)" "the new worker's stop"
    expect "\[hvd [01]\] ERROR: .*rank 2 \(host hvd-h3\)" "a survivor's failure naming rank 2 on hvd-h3"
    expect "hvdrun: worker hvd-h3:0:2 .*start timeout" "hvdrun dropping the stopped worker"
    expect "epoch 2 formed: size 2, hosts_version 1: 0=hvd-h1:0:0 1=hvd-h2:0:1$" "the survivors' epoch"
    expect "reset: elastic epoch 2, 2 workers, going on from step 10$" "the survivors went back to step 10"
    has "epoch 3 formed" && fail "a third reset"
    ref=$(reference 2@0,2@10) || fail "the reference"
    check_results "$ref" "0:2:hvd-h1:0:[3,2]" "1:2:hvd-h2:0:[3,2]" || fail "the survivors' results"
    stopped=$(worker_time "rank 2: stopping in the state sync")
    failed=$(arrival_time "\[hvd [01]\] ERROR: .*rank 2 \(host hvd-h3\)")
    t0=$(worker_time "rank 0 of 2: step 11 done")
    [ -n "$stopped" ] && [ -n "$failed" ] && [ -n "$t0" ] || fail "time stamps missing"
    echo "TIMING sync hang: the new worker stopped -> a survivor's error $(diff_s "$stopped" "$failed") s," \
      "-> first step at size 2 $(diff_s "$stopped" "$t0") s"
    at_most "$(diff_s "$stopped" "$failed")" $((peer + 3)) ||
      fail "the survivors failed $(diff_s "$stopped" "$failed") s after the stop, beyond the peer timeout ($peer s) + 3 s"
    at_most "$(diff_s "$stopped" "$t0")" $((peer + start + 15)) ||
      fail "the survivors trained again $(diff_s "$stopped" "$t0") s after the stop"
    no_leftovers 10
    ;;
  elastic_host_killed)
    up 3
    printf 'hvd-h1:1\nhvd-h2:1\nhvd-h3:2\n' >"$HVD_HOSTS_FILE"
    start_job 90 -np 4 --min-np 2 --max-np 4 --start-timeout 30 --elastic-timeout 30 \
      -- "$PYTHON" "$example" "${TRAIN[@]}" --log-steps --step-time 0.02 --result-dir "$work/out"
    for _ in $(seq 1 600); do
      n=0
      for r in 0 1 2 3; do has "rank $r of 4: step 20 done" && n=$((n + 1)); done
      [ $n -eq 4 ] && break
      kill -0 "$job" 2>/dev/null || break
      sleep 0.1
    done
    [ $n -eq 4 ] || { cat "$work/job"; fail "the 4 workers did not reach step 20 within 60 s"; }
    killed=$(date +%s.%N)
    "$cluster" kill-host h3
    echo "hvd-h3 killed at $(elapsed) s"
    wait_job
    [ "$rc" -eq 0 ] || fail "hvdrun exited $rc"
    expect "epoch 0 formed: size 4, hosts_version 0: 0=hvd-h1:0:0 1=hvd-h2:0:1 2=hvd-h3:0:2 3=hvd-h3:1:3$" "the first epoch"
    expect "\[hvd [01]\] ERROR: .*rank [23] \(host hvd-h3" "a survivor's failure naming a rank on hvd-h3"
    expect "hvdrun: worker hvd-h3:[01]:[23] .*; host hvd-h3 is left out" "hvdrun leaving hvd-h3 out"
    expect "epoch 1 formed: size 2, hosts_version 0: 0=hvd-h1:0:0 1=hvd-h2:0:1$" "the survivors' epoch"
    has "epoch 2 formed" && fail "a second reset"
    back=$(grep -E "reset: elastic epoch 1, 2 workers, going on from step [0-9]+$" "$work/job" | awk '{ print $NF }')
    [ -n "$back" ] && [ "$back" -ge 20 ] || fail "the survivors went back to step '${back}'"
    ref=$(reference "4@0,2@$back") || fail "the reference"
    check_results "$ref" "0:2:hvd-h1:0:[2]" "1:2:hvd-h2:0:[2]" || fail "the survivors' results"
    failed=$(arrival_time "\[hvd [01]\] ERROR: ")
    t0=$(worker_time "rank 0 of 2: step $((back + 1)) done")
    [ -n "$failed" ] && [ -n "$t0" ] || fail "time stamps missing"
    echo "TIMING host killed: kill -> a survivor's error $(diff_s "$killed" "$failed") s," \
      "-> first step at size 2 $(diff_s "$killed" "$t0") s"
    # Nothing waits for a timeout: the dead host's connections are reset.
    at_most "$(diff_s "$killed" "$failed")" 3 || fail "the survivors failed $(diff_s "$killed" "$failed") s after the kill"
    at_most "$(diff_s "$killed" "$t0")" 20 || fail "the survivors trained again $(diff_s "$killed" "$t0") s after the kill"
    no_leftovers 10
    ;;
  *) fail "unknown case '$case_'" ;;
esac
echo "PASS: $case_"
