#!/usr/bin/env bash
# Multi-host jobs on the simulated cluster (cluster.sh in this folder).
#   test_cluster.sh CASE
# with HVDRUN, PROBE (cluster_probe) and MP_CHECK in the environment.
# CASE:
#   hvdrun_2x2   2 hosts x 2 ranks over ssh, no transport named: cluster_probe
#                topo 2 2, then mp_check 4 (every collective, process sets),
#                which must log "hierarchical collectives: 2 hosts, 2 rank(s)
#                on this one" on every rank (the library groups ranks by host
#                identity) and choose the default across hosts (UCX where
#                built, else Gloo), rank 0 saying so.
#   hier_off     hvdrun_2x2's mp_check with HVD_HIERARCHICAL=0: every check
#                passes, no rank logs "hierarchical collectives: ...", and
#                every rank's transport comes up without the hierarchy.
#   hvdrun_4x1   4 hosts x 1 rank: cluster_probe topo 1 4, mp_check 4, and no
#                hierarchy (no host has two ranks).
#   mpi_2x2      hvdrun --transport mpi (mpirun's ssh agent through the
#                cluster's ssh_config): cluster_probe topo 2 2 and mp_check 4.
#   partition    2 x 2 over Gloo (--transport gloo: the default across hosts
#                is UCX where built, which ucx_partition covers),
#                cluster_probe loop; once every rank is up, hvd-h2 is
#                cut off. The ranks on hvd-h1 must fail on their own within
#                the transport timeout (+2 s) naming a rank on hvd-h2, hvdrun
#                must exit with their code 4, the ranks on hvd-h2 must fail on
#                their own too (within 45 s), and no process of the job may be
#                left on any host.
#   ucx_2x2      2 x 2 over ssh with --transport ucx: mp_check 4, every rank
#                connected over the UCX plugin's point-to-point (across the
#                hosts' network), hierarchical collectives.
#   ucx_partition  the partition case with --transport ucx: the ranks on
#                hvd-h1 fail within the transport timeout (+2 s) naming a rank
#                on hvd-h2, the cut-off ranks within 45 s, hvdrun exits 4.
#                Both ucx cases skip where libhvd_transport_ucx.so is not built.
#   partition_cut_off  the same cut: the ranks on hvd-h2 must fail within the
#                transport timeout (+2 s) as well (a bug this case found,
#                fixed: see tests/cluster/CMakeLists.txt).
#   decoy_nic    2 x 2 with a podman0 bridge in each host (same address on
#                every host) and --network-interface eth0: topo 2 2 passes.
#   decoy_default  the same without --network-interface: must pass too (a
#                bug this case found, fixed: see tests/cluster/CMakeLists.txt).
#   sshd_hung    4 x 1 with hvd-h3's sshd stopped (SIGSTOP: the kernel still
#                accepts connections, sshd never answers): hvdrun must fail
#                within its start timeout (10 s, +2 s) naming hvd-h3 and
#                saying ssh did not answer there (not that a rank did not
#                reach the rendezvous store), and leave no process on any
#                host, before and after that sshd is resumed (SIGCONT, on
#                every path).
#   ssh_auth_hung  3 x 1 with hvd-h3's login hanging during authentication
#                (its sshd asks an AuthorizedKeysCommand that does not answer
#                until released; first checked with ssh -v: the banner comes,
#                the key is offered, then nothing): hvdrun --start-timeout 10
#                must fail within 12 s, its first message naming rank 2 and
#                hvd-h3 and saying the ssh login (authentication) did not
#                complete; nothing may mention the rendezvous store or show
#                the remote script's start marker; once the hang is released,
#                nothing may be left on any host.
#   bind_remote  2 x 2 (hvd-h1's ranks local, hvd-h2's over ssh), each rank
#                reporting its Cpus_allowed_list: with --bind-to auto the two
#                ranks of each host get disjoint CPU sets (hvd-h2's bound by
#                hvdrun --bind-exec there; -v shows their CPUs), with
#                --bind-to none every rank keeps the full set; then, with
#                hvd-h2's sshd (so its sessions) confined to one CPU, auto
#                leaves hvd-h2's two ranks unbound on that CPU, says so with
#                -v, and the job still succeeds.
#   ssh_lost     2 x 2, cluster_probe loop; once every rank is up, the ssh
#                sessions of hvd-h2's ranks are killed (its sshd's session
#                processes: host, link and ranks stay). hvdrun must exit 255
#                within the grace period (+3 s) saying the ssh connection to
#                hvd-h2 was lost after the rank had started, the job's
#                processes on hvd-h2 (which ignore SIGTERM and outlive the
#                loop) must be gone within the grace period (+2 s) of the
#                cut, nothing may be left on any host, and hvd-h2 must still
#                take ssh logins.
#   host_death   2 x 2 over Gloo, cluster_probe loop; once every rank is up, every
#                process of hvd-h2 is killed (cluster.sh kill-host: its
#                ranks and its sshd; its link stays up, so its sockets are
#                reset, not silent). Each rank on hvd-h1 must report its own
#                failure within the transport timeout (+2 s) naming a rank
#                on hvd-h2; hvdrun must exit with an error (not hang) within
#                the transport timeout (+3 s), its first message naming a
#                rank on hvd-h2 and the lost ssh connection to it; nothing
#                may be left on any host. ucx_host_death: the same over UCX.
#   autotune_hier  2 x 2, mp_check 4 under HVD_AUTOTUNE=1 (short windows):
#                the tuner's last stage switches the hierarchical collectives
#                off and on while every collective is checked exactly; the
#                CSV must show samples with them on and off and a final
#                choice.
#   script       cluster.sh's own verbs: rate limit, private /dev/shm and
#                /etc/hosts, exec's exit code, partition/heal, kill-host,
#                refusals, and down leaving nothing behind.
# Exit 77 (ctest: skipped) with the reason where this machine cannot make
# the cluster (not root, no namespaces, no sshd). The cluster is torn down on
# every path (trap).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cluster="$here/cluster.sh"
case_=${1:?usage: test_cluster.sh CASE}
export HVDC_ID="t$$"
export HVDC_DIR="/tmp/hvd-cluster-$HVDC_ID"
work=$(mktemp -d /tmp/hvd-cluster-test.XXXXXX)
T0=$(date +%s.%N)

. "$here/cluster_test_lib.sh"

# sshd_hung: the pid of the sshd it stopped, resumed on every path.
stopped_sshd=""
teardown() {
  local rc=$?
  [ -z "$stopped_sshd" ] || kill -CONT "$stopped_sshd" 2>/dev/null || true
  cluster_down_checked || rc=1
  rm -rf "$work"
  echo "($(elapsed) s in all)"
  exit $rc
}
trap teardown EXIT
trap 'exit 130' INT TERM

