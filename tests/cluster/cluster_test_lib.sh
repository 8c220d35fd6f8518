# Shared by the cluster test scripts (test_cluster.sh, test_elastic_cluster.sh,
# test_k8s_cluster.sh, test_repro_cluster.sh, test_fault_cluster.sh):
# sourced once they have set cluster (cluster.sh's path), HVDC_ID, HVDC_DIR,
# work (their scratch folder) and T0 (their start time), and defined fail().

elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
skip() { echo "SKIP: $*"; exit 77; }

# The job's programs from the environment: HVDRUN (hvdrun) and
# HVD_LIBRARY_PATH (libhvd, the library every worker loads); fails naming
# the one missing.
require_job_env() {
  [ -n "${HVDRUN:-}" ] && [ -x "$HVDRUN" ] ||
    fail "HVDRUN (hvdrun) is not set or not executable: '${HVDRUN:-}'"
  [ -n "${HVD_LIBRARY_PATH:-}" ] && [ -e "$HVD_LIBRARY_PATH" ] ||
    fail "HVD_LIBRARY_PATH (libhvd) is not set or missing: '${HVD_LIBRARY_PATH:-}'"
}

# The cluster down, and no namespace of it left; prints what went wrong and
# returns 1 then. Nothing to do when not root (nothing was made).
cluster_down_checked() {
  [ "$(id -u)" -eq 0 ] || return 0
  local rc=0
  "$cluster" down || { echo "FAIL: cluster.sh down failed"; rc=1; }
  if ip netns list 2>/dev/null | grep -q "^hvdc-$HVDC_ID-"; then
    echo "FAIL: namespaces left after down: $(ip netns list | grep "^hvdc-$HVDC_ID-" | tr '\n' ' ')"
    rc=1
  fi
  return $rc
}

# The end of a test's EXIT trap: the cluster down (checked), the scratch
# folder gone, the time taken; exits RC (1 where the cluster did not come down).
end_test() {
  local rc=$1
  cluster_down_checked || rc=1
  rm -rf "$work"
  echo "($(elapsed) s in all)"
  exit "$rc"
}

# Clusters of earlier runs of the cluster tests that were killed outright (no
# trap ran): their ids name pids that are gone.
reap_stale_clusters() {
  local stale
  for stale in $(ip netns list 2>/dev/null | sed -nE 's/^hvdc-t([0-9]+)-.*/\1/p' | sort -u); do
    kill -0 "$stale" 2>/dev/null || HVDC_ID="t$stale" HVDC_DIR="/tmp/hvd-cluster-t$stale" "$cluster" down || true
  done
}

up() {   # up N [options]: brings the cluster up or skips with its reason
  local rc=0
  "$cluster" up "$@" >"$work/up.log" 2>&1 || rc=$?
  cat "$work/up.log"
  [ $rc -ne 77 ] || skip "$(tail -1 "$work/up.log")"
  [ $rc -eq 0 ] || fail "cluster.sh up $* exited $rc"
  eval "$("$cluster" env)"
  export HVD_LAUNCHER_SSH_ARGS OMPI_MCA_plm_rsh_args
  echo "cluster up after $(elapsed) s"
}

# Nothing of the job's may be left: every host holds only its anchor and its
# sshd (at most LIMIT seconds to get there: sessions of a cut-off host end
# once sshd gives up on the client).
no_leftovers() {
  local limit=${1:-10} i deadline left p
  deadline=$(( $(date +%s) + limit ))
  for i in $(seq 1 "$(cat "$HVDC_DIR/size")"); do
    while :; do
      local keep="$(cat "$HVDC_DIR/h$i/anchor.pid") $(cat "$HVDC_DIR/h$i/sshd.pid")"
      left=""
      for p in $(ip netns pids "hvdc-$HVDC_ID-h$i"); do
        # A process may exit between the listing and the read: not left.
        local cmd
        cmd=$( { tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null | cut -c1-60) || continue
        [ -d "/proc/$p" ] || continue
        case " $keep " in *" $p "*) ;; *) left="$left $p($cmd)" ;; esac
      done
      [ -n "$left" ] || break
      [ "$(date +%s)" -lt "$deadline" ] || fail "processes left on hvd-h$i:$left"
      sleep 0.2
    done
  done
  echo "no process of the job left on any host"
}
