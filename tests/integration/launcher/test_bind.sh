# --bind-to none|core|auto and HVD_BIND_TO: every rank reports the CPUs it
# may run on (Cpus_allowed_list of /proc/<pid>/status). hvdrun runs under
# taskset on the first two CPUs this test may use, A and B, so that every
# expectation is exact on any machine with two usable CPUs or more; one case
# runs without taskset on the machine as it is. Skips (77) with fewer than
# two usable CPUs or without taskset.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/elastic_lib.sh"

skip() { echo "SKIP: $*"; exit 77; }

# The CPUs of a Cpus_allowed_list ("0-2,5" -> "0 1 2 5").
expand() {
  local part out=""
  for part in $(echo "$1" | tr ',' ' '); do
    case "$part" in
      *-*) out="$out $(seq "${part%-*}" "${part#*-}" | tr '\n' ' ')" ;;
      *) out="$out $part" ;;
    esac
  done
  echo $out
}
MINE=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
[ -n "$MINE" ] || skip "no Cpus_allowed_list in /proc/self/status"
set -- $(expand "$MINE")
[ $# -ge 2 ] || skip "fewer than 2 usable CPUs ($MINE): nothing to bind apart"
command -v taskset >/dev/null || skip "taskset not installed (Debian: util-linux)"
A=$1
B=$2
ALL=$MINE
# Both, as the kernel writes them.
if [ "$B" = $((A + 1)) ]; then AB="$A-$B"; else AB="$A,$B"; fi

# The rank: "AFF <rank or worker id> <Cpus_allowed_list>", then the rest of
# its arguments run in its place.
cat >"$TMP/aff.sh" <<'EOF'
echo "AFF ${HVD_RANK:-${HVD_ELASTIC_WORKER:-?}} $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
shift  # the test's mark
[ $# -eq 0 ] || exec "$@"
EOF

# affs: the AFF lines of $TMP/out, sorted.
affs() { grep '^AFF ' "$TMP/out" | sort; }
expect_affs() {  # expect_affs "AFF 0 x" "AFF 1 y" ...
  local want got
  want=$(printf '%s\n' "$@" | sort)
  got=$(affs)
  [ "$got" = "$want" ] || fail "CPU lists differ:
--- expected
$want
--- got
$got"
}
# run2 ARGS...: hvdrun ARGS... under taskset on A and B.
run2() { run_hvdrun_ts "$A,$B" "$@"; }
run_hvdrun_ts() {
  local cpus=$1 t0
  shift
  t0=$(now)
  taskset -c "$cpus" "$HVDRUN" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
  RC=$?
  ELAPSED=$(elapsed_since "$t0")
}

# --- auto, the default: two ranks on two CPUs get one each --------------------
run2 -v -np 2 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "auto, 2 ranks"
expect_affs "AFF 0 $A" "AFF 1 $B"
# -v: each rank's list, once.
[ "$(grep -c "^hvdrun: rank 0 (host localhost): CPUs $A\$" "$TMP/err")" = 1 ] || fail "rank 0's CPUs not logged once"
[ "$(grep -c "^hvdrun: rank 1 (host localhost): CPUs $B\$" "$TMP/err")" = 1 ] || fail "rank 1's CPUs not logged once"
expect_no_survivors

# The same with the value given explicitly, as --bind-to=auto and HVD_BIND_TO.
run2 --bind-to=auto -np 2 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "--bind-to=auto"
expect_affs "AFF 0 $A" "AFF 1 $B"
[ ! -s "$TMP/err" ] || fail "messages on stderr without -v"
HVD_BIND_TO=auto run2 -np 2 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "HVD_BIND_TO=auto"
expect_affs "AFF 0 $A" "AFF 1 $B"

# One rank: both CPUs.
run2 -np 1 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "auto, 1 rank"
expect_affs "AFF 0 $AB"

# Hosts that are all this machine share its CPUs, whatever their names.
run2 -H localhost:1,127.0.0.1:1 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "auto, two local host names"
expect_affs "AFF 0 $A" "AFF 1 $B"

# torchrun-style.
run2 --nproc-per-node 2 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "auto, torchrun-style"
expect_affs "AFF 0 $A" "AFF 1 $B"

# --- auto: ranks that do not fit are not bound ----------------------------------
run_hvdrun_ts "$A" -v -np 2 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "auto under taskset -c A"
expect_affs "AFF 0 $A" "AFF 1 $A"
[ "$(grep -c "^hvdrun: --bind-to auto: 2 local rank(s) do not fit the 1 usable CPU(s) ($A): not bound\$" "$TMP/err")" = 1 ] \
  || fail "no single 'do not fit' message"
expect_not_in "$TMP/err" ': CPUs '

run2 -v -np 3 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "auto, 3 ranks on 2 CPUs"
expect_affs "AFF 0 $AB" "AFF 1 $AB" "AFF 2 $AB"
expect_in "$TMP/err" "^hvdrun: --bind-to auto: 3 local rank\(s\) do not fit the 2 usable CPU\(s\) \($AB\): not bound\$"
expect_not_in "$TMP/err" ': CPUs '

# --- core: one CPU each, round robin beyond the CPUs ------------------------------
run2 -v --bind-to core -np 3 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "core, 3 ranks"
expect_affs "AFF 0 $A" "AFF 1 $B" "AFF 2 $A"
expect_in "$TMP/err" "^hvdrun: rank 2 \(host localhost\): CPUs $A\$"
HVD_BIND_TO=core run2 -np 2 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "HVD_BIND_TO=core"
expect_affs "AFF 0 $A" "AFF 1 $B"

# --- none: the ranks keep hvdrun's affinity ---------------------------------------
run2 -v --bind-to none -np 2 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "none"
expect_affs "AFF 0 $AB" "AFF 1 $AB"
expect_not_in "$TMP/err" 'CPUs'
# The option wins over the variable.
HVD_BIND_TO=core run2 --bind-to none -np 2 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "none over HVD_BIND_TO=core"
expect_affs "AFF 0 $AB" "AFF 1 $AB"
HVD_BIND_TO=none run2 -np 2 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "HVD_BIND_TO=none"
expect_affs "AFF 0 $AB" "AFF 1 $AB"

# --- this machine as it is (no taskset): two ranks, disjoint equal shares -----------
run_hvdrun -np 2 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "auto, no taskset"
l0=$(sed -n 's/^AFF 0 //p' "$TMP/out")
l1=$(sed -n 's/^AFF 1 //p' "$TMP/out")
[ -n "$l0" ] && [ -n "$l1" ] || fail "a rank did not report its CPUs"
c0=$(expand "$l0")
c1=$(expand "$l1")
for c in $c0 $c1; do
  case " $(expand "$ALL") " in *" $c "*) ;; *) fail "CPU $c is not one of this test's ($ALL)" ;; esac