reap_stale_clusters

# An expected-failure case (ctest WILL_FAIL; none at present) must not pass
# because something else broke: until it reaches the bug's check
# ("checking=1"), a failure skips it instead (the other cases report such
# breakage).
xfail=0 checking=0
# (No expected failures now: decoy_default and partition_cut_off guard fixed bugs.)
fail() {
  if [ $xfail -eq 1 ] && [ $checking -eq 0 ]; then
    echo "SKIP: expected-failure case $case_ failed before its check: $*"
    exit 77
  fi
  echo "FAIL: $*"
  exit 1
}
run() {
  local limit=$1 out=$2
  shift 2
  rc=0
  timeout -k 5 "$limit" "$cluster" exec h1 "$@" >"$out" 2>&1 || rc=$?
  cat "$out"
  [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the job ran past $limit s"
}

expect_probe_ok() {   # OUT N
  local n
  n=$(grep -cE "^probe rank [0-9]+: host hvd-h[0-9]+ local .*: ok$" "$1" || true)
  [ "$n" -eq "$2" ] || fail "$n of $2 ranks' topology probes passed"
  if grep -q "FAIL" "$1"; then fail "a probe check failed"; fi
}

expect_mp_check_ok() {   # OUT N
  local n
  n=$(grep -cE "^mp_check rank [0-9]+ of $2: [0-9]+ checks, 0 failed$" "$1" || true)
  [ "$n" -eq "$2" ] || fail "$n of $2 ranks passed mp_check"
}

count() { grep -cE -- "$2" "$1" || true; }

# The transport a job that names none gets across hosts: ucx where its
# plugin is built (docs/transports.md), else gloo.
default_transport() {
  if [ -f "$(dirname "$HVDRUN")/../lib/libhvd_transport_ucx.so" ]; then echo ucx; else echo gloo; fi
}

# After starting a 4-rank `cluster_probe loop` job in the background
# (output in $work/job) and setting job=$!: waits until every rank is up.
await_loop_up() {
  for _ in $(seq 1 150); do
    [ "$(count "$work/job" "^probe rank [0-3]: up$")" -eq 4 ] && break
    kill -0 $job 2>/dev/null || break
    sleep 0.2
  done
  [ "$(count "$work/job" "^probe rank [0-3]: up$")" -eq 4 ] || { cat "$work/job"; fail "the job did not come up"; }
  sleep 0.5
}

# took_within LIMIT MESSAGE: fails with MESSAGE unless $took <= LIMIT.
took_within() { awk -v t="$took" -v b="$1" 'BEGIN { exit !(t <= b) }' || fail "$2"; }

# first_says REGEX WHAT: hvdrun's first message in $work/job matches REGEX,
# else fails saying that it does not WHAT.
first_says() {
  local first
  first=$(grep -m1 "^hvdrun: " "$work/job" || true)
  echo "$first" | grep -qE "$1" || fail "hvdrun's first message $2: $first"
}

# await_job_end FAULT: waits for $job; sets rc and took (seconds since
# $cut), shows the job's output; fails if the job hung after FAULT.
await_job_end() {
  rc=0
  wait $job || rc=$?
  took=$(awk -v a="$cut" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  cat "$work/job"
  echo "hvdrun exited $rc, $took s after $1"
  [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "hvdrun hung after $1"
}

# A process that exists and is not a zombie (killed processes wait for the
# machine's init to reap them).
running() { [ -r "/proc/$1/stat" ] && [ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" != Z ]; }

case "$case_" in
  hvdrun_2x2)
    up 2
    run 60 "$work/topo" "$HVDRUN" -H hvd-h1:2,hvd-h2:2 --start-timeout 30 "$PROBE" topo 2 2
    [ "$rc" -eq 0 ] || fail "hvdrun exited $rc"
    expect_probe_ok "$work/topo" 4
    grep -q "hvd-h2 local" "$work/topo" || fail "no rank ran on hvd-h2"
    run 120 "$work/mp" "$HVDRUN" -H hvd-h1:2,hvd-h2:2 --start-timeout 30 -x HVD_LOG_LEVEL=info "$MP_CHECK" 4
    [ "$rc" -eq 0 ] || fail "hvdrun mp_check exited $rc"
    expect_mp_check_ok "$work/mp" 4
    n=$(count "$work/mp" "INFO: hierarchical collectives: 2 hosts, 2 rank\(s\) on this one")
    [ "$n" -eq 4 ] || fail "'hierarchical collectives: 2 hosts, 2 rank(s) on this one' logged $n times, want 4"
    # No transport named: UCX across hosts where it is built, rank 0 saying why.
    t=$(default_transport)
    n=$(count "$work/mp" "INFO: transport $t chosen: the job spans 2 hosts")
    [ "$n" -eq 1 ] || fail "the default's choice of $t logged $n times, want 1 (rank 0)"
    no_leftovers 10
    ;;
  autotune_hier)
    up 2
    # Autotuning switches the hierarchical collectives off and on (on every
    # rank in the same cycle) while mp_check checks every collective exactly.
    run 150 "$work/mp" "$HVDRUN" -H hvd-h1:2,hvd-h2:2 --start-timeout 30 -x HVD_LOG_LEVEL=info \
      -x HVD_AUTOTUNE=1 -x HVD_AUTOTUNE_LOG="$work/tune.csv" -x HVD_AUTOTUNE_WARMUP_SAMPLES=0 \
      -x HVD_AUTOTUNE_STEPS_PER_SAMPLE=2 -x HVD_AUTOTUNE_SAMPLES=1 "$MP_CHECK" 4
    [ "$rc" -eq 0 ] || fail "hvdrun mp_check exited $rc"
    expect_mp_check_ok "$work/mp" 4
    grep -q "autotune: then hierarchical collectives on and off" "$work/mp" ||
      fail "the tuner did not take up the hierarchical collectives"
    [ -f "$work/tune.csv" ] || fail "rank 0 wrote no autotune log"
    sed "s/^/  /" "$work/tune.csv"
    [ "$(count "$work/tune.csv" "^sample,.*,1$")" -ge 1 ] || fail "no sample with the hierarchical collectives on"
    [ "$(count "$work/tune.csv" "^sample,.*,0$")" -ge 1 ] || fail "no sample with them off"
    grep -qE "^best,[0-9]+,[0-9.]+,,[01]$" "$work/tune.csv" || fail "the search did not finish within mp_check"
    no_leftovers 10
    ;;
  hier_off)
    # HVD_HIERARCHICAL=0 turns the hierarchy off on a job that would use it
    # (2 hosts x 2 ranks, as hvdrun_2x2): no rank opens the hierarchical
    # communicators or logs using them, each transport comes up without
    # them, the tuner does not take them up, and every collective is exact.
    up 2
    run 120 "$work/mp" "$HVDRUN" -H hvd-h1:2,hvd-h2:2 --start-timeout 30 -x HVD_LOG_LEVEL=debug \
      -x HVD_HIERARCHICAL=0 "$MP_CHECK" 4
    [ "$rc" -eq 0 ] || fail "hvdrun mp_check exited $rc"
    expect_mp_check_ok "$work/mp" 4
    n=$(count "$work/mp" "INFO: hierarchical collectives:")
    [ "$n" -eq 0 ] || fail "hierarchical collectives used with HVD_HIERARCHICAL=0 ($n lines)"
    n=$(count "$work/mp" "transport '$(default_transport)' connected \(plugin, point-to-point\)")
    [ "$n" -eq 4 ] || fail "$n of 4 ranks' transports came up without the hierarchy, want 4"
    n=$(count "$work/mp" "transport '[a-z]+' connected .*hierarchical")
    [ "$n" -eq 0 ] || fail "$n transports came up hierarchical with HVD_HIERARCHICAL=0"
    n=$(count "$work/mp" "autotune: then hierarchical collectives on and off")
    [ "$n" -eq 0 ] || fail "the tuner took up the hierarchy with HVD_HIERARCHICAL=0"
    no_leftovers 10
    ;;
  hvdrun_4x1)
    up 4
    run 60 "$work/topo" "$HVDRUN" -H hvd-h1,hvd-h2,hvd-h3,hvd-h4 --start-timeout 30 "$PROBE" topo 1 4
    [ "$rc" -eq 0 ] || fail "hvdrun exited $rc"
    expect_probe_ok "$work/topo" 4
    run 120 "$work/mp" "$HVDRUN" -H hvd-h1,hvd-h2,hvd-h3,hvd-h4 --start-timeout 30 -x HVD_LOG_LEVEL=info "$MP_CHECK" 4
    [ "$rc" -eq 0 ] || fail "hvdrun mp_check exited $rc"
    expect_mp_check_ok "$work/mp" 4
    n=$(count "$work/mp" "INFO: hierarchical collectives:")
    [ "$n" -eq 0 ] || fail "hierarchical collectives used with one rank per host ($n lines)"
    no_leftovers 10
    ;;
  ucx_2x2)
    [ -f "$(dirname "$HVDRUN")/../lib/libhvd_transport_ucx.so" ] || skip "the UCX transport is not built"
    up 2
    run 120 "$work/mp" "$HVDRUN" --transport ucx -H hvd-h1:2,hvd-h2:2 --start-timeout 30 \
      -x HVD_LOG_LEVEL=debug "$MP_CHECK" 4
    [ "$rc" -eq 0 ] || fail "hvdrun --transport ucx mp_check exited $rc"
    expect_mp_check_ok "$work/mp" 4
    n=$(count "$work/mp" "transport 'ucx' connected \(plugin, point-to-point, hierarchical\)")
    [ "$n" -eq 4 ] || fail "$n of 4 ranks connected over the ucx plugin's point-to-point, hierarchically"
    n=$(count "$work/mp" "ucx: rank [0-3] of 4 connected over")
    [ "$n" -eq 4 ] || fail "$n of 4 ranks logged the UCX plugin's own connection"
    n=$(count "$work/mp" "INFO: hierarchical collectives: 2 hosts, 2 rank\(s\) on this one")
    [ "$n" -eq 4 ] || fail "'hierarchical collectives: 2 hosts, 2 rank(s) on this one' logged $n times, want 4"
    no_leftovers 10
    ;;
  mpi_2x2)
    command -v mpirun >/dev/null || skip "no mpirun (Open MPI) on PATH"
    [ -f "$(dirname "$HVDRUN")/../lib/libhvd_transport_mpi.so" ] || skip "the MPI transport is not built"
    up 2
    # mpirun starts its daemon on hvd-h2 over ssh with the cluster's config
    # (OMPI_MCA_plm_rsh_args from cluster.sh env).
    run 60 "$work/topo" "$HVDRUN" --transport mpi -H hvd-h1:2,hvd-h2:2 --start-timeout 30 "$PROBE" topo 2 2
    if [ "$rc" -ne 0 ] && grep -qiE "orted|ORTE|plm_rsh|could not|unable to (start|launch)" "$work/topo" &&
       ! grep -q "probe rank" "$work/topo"; then
      skip "mpirun cannot start its daemons across the cluster's namespaces (hvdrun exited $rc)"
    fi
    [ "$rc" -eq 0 ] || fail "hvdrun --transport mpi exited $rc"
    expect_probe_ok "$work/topo" 4
    run 120 "$work/mp" "$HVDRUN" --transport mpi -H hvd-h1:2,hvd-h2:2 --start-timeout 30 -x HVD_LOG_LEVEL=info "$MP_CHECK" 4
    [ "$rc" -eq 0 ] || fail "hvdrun --transport mpi mp_check exited $rc"
    expect_mp_check_ok "$work/mp" 4
    n=$(count "$work/mp" "INFO: hierarchical collectives: 2 hosts, 2 rank\(s\) on this one")
    [ "$n" -eq 4 ] || fail "'hierarchical collectives: 2 hosts, 2 rank(s) on this one' logged $n times, want 4"
    no_leftovers 10
    ;;
  partition|partition_cut_off|ucx_partition)
    tflags=(--transport gloo)
    if [ "$case_" = ucx_partition ]; then
      [ -f "$(dirname "$HVDRUN")/../lib/libhvd_transport_ucx.so" ] || skip "the UCX transport is not built"
      tflags=(--transport ucx)
    fi
    up 2
    peer=3 transport=5 grace=60
    mkdir -p "$work/ranks"
    # The ranks ignore SIGTERM and the grace period is long, so each rank's
    # report is its own detection, not the launcher stopping it.
    HVD_PEER_TIMEOUT=$peer timeout -k 5 100 "$cluster" exec h1 "$HVDRUN" "${tflags[@]}" -H hvd-h1:2,hvd-h2:2 \
      --start-timeout 30 --gloo-timeout-seconds $transport --grace-period $grace \
      "$PROBE" loop "$work/ranks" >"$work/job" 2>&1 &
    job=$!
    await_loop_up
    cut=$(date +%s.%N)
    "$cluster" partition h2
    echo "hvd-h2 partitioned at $(elapsed) s"
    # check_rank R HOST PEER_HOST LIMIT_S: R's own report, within LIMIT_S s
    # of its last completed allreduce, names a silent rank on PEER_HOST.
    check_rank() {
      local r=$1 host=$2 other=$3 limit=$4 f="$work/ranks/rank-$1.txt" line secs
      # Waits until LIMIT + 2 s after the cut for the report.
      while [ ! -f "$f" ] && awk -v a="$cut" -v b="$(date +%s.%N)" -v l="$limit" 'BEGIN { exit !(b - a < l + 2) }'; do
        sleep 0.2
      done
      [ -f "$f" ] || fail "rank $r (on $host) reported no failure within $limit s (+2) of the cut"
      sed "s/^/  /" "$f"
      line=$(head -1 "$f")
      echo "$line" | grep -qE "^rank $r \(host $host\): failed after [0-9.]+ s with (transport failure|timed out): .+" ||
        fail "rank $r: unexpected report: $line"
      # The peer timeout's wording in the negotiation, the transfer timeout's
      # while data moves.
      echo "$line" | grep -qE "rank [0-3] \(host $other\) has not answered|timed out after [0-9.]+ s waiting (for|to send to) rank [0-3] \(host $other\)" ||
        fail "rank $r's error does not name a silent rank on $other"
      secs=$(echo "$line" | sed -E 's/.* failed after ([0-9.]+) s .*/\1/')
      awk -v s="$secs" -v b="$limit" 'BEGIN { exit !(s <= b) }' ||
        fail "rank $r (on $host) failed $secs s after its last allreduce, beyond $limit s"
    }
    if [ "$case_" = partition_cut_off ]; then
      # The ranks on the cut-off host must fail as fast as the others.
      checking=1
      check_rank 2 hvd-h2 hvd-h1 $((transport + 2))
      check_rank 3 hvd-h2 hvd-h1 $((transport + 2))
      echo "PASS: $case_"
      exit 0
    fi
    await_job_end "the partition"
    [ "$rc" -eq 4 ] || fail "hvdrun exited $rc, want 4 (the survivors' code)"
    took_within $((transport + 3)) "hvdrun took $took s after the cut, beyond the transport timeout ($transport s) + 3 s"
    # The launcher's side fails within the transport timeout.
    check_rank 0 hvd-h1 hvd-h2 $((transport + 2))
    check_rank 1 hvd-h1 hvd-h2 $((transport + 2))
    # The cut-off side must end by itself too (reporting through the shared
    # file system); cluster.partition_cut_off holds it to the transport
    # timeout, this case only bounds it at 45 s.
    check_rank 2 hvd-h2 hvd-h1 45
    check_rank 3 hvd-h2 hvd-h1 45
    # Its sessions end once its sshd gives up on the client (ClientAlive
    # 2 s x 3) and its ranks have exited.
    no_leftovers 15
    "$cluster" heal h2
    "$cluster" exec h1 ssh -F "$HVDC_SSH_CONFIG" hvd-h2 true || fail "hvd-h2 unreachable after heal"
    ;;
  host_death|ucx_host_death)
    tflags=(--transport gloo)
    if [ "$case_" = ucx_host_death ]; then
      [ -f "$(dirname "$HVDRUN")/../lib/libhvd_transport_ucx.so" ] || skip "the UCX transport is not built"
      tflags=(--transport ucx)
    fi
    up 2
    transport=5 grace=60
    mkdir -p "$work/ranks"
    # The ranks ignore SIGTERM and the grace period is long: what the
    # survivors report is their own detection.
    timeout -k 5 100 "$cluster" exec h1 "$HVDRUN" "${tflags[@]}" -H hvd-h1:2,hvd-h2:2 --start-timeout 30 \
      --gloo-timeout-seconds $transport --grace-period $grace \
      "$PROBE" loop "$work/ranks" >"$work/job" 2>&1 &
    job=$!
    await_loop_up
    cut=$(date +%s.%N)
    "$cluster" kill-host h2
    echo "hvd-h2's processes killed at $(elapsed) s"
    checking=1
    await_job_end "hvd-h2 died"
    [ "$rc" -ne 0 ] || fail "hvdrun exited 0 with a host dead"
    took_within $((transport + 3)) "hvdrun took $took s after the kill, beyond the transport timeout ($transport s) + 3 s"
    first_says "^hvdrun: rank [23] \(host hvd-h2\) exited with code 255 \(the ssh connection to hvd-h2 was lost after the rank had started" "does not name hvd-h2's lost connection"
    for r in 0 1; do
      f="$work/ranks/rank-$r.txt"
      [ -f "$f" ] || fail "rank $r (on hvd-h1) reported no failure"
      sed "s/^/  /" "$f"
      line=$(head -1 "$f")
      echo "$line" | grep -qE "^rank $r \(host hvd-h1\): failed after [0-9.]+ s with (transport failure|timed out): .*rank [23] \(host hvd-h2" ||
        fail "rank $r's report does not name a rank on hvd-h2: $line"
      secs=$(echo "$line" | sed -E 's/.* failed after ([0-9.]+) s .*/\1/')
      awk -v s="$secs" -v b=$((transport + 2)) 'BEGIN { exit !(s <= b) }' ||
        fail "rank $r failed $secs s after its last allreduce, beyond $((transport + 2)) s"
    done
    no_leftovers 10
    ;;
  decoy_nic)
    up 2 --decoy
    run 60 "$work/topo" "$HVDRUN" -H hvd-h1:2,hvd-h2:2 --start-timeout 20 --network-interface eth0 "$PROBE" topo 2 2
    [ "$rc" -eq 0 ] || fail "hvdrun --network-interface eth0 exited $rc"
    expect_probe_ok "$work/topo" 4
    ;;
  decoy_cidr)
    # One setting for every host, whatever its interfaces are called: the
    # CIDR of the cluster's network.
    up 2 --decoy
    net=$(sed -E 's/\.[0-9]+$/.0/' "$HVDC_DIR/h1/addr")/24
    run 60 "$work/topo" "$HVDRUN" -H hvd-h1:2,hvd-h2:2 --start-timeout 20 --network-interface "$net" "$PROBE" topo 2 2
    [ "$rc" -eq 0 ] || fail "hvdrun --network-interface $net exited $rc"
    expect_probe_ok "$work/topo" 4
    checking=1
    run 60 "$work/bad" "$HVDRUN" -H hvd-h1:2,hvd-h2:2 --start-timeout 20 --network-interface 192.0.2.0/24 "$PROBE" topo 2 2
    [ "$rc" -ne 0 ] || fail "hvdrun --network-interface 192.0.2.0/24 (no such network) succeeded"
    grep -q "no interface of this host has an IPv4 address in 192.0.2.0/24" "$work/bad" ||
      fail "a CIDR no interface is in: the error does not say so"
    ;;
  mpi_decoy)
    # Open MPI alone would pick the decoy bridge (its rules know no podman0):
    # hvdrun hands it the network the hosts are reached in.
    command -v mpirun >/dev/null || skip "no mpirun (Open MPI) on PATH"
    [ -f "$(dirname "$HVDRUN")/../lib/libhvd_transport_mpi.so" ] || skip "the MPI transport is not built"
    up 2 --decoy
    run 90 "$work/topo" "$HVDRUN" -v --transport mpi -H hvd-h1:2,hvd-h2:2 --start-timeout 30 "$PROBE" topo 2 2
    # Skipped only where mpirun's daemons never started a rank (-v logs each
    # start): ranks that started and then hung in MPI's set-up are the bug.
    if [ "$rc" -ne 0 ] && grep -qiE "orted|ORTE|plm_rsh|could not|unable to (start|launch)" "$work/topo" &&
       ! grep -q "probe rank" "$work/topo" && ! grep -qE "hvdrun: rank [0-9]+ started" "$work/topo"; then
      skip "mpirun cannot start its daemons across the cluster's namespaces (hvdrun exited $rc)"
    fi
    [ "$rc" -eq 0 ] || fail "hvdrun --transport mpi with a decoy bridge exited $rc"
    net=$(sed -E 's/\.[0-9]+$/.0/' "$HVDC_DIR/h1/addr")/24
    grep -q "MPI network: $net" "$work/topo" || fail "hvdrun -v did not say which network it gave mpirun"
    # A network is no UCX device name: UCX_NET_DEVICES is left alone, and -v says so.
    grep -q "UCX_NET_DEVICES left unset: the job's network is known only as $net" "$work/topo" ||
      fail "hvdrun -v did not say why it set no UCX_NET_DEVICES"
    expect_probe_ok "$work/topo" 4
    no_leftovers 10
    ;;
  ssh_failures)
    # ssh's own failures (exit 255) are told apart, each with its hint.
    up 2
    checking=1
    run 60 "$work/resolve" "$HVDRUN" -H hvd-h1:1,no-such-host.invalid:1 --start-timeout 10 true
    [ "$rc" -ne 0 ] || fail "a host that does not resolve: hvdrun exited 0"
    grep -q "rank 1 (host no-such-host.invalid) exited with code 255 (ssh cannot resolve the host name 'no-such-host.invalid'" "$work/resolve" ||
      fail "an unresolvable host is not reported as such"
    # A key the hosts do not know.
    ssh-keygen -q -t ed25519 -N '' -f "$work/stranger" >/dev/null
    sed "s|IdentityFile .*|IdentityFile $work/stranger|" "$HVDC_DIR/ssh_config" >"$work/ssh_config"
    HVD_LAUNCHER_SSH_ARGS="-F $work/ssh_config" run 60 "$work/auth" "$HVDRUN" -H hvd-h1:1,hvd-h2:1 --start-timeout 10 true
    [ "$rc" -ne 0 ] || fail "a refused key: hvdrun exited 0"
    grep -q "rank 1 (host hvd-h2) exited with code 255 (ssh to hvd-h2 was refused: key-based login failed" "$work/auth" ||
      fail "a refused key is not reported as such"
    # No sshd on the host (its processes killed, its link up: refused).
    "$cluster" kill-host h2
    run 60 "$work/refused" "$HVDRUN" -H hvd-h1:1,hvd-h2:1 --start-timeout 10 true
    [ "$rc" -ne 0 ] || fail "a host without sshd: hvdrun exited 0"
    grep -q "rank 1 (host hvd-h2) exited with code 255 (ssh: nothing listens on hvd-h2 port 22 (connection refused)" "$work/refused" ||
      fail "a host without sshd is not reported as refusing"
    ;;
  sshd_hung)
    up 4
    stopped_sshd=$(cat "$HVDC_DIR/h3/sshd.pid")
    kill -STOP "$stopped_sshd"
    # The fault is the one meant: the connection is accepted, no banner comes.
    rc=0
    "$cluster" exec h1 ssh -F "$HVDC_SSH_CONFIG" -o ConnectTimeout=2 hvd-h3 true >"$work/probe_ssh" 2>&1 || rc=$?
    [ "$rc" -eq 255 ] && grep -q "banner exchange" "$work/probe_ssh" ||
      fail "ssh to hvd-h3 with its sshd stopped: rc $rc, $(cat "$work/probe_ssh"), want a banner timeout"
    checking=1
    start=10 grace=3
    t1=$(date +%s.%N)
    run 60 "$work/job" "$HVDRUN" -H hvd-h1,hvd-h2,hvd-h3,hvd-h4 --start-timeout $start --grace-period $grace \
      "$PROBE" topo 1 4
    took=$(awk -v a="$t1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    echo "hvdrun exited $rc after $took s"
    [ "$rc" -ne 0 ] || fail "hvdrun exited 0 with hvd-h3's sshd stopped"
    took_within $((start + 2)) "hvdrun took $took s, beyond its start timeout ($start s) + 2 s"
    # hvdrun's first message (what stopped the job) names hvd-h3's rank and
    # says ssh did not answer there.
    first_says "^hvdrun: rank 2 \(host hvd-h3\) exited with code 255 \(ssh: hvd-h3 accepted the connection but its sshd did not answer .*: sshd hung or overloaded there\?; try 'ssh hvd-h3 true'\)$" "does not say that sshd on hvd-h3 did not answer"
    if grep -q "did not connect to the rendezvous store" "$work/job"; then
      fail "hvdrun blames the rendezvous store for a host whose sshd does not answer"
    fi
    no_leftovers 10
    # Resumed, sshd takes the connection queued while it was stopped, whose
    # client is gone: nothing of the job may start there.
    kill -CONT "$stopped_sshd"
    stopped_sshd=""
    sleep 1
    no_leftovers 10
    "$cluster" exec h1 ssh -F "$HVDC_SSH_CONFIG" hvd-h3 true || fail "hvd-h3 unreachable once its sshd resumed"
    ;;
  ssh_auth_hung)
    up 3
    # hvd-h3's login hangs during authentication: its sshd asks a command for
    # the authorized keys (and none from the file), and that command does not
    # answer while $authdir/hang exists. sshd runs such a command only from a
    # root-owned path with no group- or world-writable directory on it (not
    # /tmp), so it lives on a tmpfs mounted in hvd-h3's own mount namespace
    # over a root-owned directory (hidden there only; gone with the host).
    # sshd re-reads its configuration on SIGHUP (it re-executes itself: same
    # pid).
    authdir=""
    for d in /srv /media /mnt /opt; do
      if [ -d "$d" ] && [ "$(stat -c '%u %a' "$d")" = "0 755" ]; then authdir=$d; break; fi
    done
    [ -n "$authdir" ] || skip "no root-owned directory of mode 755 to mount the key command's tmpfs on"
    sshd_bin=$(command -v sshd || echo /usr/sbin/sshd)
    "$cluster" exec h3 mount -t tmpfs -o mode=755 hvd-auth-hang "$authdir"
    "$cluster" exec h3 sh -c "cat >$authdir/keys && chmod 755 $authdir/keys && touch $authdir/hang" <<EOF
