#!/usr/bin/env bash
# test_hvdrun_args.sh HVDRUN: the mpirun command line hvdrun --transport mpi
# builds, checked word by word against a stand-in mpirun that records its
# arguments and environment. Needs no MPI.
set -u
hvdrun=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/args "$tmp"/env "$tmp"/err; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done; exit 1; }

cat >"$tmp/mpirun" <<'EOS'
#!/bin/sh
for a in "$@"; do printf '%s\n' "$a"; done >"$FAKE_DIR/args"
env >"$FAKE_DIR/env"
exit "${FAKE_RC:-0}"
EOS
chmod +x "$tmp/mpirun"
root=""
[ "$(id -u)" -eq 0 ] && root="--allow-run-as-root"

# run EXPECTED_ARGS(one string, words separated by |) HVDRUN_ARGS...
run() {
  local want=$1; shift
  rm -f "$tmp/args" "$tmp/env"
  env -i PATH="$PATH" HOME="${HOME:-/}" FAKE_DIR="$tmp" HVD_LAUNCHER_MPIRUN="$tmp/mpirun" \
      ${EXTRA_ENV:-} "$hvdrun" "$@" 2>"$tmp/err"
  RC=$?
  [ "$RC" -eq "${WANT_RC:-0}" ] || fail "hvdrun $* exited with $RC, want ${WANT_RC:-0}"
  [ -n "$want" ] || return 0
  local got
  got=$(paste -sd'|' "$tmp/args")
  [ "$got" = "$want" ] || fail "hvdrun $*
  mpirun got:  $got
  wanted:      $want"
}
w() { local IFS='|'; echo "$*"; }  # joins words with |
# With a start timeout (60 s by default) the ranks report their start to a
# store hvdrun serves: its address and secret reach them by name, from
# mpirun's environment.
rep=(-x HVD_START_REPORT_ADDR -x HVD_START_REPORT_SECRET)

# One rank: never oversubscribed; HVD_TRANSPORT=mpi for the ranks.
run "$(w $root -np 1 --bind-to none -x HVD_TRANSPORT=mpi "${rep[@]}" prog a 'b c')" --transport mpi -np 1 prog a 'b c'
grep -qE "^HVD_START_REPORT_ADDR=127\.0\.0\.1:[0-9]+$" "$tmp/env" || fail "no start-report address for the ranks"
grep -qE "^HVD_START_REPORT_SECRET=[0-9a-f]{64}$" "$tmp/env" || fail "no start-report secret for the ranks"
# More ranks than any machine has cores: --oversubscribe.
run "$(w $root -np 4096 --oversubscribe --bind-to none -x HVD_TRANSPORT=mpi "${rep[@]}" prog)" --transport mpi -np 4096 prog
# A host list: -H with the slots, no --oversubscribe; -np from the slots.
# (Local names: other hosts would need this machine's default address for the
# start-report store.)
run "$(w $root -np 5 -H localhost:2,127.0.0.1:3 --bind-to none -x HVD_TRANSPORT=mpi "${rep[@]}" prog)" \
    --transport mpi -H localhost:2,127.0.0.1:3 prog
# Options and HVD_* variables become -x (options win over -x, -x over the
# environment); the launcher's own and another job's variables do not pass.
EXTRA_ENV="HVD_LOG_LEVEL=debug HVD_FUSION_THRESHOLD=1 HVD_RANK=7 HVD_SECRET=s RANK=7 HVD_LAUNCHER_GRACE=1 HVD_START_REPORT_ADDR=stale:1" \
run "$(w $root -np 2 --bind-to none --tag-output --mca plm_rsh_args '-p 2222 -i /k' -x HVD_LOG_LEVEL \
        -x HVD_FUSION_THRESHOLD=1048576 -x A=1 -x HVD_TRANSPORT=mpi -x HVD_CYCLE_TIME=3 \
        -x HVD_START_TIMEOUT=9 "${rep[@]}" prog)" \
    --transport mpi -np 2 -x A=1 -x HVD_FUSION_THRESHOLD=5 --fusion-threshold-mb 1 --cycle-time-ms 3 \
    --start-timeout 9 --tag-output -p 2222 -i /k prog