done
for c in $c0; do
  case " $c1 " in *" $c "*) fail "ranks share CPU $c ($l0 / $l1)" ;; esac
done
[ "$(echo $c0 | wc -w)" = "$(echo $c1 | wc -w)" ] || fail "unequal shares: $l0 / $l1"
if [ "$(echo $(expand "$ALL") | wc -w)" = 2 ]; then
  expect_affs "AFF 0 $A" "AFF 1 $B"
fi

# --- bad values: usage errors that name them ----------------------------------------
run_hvdrun --bind-to cores -np 2 true
expect_rc 2 "--bind-to cores"
expect_in "$TMP/err" "^hvdrun: error: bad --bind-to 'cores' \(none, core or auto\)"
run_hvdrun --bind-to -np 2 true
expect_rc 2 "--bind-to -np"
expect_in "$TMP/err" "bad --bind-to '-np'"
HVD_BIND_TO=socket run_hvdrun -np 2 true
expect_rc 2 "HVD_BIND_TO=socket"
expect_in "$TMP/err" "^hvdrun: error: bad HVD_BIND_TO 'socket' \(none, core or auto\)"

# --- remote ranks (ssh): bound on their host by hvdrun --bind-exec -----------------
# A stand-in ssh client that runs the remote command here: the "remote host"
# is this machine as hvdrun's process sees it (under taskset, two CPUs).
cat >"$TMP/fake_ssh" <<'EOF'
#!/bin/sh
for a; do last=$a; done
exec sh -c "$last"
EOF
chmod +x "$TMP/fake_ssh"
# The same, on a host that lacks this hvdrun at its path.
cat >"$TMP/fake_ssh_nohvdrun" <<EOF
#!/bin/sh
for a; do last=\$a; done
exec sh -c "\$(printf '%s' "\$last" | sed 's|$HVDRUN|/nonexistent/hvdrun|g')"
EOF
chmod +x "$TMP/fake_ssh_nohvdrun"
remote() { HVD_LAUNCHER_FORCE_SSH=1 HVD_LAUNCHER_SSH="$TMP/fake_ssh" "$@"; }

remote run2 -v -np 2 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "remote ranks, auto"
expect_affs "AFF 0 $A" "AFF 1 $B"
[ "$(grep -c '^hvdrun: --bind-to auto: ranks on remote hosts bind themselves to their host.s CPUs' "$TMP/err")" = 1 ] \
  || fail "no single note that remote ranks bind themselves"