#!/bin/sh
# AuthorizedKeysCommand of hvd-h3: hangs the login until $authdir/hang goes
# (120 s at most), then offers no key.
i=0
while [ -e $authdir/hang ] && [ \$i -lt 1200 ]; do sleep 0.1; i=\$((i + 1)); done
EOF
    sed -i -e "s|^AuthorizedKeysFile .*|AuthorizedKeysFile none\nAuthorizedKeysCommand $authdir/keys\nAuthorizedKeysCommandUser root|" \
      "$HVDC_DIR/h3/sshd_config"
    "$cluster" exec h3 "$sshd_bin" -t -f "$HVDC_DIR/h3/sshd_config" || fail "sshd rejects the hanging configuration"
    kill -HUP "$(cat "$HVDC_DIR/h3/sshd.pid")"
    # The fault is the one meant: sshd's banner comes, the key is offered,
    # and then nothing (ssh -v, stopped after 4 s; refused while sshd
    # restarts).
    for _ in $(seq 1 25); do
      rc=0
      timeout -k 2 4 "$cluster" exec h1 ssh -v -F "$HVDC_SSH_CONFIG" -o ConnectTimeout=2 hvd-h3 true \
        >"$work/probe_ssh" 2>&1 </dev/null || rc=$?
      grep -q "Connection refused" "$work/probe_ssh" || break
      sleep 0.2
    done
    if [ "$rc" -ne 124 ] || ! grep -q "Remote protocol version" "$work/probe_ssh" ||
       ! grep -q "Offering public key" "$work/probe_ssh" || grep -q "Authenticated to" "$work/probe_ssh"; then
      tail -5 "$work/probe_ssh"
      fail "ssh -v to hvd-h3: rc $rc; want it past the banner, offering its key, and then hanging"
    fi
    echo "ssh -v to hvd-h3: past the banner, key offered, then no answer (stopped after 4 s)"
    checking=1
    start=10 grace=3
    t1=$(date +%s.%N)
    run 60 "$work/job" "$HVDRUN" -H hvd-h1,hvd-h2,hvd-h3 --start-timeout $start --grace-period $grace \
      "$PROBE" topo 1 3
    took=$(awk -v a="$t1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    echo "hvdrun exited $rc after $took s"
    [ "$rc" -ne 0 ] || fail "hvdrun exited 0 with hvd-h3's login hanging"
    took_within $((start + 2)) "hvdrun took $took s, beyond its start timeout ($start s) + 2 s"
    # hvdrun's first message (what stopped the job) names hvd-h3's rank and
    # says the login there did not complete.
    first_says "^hvdrun: start timeout: rank 2 \(host hvd-h3\): ssh to host hvd-h3 did not complete the login \(authentication\) within $start s: .*try 'ssh -v hvd-h3 true'$" "does not say that the login to hvd-h3 did not complete"
    if grep -qi "rendezvous store" "$work/job"; then
      fail "something blames the rendezvous store for a host whose login hangs"
    fi
    if grep -q "remote-started" "$work/job"; then fail "the remote script's start marker shows"; fi
    # Released, the hanging lookups end, and their sshd processes with them
    # (their clients are gone): nothing may be left on any host. Not at
    # once: sshd answers a login attempt that did not succeed no sooner than
    # a delay that it doubles until it exceeds the time the attempt took, so
    # the processes of an attempt that hung E s stay up to about E s more
    # (here E is about 16 s for the probe's, 11 s for hvdrun's).
    "$cluster" exec h3 rm -f "$authdir/hang"
    no_leftovers 30
    ;;
  bind_remote)
    all=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
    # The CPUs of a Cpus_allowed_list, one a line ("0-2,5" -> 0 1 2 5).
    cpus_of() {
      local part
      for part in $(echo "$1" | tr ',' ' '); do
        case "$part" in *-*) seq "${part%-*}" "${part#*-}" ;; *) echo "$part" ;; esac
      done
    }
    [ "$(cpus_of "$all" | wc -l)" -ge 2 ] || skip "fewer than 2 usable CPUs ($all): nothing to bind apart"
    up 2
    # The rank: "AFF <rank> <host it runs in> <Cpus_allowed_list>".
    cat >"$work/aff.sh" <<'EOF'