grep -q "^HVD_RANK=\|^RANK=\|^HVD_SECRET=" "$tmp/env" && fail "another job's variables reached mpirun's environment"
grep -q "^HVD_LOG_LEVEL=debug$" "$tmp/env" || fail "HVD_LOG_LEVEL did not reach mpirun's environment"
grep -q "^HVD_START_REPORT_ADDR=stale:1$" "$tmp/env" && fail "an inherited start-report address reached mpirun"
# --start-timeout 0: no HVD_START_TIMEOUT at all, and no start reports.
EXTRA_ENV="HVD_START_TIMEOUT=30 HVD_START_REPORT_ADDR=stale:1" run "$(w $root -np 1 --bind-to none -x HVD_TRANSPORT=mpi prog)" \
    --transport mpi -np 1 --start-timeout 0 prog
grep -q "^HVD_START_TIMEOUT=" "$tmp/env" && fail "HVD_START_TIMEOUT reached mpirun with --start-timeout 0"
grep -q "^HVD_START_REPORT" "$tmp/env" && fail "start-report variables reached mpirun with --start-timeout 0"
# --bind-to core (or HVD_BIND_TO=core) asks mpirun for its core binding;
# none and auto (the default) keep --bind-to none.
run "$(w $root -np 2 --bind-to core -x HVD_TRANSPORT=mpi "${rep[@]}" prog)" --transport mpi -np 2 --bind-to core prog
EXTRA_ENV="HVD_BIND_TO=core" run "$(w $root -np 2 --bind-to core -x HVD_BIND_TO -x HVD_TRANSPORT=mpi "${rep[@]}" prog)" \
    --transport mpi -np 2 prog
run "$(w $root -np 2 --bind-to none -x HVD_TRANSPORT=mpi "${rep[@]}" prog)" --transport mpi -np 2 --bind-to auto prog
# --network-interface NAME: Open MPI's TCP paths and, for its UCX pml,
# UCX_NET_DEVICES (not on a host with RDMA devices, which it would hide from
# UCX); a UCX_NET_DEVICES of the user's wins and is passed by name.
ucx=(-x UCX_NET_DEVICES=lo)
[ -n "$(ls /sys/class/infiniband 2>/dev/null)" ] && ucx=()
net=(--mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
run "$(w $root -np 1 --bind-to none "${net[@]}" -x HVD_TRANSPORT=mpi -x HVD_NETWORK_INTERFACE=lo "${ucx[@]}" "${rep[@]}" prog)" \
    --transport mpi -np 1 --network-interface lo prog
[ ${#ucx[@]} -eq 0 ] || EXTRA_ENV="UCX_NET_DEVICES=mlx5_0:1" \
  run "$(w $root -np 1 --bind-to none "${net[@]}" -x HVD_TRANSPORT=mpi -x HVD_NETWORK_INTERFACE=lo -x UCX_NET_DEVICES "${rep[@]}" prog)" \
    --transport mpi -np 1 --network-interface lo prog
run "" --transport mpi -np 1 -v --network-interface 127.0.0.0/8 prog
grep -q "^hvdrun: UCX_NET_DEVICES left unset: the job's network is known only as 127.0.0.0/8" "$tmp/err" ||
  fail "-v does not say why a CIDR gives no UCX_NET_DEVICES"
grep -q "UCX_NET_DEVICES" "$tmp/args" && fail "a CIDR became UCX_NET_DEVICES"
# mpirun's exit status is hvdrun's (supervised, and replaced by mpirun).
EXTRA_ENV="FAKE_RC=5" WANT_RC=5 run "" --transport mpi -np 1 prog
EXTRA_ENV="FAKE_RC=6" WANT_RC=6 run "" --transport mpi -np 1 --start-timeout 0 prog
# torchrun-style options cannot be delegated: usage error.
WANT_RC=2 run "" --transport mpi --nproc-per-node 2 prog
grep -q "^hvdrun: error: --transport mpi cannot be combined with torchrun-style" "$tmp/err" || fail "no usage error text"
[ -f "$tmp/args" ] && fail "mpirun ran despite the usage error"
# No mpirun: exit 127 and say what is missing (supervised, and replaced by mpirun).
for st in 60 0; do
  rm -f "$tmp/args"
  env -i PATH=/nonexistent HVD_LAUNCHER_MPIRUN=/nonexistent/mpirun "$hvdrun" --transport mpi -np 1 \
      --start-timeout $st prog 2>"$tmp/err"
  rc=$?
  [ "$rc" -eq 127 ] || fail "missing mpirun (--start-timeout $st): exit $rc, want 127"
  grep -q "cannot execute '/nonexistent/mpirun'" "$tmp/err" || fail "missing mpirun: no clear message"
done
echo PASS