# -v: each remote rank's list, from the rank's side.
expect_in "$TMP/err" "^hvdrun: rank 0 \(host localhost\): CPUs $A\$"
expect_in "$TMP/err" "^hvdrun: rank 1 \(host localhost\): CPUs $B\$"
expect_no_survivors
# The start marker never shows.
expect_not_in "$TMP/err" 'remote-started'
expect_not_in "$TMP/out" 'remote-started'

remote run2 --bind-to core -np 3 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "remote ranks, core"
expect_affs "AFF 0 $A" "AFF 1 $B" "AFF 2 $A"
[ ! -s "$TMP/err" ] || fail "remote ranks, core: messages on stderr without -v: $(cat "$TMP/err")"

remote run2 -v --bind-to none -np 2 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "remote ranks, none"
expect_affs "AFF 0 $AB" "AFF 1 $AB"
expect_not_in "$TMP/err" 'CPUs'
expect_not_in "$TMP/err" 'bind'

# Where they do not fit the remote host's CPUs (its mask: one CPU), auto
# leaves them unbound, said once with -v, and the job runs.
remote run_hvdrun_ts "$A" -v -np 2 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "remote ranks, auto, one CPU"
expect_affs "AFF 0 $A" "AFF 1 $A"
[ "$(grep -c "^hvdrun: --bind-to auto: 2 local rank(s) on host localhost do not fit its 1 usable CPU(s) ($A): not bound\$" "$TMP/err")" = 1 ] \
  || fail "no single 'do not fit' note for the remote host"
expect_not_in "$TMP/err" ': CPUs '
remote run_hvdrun_ts "$A" -np 2 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "remote ranks, auto, one CPU, quiet"
[ ! -s "$TMP/err" ] || fail "a remote binding left undone is said without -v: $(cat "$TMP/err")"

# No hvdrun at this path on the remote host: unbound, said with -v, the job runs.
HVD_LAUNCHER_FORCE_SSH=1 HVD_LAUNCHER_SSH="$TMP/fake_ssh_nohvdrun" run2 -v -np 2 sh "$TMP/aff.sh" "$MARK"
expect_rc 0 "remote ranks, no hvdrun there"
expect_affs "AFF 0 $AB" "AFF 1 $AB"
expect_in "$TMP/err" "^hvdrun: --bind-to auto: rank 1 \(host localhost\) is not bound: no /nonexistent/hvdrun on host localhost\$"

# A remote command that cannot be run: env's codes, as before the binding step.
remote run2 -np 1 no-such-command-"$MARK"
expect_rc 127 "remote ranks, a missing command"
expect_in "$TMP/err" "cannot execute 'no-such-command-$MARK': No such file or directory"

# --- elastic workers --------------------------------------------------------------
FAKE_PLAN='*@0=done' run2 --min-np 2 -np 2 -H 127.0.0.1,127.0.0.2 \
  sh "$TMP/aff.sh" "$MARK" bash "$WORKER" "$MARK"
expect_rc 0 "elastic, two local hosts"
expect_affs "AFF 127.0.0.1:0:0 $A" "AFF 127.0.0.2:0:1 $B"
expect_no_survivors

# A worker that fails frees its CPU; the one started in its place after the
# cooldown gets it (the survivor keeps its own).
FAKE_PLAN='127.0.0.1:1@0=exit3 *@2=done' run2 --min-np 1 -np 2 -H 127.0.0.1:2 \
  --blacklist-cooldown-range 0.5 0.5 sh "$TMP/aff.sh" "$MARK" bash "$WORKER" "$MARK"
expect_rc 0 "elastic, a replaced worker"
expect_affs "AFF 127.0.0.1:0:0 $A" "AFF 127.0.0.1:1:1 $B" "AFF 127.0.0.1:1:2 $B"
expect_no_survivors

# Workers on a remote host: bound there by their slot among its slots.
FAKE_PLAN='*@0=done' remote run2 --min-np 2 -np 2 -H 127.0.0.2:2 \
  sh "$TMP/aff.sh" "$MARK" bash "$WORKER" "$MARK"
expect_rc 0 "elastic, a remote host"
expect_affs "AFF 127.0.0.2:0:0 $A" "AFF 127.0.0.2:1:1 $B"
expect_no_survivors

FAKE_PLAN='*@0=done' run2 --bind-to none --min-np 2 -np 2 -H 127.0.0.1,127.0.0.2 \
  sh "$TMP/aff.sh" "$MARK" bash "$WORKER" "$MARK"
expect_rc 0 "elastic, --bind-to none"
expect_affs "AFF 127.0.0.1:0:0 $AB" "AFF 127.0.0.2:0:1 $AB"
echo "PASS"