echo "AFF $HVD_RANK $(uname -n) $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
EOF
    aff() { sed -n "s/^AFF $2 $3 //p" "$1"; }   # aff OUT RANK HOST: its list
    checking=1
    run 60 "$work/auto" "$HVDRUN" -v -H hvd-h1:2,hvd-h2:2 --start-timeout 30 sh "$work/aff.sh"
    [ "$rc" -eq 0 ] || fail "hvdrun --bind-to auto exited $rc"
    for pair in "0 1 hvd-h1" "2 3 hvd-h2"; do
      set -- $pair
      a=$(aff "$work/auto" "$1" "$3") b=$(aff "$work/auto" "$2" "$3")
      [ -n "$a" ] && [ -n "$b" ] || fail "ranks $1 and $2 did not both report from $3"
      # Disjoint, and each within the machine's.
      shared=$(comm -12 <(cpus_of "$a" | sort) <(cpus_of "$b" | sort) | tr '\n' ' ')
      [ -z "$shared" ] || fail "--bind-to auto: ranks $1 ($a) and $2 ($b) on $3 share CPUs $shared"
      outside=$(comm -23 <(cpus_of "$a,$b" | sort -u) <(cpus_of "$all" | sort) | tr '\n' ' ')
      [ -z "$outside" ] || fail "--bind-to auto: CPUs $outside on $3 are not usable ($all)"
      echo "--bind-to auto: $3: rank $1 on $a, rank $2 on $b"
    done
    # -v: the remote ranks' CPUs, as the local ones'.
    for r in 2 3; do
      grep -qx "hvdrun: rank $r (host hvd-h2): CPUs $(aff "$work/auto" $r hvd-h2)" "$work/auto" ||
        fail "-v does not show rank $r's CPUs on hvd-h2"
    done
    run 60 "$work/none" "$HVDRUN" -H hvd-h1:2,hvd-h2:2 --start-timeout 30 --bind-to none sh "$work/aff.sh"
    [ "$rc" -eq 0 ] || fail "hvdrun --bind-to none exited $rc"
    for rh in "0 hvd-h1" "1 hvd-h1" "2 hvd-h2" "3 hvd-h2"; do
      set -- $rh
      [ "$(aff "$work/none" "$1" "$2")" = "$all" ] ||
        fail "--bind-to none: rank $1 on $2 has CPUs '$(aff "$work/none" "$1" "$2")', want all ($all)"
    done
    echo "--bind-to none: every rank on $all"
    # A remote host with fewer CPUs than ranks, as its sessions see it:
    # hvd-h2's sshd confined to one CPU (its sessions inherit it). auto binds
    # there by what that host has: nothing fits, so its ranks run unbound
    # (on that one CPU), -v says so once, and the job goes on.
    if command -v taskset >/dev/null; then
      one=$(cpus_of "$all" | tail -1)
      taskset -p -c "$one" "$(cat "$HVDC_DIR/h2/sshd.pid")" >/dev/null
      run 60 "$work/one" "$HVDRUN" -v -H hvd-h1:2,hvd-h2:2 --start-timeout 30 sh "$work/aff.sh"
      [ "$rc" -eq 0 ] || fail "hvdrun with hvd-h2 on one CPU exited $rc"
      for r in 2 3; do
        [ "$(aff "$work/one" $r hvd-h2)" = "$one" ] ||
          fail "rank $r on hvd-h2 (one CPU: $one) has CPUs '$(aff "$work/one" $r hvd-h2)'"
      done
      n=$(count "$work/one" "^hvdrun: --bind-to auto: 2 local rank\(s\) on host hvd-h2 do not fit its 1 usable CPU\(s\) \($one\): not bound$")
      [ "$n" -eq 1 ] || fail "the note that hvd-h2's ranks do not fit its one CPU came $n times, want 1"
      a=$(aff "$work/one" 0 hvd-h1) b=$(aff "$work/one" 1 hvd-h1)
      [ -z "$(comm -12 <(cpus_of "$a" | sort) <(cpus_of "$b" | sort))" ] ||
        fail "hvd-h1's ranks ($a, $b) share CPUs while hvd-h2 has one"
      echo "hvd-h2 on CPU $one: its ranks unbound there, said once; hvd-h1's on $a and $b"
    fi
    no_leftovers 10
    ;;
  ssh_lost)
    up 2
    grace=3
    mkdir -p "$work/ranks"
    # Each rank ignores SIGTERM (cluster_probe loop does, and so does the
    # shell around it) and, once the loop has failed, sleeps on: the rank's
    # processes on hvd-h2 end only if its session's watcher escalates to
    # SIGKILL after the grace period (the loop itself fails as soon as the
    # ranks on hvd-h1 are killed).
    timeout -k 5 100 "$cluster" exec h1 "$HVDRUN" -H hvd-h1:2,hvd-h2:2 --start-timeout 30 --grace-period $grace \
      sh -c 'trap "" TERM; "$0" loop "$1"; sleep 60' "$PROBE" "$work/ranks" >"$work/job" 2>&1 &
    job=$!
    await_loop_up
    listener=$(cat "$HVDC_DIR/h2/sshd.pid")
    sessions=$(pgrep -P "$listener" | tr '\n' ' ')
    [ "$(echo $sessions | wc -w)" -eq 2 ] || fail "hvd-h2's sshd has sessions '$sessions', want 2 (one a rank)"
    # Every process of the job on hvd-h2: sessions, their scripts and
    # watchers, the ranks.
    job_h2=$(ip netns pids "hvdc-$HVDC_ID-h2" | grep -vxF -e "$listener" -e "$(cat "$HVDC_DIR/h2/anchor.pid")" | tr '\n' ' ')
    n=$(for p in $job_h2; do cat "/proc/$p/comm" 2>/dev/null; done | grep -cx cluster_probe || true)
    [ "$n" -eq 2 ] || fail "$n ranks (cluster_probe) on hvd-h2, want 2"
    checking=1
    cut=$(date +%s.%N)
    # shellcheck disable=SC2086
    kill -KILL $sessions
    echo "hvd-h2's ssh sessions ($sessions) killed at $(elapsed) s; the job's processes there: $job_h2"
    await_job_end "the ssh sessions were cut"
    [ "$rc" -eq 255 ] || fail "hvdrun exited $rc, want 255 (the lost ssh's code)"
    took_within $((grace + 3)) "hvdrun took $took s after the cut, beyond the grace period ($grace s) + 3 s"
    first_says "^hvdrun: rank [23] \(host hvd-h2\) exited with code 255 \(the ssh connection to hvd-h2 was lost after the rank had started" "does not say the ssh connection to hvd-h2 was lost mid-job"
    if grep -q "works without a password" "$work/job"; then
      fail "a connection lost mid-job got the hint for a login that fails"
    fi
    # The job's processes on hvd-h2 outlive their sessions by the grace
    # period at most.
    for p in $job_h2; do
      while running "$p" && awk -v a="$cut" -v b="$(date +%s.%N)" -v l=$((grace + 2)) 'BEGIN { exit !(b - a < l) }'; do
        sleep 0.2
      done
      ! running "$p" || fail "process $p ($(tr '\0' ' ' </proc/$p/cmdline | cut -c1-60)) on hvd-h2 still runs $((grace + 2)) s after its ssh session was cut"
    done
    no_leftovers 10
    "$cluster" exec h1 ssh -F "$HVDC_SSH_CONFIG" hvd-h2 true || fail "hvd-h2 takes no ssh login after the cut"
    ;;
  decoy_default)
    up 2 --decoy
    checking=1
    run 60 "$work/topo" "$HVDRUN" -v -H hvd-h1:2,hvd-h2:2 --start-timeout 8 "$PROBE" topo 2 2
    if [ "$rc" -ne 0 ]; then
      grep "store interface\|rendezvous store: serving" "$work/topo" || true
      fail "hvdrun exited $rc: with a podman0 bridge in every host it serves the store on an address that only its own host has"
    fi
    expect_probe_ok "$work/topo" 4
    ;;
  script)
    # Refusals and usage errors first: nothing may be made.
    rc=0; "$cluster" up 0 2>"$work/err" || rc=$?
    [ $rc -eq 2 ] || fail "up 0 exited $rc, want 2"
    rc=0; "$cluster" up 2 --rate fast 2>"$work/err" || rc=$?
    [ $rc -eq 2 ] || fail "up --rate fast exited $rc, want 2"
    rc=0; "$cluster" exec h1 true 2>"$work/err" || rc=$?
    [ $rc -eq 1 ] && grep -q "is it up" "$work/err" || fail "exec on a cluster that is down: rc $rc, $(cat "$work/err")"
    if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
      rc=0; setpriv --reuid=65534 --regid=65534 --clear-groups "$cluster" up 1 2>"$work/err" || rc=$?
      [ $rc -eq 77 ] && grep -q "needs root" "$work/err" || fail "up as nobody: rc $rc, $(cat "$work/err")"
    fi
    rc=0; "$cluster" up 2 --delay 2ms >"$work/err" 2>&1 || rc=$?
    if [ $rc -eq 0 ]; then
      "$cluster" exec h1 tc qdisc show dev eth0 | grep -q netem || fail "--delay: no netem qdisc on eth0"
      "$cluster" down
    else
      [ $rc -eq 77 ] || fail "up --delay exited $rc: $(cat "$work/err")"
      grep -q "netem" "$work/err" || fail "--delay refused without naming netem: $(cat "$work/err")"
      [ "$(wc -l <"$work/err")" -eq 1 ] || fail "the refusal is not one line: $(cat "$work/err")"
      [ ! -e "$HVDC_DIR" ] || fail "a refused up left $HVDC_DIR"
    fi
    [ -z "$(ip netns list | grep "^hvdc-$HVDC_ID-" || true)" ] || fail "a refused up left namespaces"
    echo "refusals ok after $(elapsed) s"

    up 2 --rate 10mbit --decoy
    "$cluster" status
    rc=0; "$cluster" up 1 2>"$work/err" || rc=$?
    [ $rc -eq 1 ] && grep -q "already up" "$work/err" || fail "a second up: rc $rc, $(cat "$work/err")"
    [ "$("$cluster" exec h1 hostname)" = hvd-h1 ] || fail "h1's host name"
    [ "$("$cluster" exec hvd-h2 hostname)" = hvd-h2 ] || fail "h2's host name"
    [ "$("$cluster" exec 2 readlink /proc/self/ns/ipc)" != "$("$cluster" exec h1 readlink /proc/self/ns/ipc)" ] ||
      fail "h1 and h2 share an IPC namespace"
    [ "$("$cluster" exec h1 readlink /proc/self/ns/pid)" = "$(readlink /proc/self/ns/pid)" ] ||
      fail "the PID namespace is not shared"
    "$cluster" exec h1 getent hosts hvd-h2 | grep -q "^$(cat "$HVDC_DIR/h2/addr") " || fail "h1 cannot resolve hvd-h2"
    # exec: exit code and working directory pass through.
    rc=0; "$cluster" exec h1 sh -c 'exit 7' || rc=$?
    [ $rc -eq 7 ] || fail "exec's exit code $rc, want 7"
    [ "$(cd "$work" && "$cluster" exec h2 pwd)" = "$work" ] || fail "exec does not keep the working directory"
    # /dev/shm per host.
    "$cluster" exec h1 touch /dev/shm/hvd-cluster-$HVDC_ID-mark
    "$cluster" exec h1 test -e /dev/shm/hvd-cluster-$HVDC_ID-mark || fail "h1 lost its /dev/shm file"
    ! "$cluster" exec h2 test -e /dev/shm/hvd-cluster-$HVDC_ID-mark || fail "h2 sees h1's /dev/shm"
    [ ! -e /dev/shm/hvd-cluster-$HVDC_ID-mark ] || fail "the machine sees h1's /dev/shm"
    # The decoy comes first in h1's interface list, eth0 after it.
    ifs=$("$cluster" exec h1 ip -o -4 addr show | awk '{ print $2 }' | tr '\n' ' ')
    [ "$ifs" = "lo podman0 eth0 " ] || fail "h1's interfaces: $ifs, want lo podman0 eth0"
    # The rate: 2.5 MB at 10 mbit/s takes at least 2 s (2.4 s with slack).
    t1=$(date +%s.%N)
    head -c 2500000 /dev/zero | "$cluster" exec h1 ssh -F "$HVDC_SSH_CONFIG" hvd-h2 'cat >/dev/null'
    secs=$(awk -v a="$t1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
    echo "2.5 MB from h1 to h2 at 10mbit: $secs s"
    awk -v s="$secs" 'BEGIN { exit !(s >= 1.6) }' || fail "the rate limit does not hold ($secs s)"
    # partition / heal.
    "$cluster" partition h2
    "$cluster" status | grep -q "^hvd-h2 .*link partitioned" || fail "status does not show the partition"
    ! "$cluster" exec h1 ssh -F "$HVDC_SSH_CONFIG" -o ConnectTimeout=2 hvd-h2 true 2>/dev/null || fail "h2 reachable while partitioned"
    "$cluster" exec h2 ip -o link show eth0 | grep -q "state UP" || fail "partition took h2's link down"
    "$cluster" heal h2
    "$cluster" exec h1 ssh -F "$HVDC_SSH_CONFIG" hvd-h2 true || fail "h2 unreachable after heal"
    # kill-host: everything of h2 but its anchor goes, h1 stays.
    "$cluster" exec h2 sleep 300 &
    sleeper=$!
    sleep 0.3
    "$cluster" kill-host h2
    wait $sleeper 2>/dev/null || true
    [ "$(ip netns pids "hvdc-$HVDC_ID-h2")" = "$(cat "$HVDC_DIR/h2/anchor.pid")" ] || fail "kill-host left processes on h2"
    ! "$cluster" exec h1 ssh -F "$HVDC_SSH_CONFIG" -o ConnectTimeout=2 hvd-h2 true 2>/dev/null || fail "h2's sshd survived kill-host"
    "$cluster" exec h1 ssh -F "$HVDC_SSH_CONFIG" hvd-h1 true || fail "kill-host h2 hurt h1"
    # down: nothing left, twice.
    anchors="$(cat "$HVDC_DIR"/h*/anchor.pid "$HVDC_DIR"/h1/sshd.pid | tr '\n' ' ')"
    "$cluster" down
    "$cluster" down || fail "a second down failed"
    [ -z "$(ip netns list | grep "^hvdc-$HVDC_ID-" || true)" ] || fail "namespaces left after down"
    for p in $anchors; do ! running "$p" || fail "process $p left after down"; done
    ! pgrep -f "hvd-cluster-$HVDC_ID" >/dev/null || fail "processes of the cluster left: $(pgrep -af "hvd-cluster-$HVDC_ID")"
    [ ! -e "$HVDC_DIR" ] || fail "$HVDC_DIR left after down"
    "$cluster" status | grep -q ": down$" || fail "status after down: $("$cluster" status)"
    ;;
  *) fail "unknown case '$case_'" ;;
esac
echo "PASS: $case_"
