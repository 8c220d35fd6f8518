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

# One rank: never oversubscribed; HVD_TRANSPORT=mpi for the ranks.
run "$(w $root -np 1 --bind-to none -x HVD_TRANSPORT=mpi prog a 'b c')" --transport mpi -np 1 prog a 'b c'
# More ranks than any machine has cores: --oversubscribe.
run "$(w $root -np 4096 --oversubscribe --bind-to none -x HVD_TRANSPORT=mpi prog)" --transport mpi -np 4096 prog
# A host list: -H with the slots, no --oversubscribe; -np from the slots.
run "$(w $root -np 5 -H a:2,b:3 --bind-to none -x HVD_TRANSPORT=mpi prog)" --transport mpi -H a:2,b:3 prog
# Options and HVD_* variables become -x (options win over -x, -x over the
# environment); the launcher's own and another job's variables do not pass.
EXTRA_ENV="HVD_LOG_LEVEL=debug HVD_FUSION_THRESHOLD=1 HVD_RANK=7 HVD_SECRET=s RANK=7 HVD_LAUNCHER_GRACE=1" \
run "$(w $root -np 2 --bind-to none --tag-output --mca plm_rsh_args '-p 2222 -i /k' -x HVD_LOG_LEVEL \
        -x HVD_FUSION_THRESHOLD=1048576 -x A=1 -x HVD_TRANSPORT=mpi -x HVD_CYCLE_TIME=3 \
        -x HVD_START_TIMEOUT=9 prog)" \
    --transport mpi -np 2 -x A=1 -x HVD_FUSION_THRESHOLD=5 --fusion-threshold-mb 1 --cycle-time-ms 3 \
    --start-timeout 9 --tag-output -p 2222 -i /k prog
grep -q "^HVD_RANK=\|^RANK=\|^HVD_SECRET=" "$tmp/env" && fail "another job's variables reached mpirun's environment"
grep -q "^HVD_LOG_LEVEL=debug$" "$tmp/env" || fail "HVD_LOG_LEVEL did not reach mpirun's environment"
# --start-timeout 0: no HVD_START_TIMEOUT at all.
EXTRA_ENV="HVD_START_TIMEOUT=30" run "$(w $root -np 1 --bind-to none -x HVD_TRANSPORT=mpi prog)" \
    --transport mpi -np 1 --start-timeout 0 prog
grep -q "^HVD_START_TIMEOUT=" "$tmp/env" && fail "HVD_START_TIMEOUT reached mpirun with --start-timeout 0"
# mpirun's exit status is hvdrun's.
EXTRA_ENV="FAKE_RC=5" WANT_RC=5 run "" --transport mpi -np 1 prog
# torchrun-style options cannot be delegated: usage error.
WANT_RC=2 run "" --transport mpi --nproc-per-node 2 prog
grep -q "^hvdrun: error: --transport mpi cannot be combined with torchrun-style" "$tmp/err" || fail "no usage error text"
[ -f "$tmp/args" ] && fail "mpirun ran despite the usage error"
# No mpirun: exit 127 and say what is missing.
rm -f "$tmp/args"
env -i PATH=/nonexistent HVD_LAUNCHER_MPIRUN=/nonexistent/mpirun "$hvdrun" --transport mpi -np 1 prog 2>"$tmp/err"
rc=$?
[ "$rc" -eq 127 ] || fail "missing mpirun: exit $rc, want 127"
grep -q "cannot execute '/nonexistent/mpirun'" "$tmp/err" || fail "missing mpirun: no clear message"
echo PASS
