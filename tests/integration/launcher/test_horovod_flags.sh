# horovodrun's flags and variables: a launch script written for horovodrun
# works with hvdrun in its place. Each flag is checked by its effect: the
# variables a rank sees, the mpirun command line (a stand-in mpirun), and a
# timeline file written by a real hvd job (needs python3 with numpy and the
# library built next to hvdrun; the test is skipped, exit 77, only if those
# are missing, after every other check has run).
. "$(dirname "$0")/lib.sh"

# A rank that prints its HVD_* and HOROVOD_* variables, one "r<rank> NAME=VALUE" a line.
SHOW_ENV='env | grep -E "^(HVD|HOROVOD)_" | grep -vE "^HVD_(SECRET|RENDEZVOUS_ADDR)=" | sed "s/^/r$HVD_RANK /"'

# run_env ARGS...: hvdrun ARGS sh -c SHOW_ENV, expecting exit 0.
run_env() {
  run_hvdrun "$@" sh -c "$SHOW_ENV"
  expect_rc 0 "hvdrun $*"
}

# sees RANK NAME=VALUE...: every pair is in rank RANK's environment, exactly.
sees() {
  local r=$1 kv
  shift
  for kv in "$@"; do
    grep -qxF -- "r$r $kv" "$TMP/out" || fail "rank $r does not see $kv"
  done
}

# not_seen NAME...: no rank has NAME.
not_seen() {
  local n
  for n in "$@"; do
    if grep -q -- " $n=" "$TMP/out"; then fail "a rank sees $n: $(grep -- " $n=" "$TMP/out" | head -1)"; fi
  done
}

usage_error() {  # usage_error REGEX ARGS...: exit 2, message matching REGEX, no rank run
  local want=$1
  shift
  run_hvdrun "$@"
  expect_rc 2 "hvdrun $*"
  expect_in "$TMP/err" "^hvdrun: error: .*$want"
  [ ! -s "$TMP/out" ] || fail "hvdrun $* ran something"
}

# --- HOROVOD_* next to HVD_*, for each rank's place in the job ---------------
run_env -np 3 -H localhost:2,127.0.0.1:1
sees 0 HOROVOD_RANK=0 HOROVOD_SIZE=3 HOROVOD_LOCAL_RANK=0 HOROVOD_LOCAL_SIZE=2 \
       HOROVOD_CROSS_RANK=0 HOROVOD_CROSS_SIZE=2 HOROVOD_HOSTNAME=localhost
sees 1 HOROVOD_RANK=1 HOROVOD_SIZE=3 HOROVOD_LOCAL_RANK=1 HOROVOD_LOCAL_SIZE=2 \
       HOROVOD_CROSS_RANK=0 HOROVOD_CROSS_SIZE=1 HOROVOD_HOSTNAME=localhost
sees 2 HOROVOD_RANK=2 HOROVOD_SIZE=3 HOROVOD_LOCAL_RANK=0 HOROVOD_LOCAL_SIZE=1 \
       HOROVOD_CROSS_RANK=1 HOROVOD_CROSS_SIZE=2 HOROVOD_HOSTNAME=127.0.0.1
[ "$(grep -c ' HOROVOD_' "$TMP/out")" = 21 ] || fail "expected 7 HOROVOD_* variables per rank"
# Each equals its HVD_* twin.
for r in 0 1 2; do
  for v in RANK SIZE LOCAL_RANK LOCAL_SIZE CROSS_RANK CROSS_SIZE HOSTNAME; do
    a=$(grep "^r$r HVD_$v=" "$TMP/out" | cut -d= -f2)
    b=$(grep "^r$r HOROVOD_$v=" "$TMP/out" | cut -d= -f2)
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "rank $r: HVD_$v=$a but HOROVOD_$v=$b"
  done
done
# Another job's HOROVOD_* do not leak through: hvdrun's own values win.
HOROVOD_RANK=9 HOROVOD_SIZE=9 run_env -np 1
sees 0 HOROVOD_RANK=0 HOROVOD_SIZE=1
# torchrun-style: the same.
run_env --nproc-per-node 2
sees 1 HOROVOD_RANK=1 HOROVOD_SIZE=2 HOROVOD_LOCAL_RANK=1 "HOROVOD_HOSTNAME=$(hostname)"

# --- -np, -H, --hostfile (horovodrun's syntax) ----------------------------------
printf 'localhost slots=1\n127.0.0.1 slots=2\n' >"$TMP/hosts"
run_env --hostfile "$TMP/hosts"
sees 2 HOROVOD_RANK=2 HOROVOD_SIZE=3 HOROVOD_HOSTNAME=127.0.0.1 HOROVOD_LOCAL_RANK=1
run_env -np 2 -H localhost:2
sees 1 HOROVOD_RANK=1 HOROVOD_SIZE=2 HOROVOD_LOCAL_SIZE=2

# --- settings: each flag's variable, on every rank ------------------------------
run_env -np 2 --gloo --network-interface lo --start-timeout 7 --timeline-filename /tmp/tl.json \
  --fusion-threshold-mb 64 --cycle-time-ms 2.5 --autotune --autotune-log-file /tmp/at.csv \
  --log-level WARNING --cache-capacity 512 --stall-check-warning-time-seconds 11 \
  --stall-check-shutdown-time-seconds 22 --gloo-timeout-seconds 33
for r in 0 1; do
  sees $r HVD_TRANSPORT=gloo HVD_NETWORK_INTERFACE=lo HVD_START_TIMEOUT=7 HVD_TIMELINE=/tmp/tl.json \
    HVD_FUSION_THRESHOLD=67108864 HVD_CYCLE_TIME=2.5 HVD_AUTOTUNE=1 HVD_AUTOTUNE_LOG=/tmp/at.csv \
    HVD_LOG_LEVEL=warning HVD_CACHE_CAPACITY=512 HVD_STALL_WARNING_TIME=11 \
    HVD_STALL_SHUTDOWN_TIME=22 HVD_TRANSPORT_TIMEOUT=33
done
# Fractions of a MiB, in bytes; the plural spelling of --network-interface.
run_env -np 1 --fusion-threshold-mb 0.5 --network-interfaces lo
sees 0 HVD_FUSION_THRESHOLD=524288 HVD_NETWORK_INTERFACE=lo
# --timeline-mark-cycles, --hierarchical-allreduce/-allgather: the library's
# switches (one hierarchical switch in hvd for every collective).
run_env -np 2 --timeline-mark-cycles --hierarchical-allreduce
for r in 0 1; do sees $r HVD_TIMELINE_MARK_CYCLES=1 HVD_HIERARCHICAL=1; done
run_env -np 1 --hierarchical-allgather
sees 0 HVD_HIERARCHICAL=1
not_seen HVD_TIMELINE_MARK_CYCLES
# Nothing is set that was not asked for.
run_env -np 1
not_seen HVD_TRANSPORT HVD_AUTOTUNE HVD_LOG_LEVEL HVD_CACHE_CAPACITY HVD_STALL_WARNING_TIME \
  HVD_FUSION_THRESHOLD HVD_TIMELINE HVD_TIMELINE_MARK_CYCLES HVD_HIERARCHICAL
# --disable-cache, --no-stall-check; log levels in any case, fatal = error.
run_env -np 1 --disable-cache --no-stall-check --log-level fatal
sees 0 HVD_CACHE_CAPACITY=0 HVD_STALL_WARNING_TIME=0 HVD_STALL_SHUTDOWN_TIME=0 HVD_LOG_LEVEL=error
run_env -np 1 --log-level Debug
sees 0 HVD_LOG_LEVEL=debug
# Later wins between -x and these flags, as on the command line.
run_env -np 1 -x HVD_AUTOTUNE=0 --autotune
sees 0 HVD_AUTOTUNE=1
run_env -np 1 --autotune -x HVD_AUTOTUNE=0
sees 0 HVD_AUTOTUNE=0
# --verbose: the launcher's plan on stderr.
run_env -np 1 --verbose
expect_in "$TMP/err" '^hvdrun: plan: 1 rank\(s\) on 1 host\(s\)'
run_env -np 1
expect_not_in "$TMP/err" '^hvdrun: plan:'

# --- refused: conflicts, bad values, horovodrun-only flags ----------------------
usage_error 'conflicts with --gloo' -np 1 --gloo --mpi true
usage_error 'conflicts with --transport mpi' -np 1 --transport mpi --gloo true
usage_error 'one network interface' -np 1 --network-interfaces lo,eth0 true
usage_error "bad --log-level 'loud'" -np 1 --log-level loud true
usage_error "bad --cache-capacity '-1'" -np 1 --cache-capacity -1 true
usage_error "bad --cache-capacity '2000000'" -np 1 --cache-capacity 2000000 true
usage_error "bad --stall-check-warning-time-seconds 'x'" -np 1 --stall-check-warning-time-seconds x true
usage_error "bad --gloo-timeout-seconds '0'" -np 1 --gloo-timeout-seconds 0 true
usage_error "option --autotune takes no value" -np 1 --autotune=1 true
usage_error "horovodrun's --config-file is not supported by hvdrun: .*no YAML parser" \
  -np 1 --config-file c.yaml true
usage_error "option --timeline-mark-cycles takes no value" -np 1 --timeline-mark-cycles=1 true
usage_error "empty --output-filename" -np 1 --output-filename= true
usage_error "--output-filename is not supported with an elastic job" \
  -np 1 --min-np 1 --output-filename "$TMP/o" true
usage_error "--output-filename is not supported with --transport mpi" \
  -np 1 --mpi --output-filename "$TMP/o" true
[ ! -e "$TMP/o" ] || fail "a refused --output-filename created $TMP/o"
# The elastic flags are accepted (test_elastic_*.sh), with their own checks.
usage_error "-np 1 is below --min-np 2" -np 1 --min-np=2 true
usage_error "--reset-limit is for elastic jobs" -np 1 --reset-limit 2 true
usage_error "horovodrun's --mpi-args is not supported" -np 1 --mpi-args=-v true
usage_error "unknown option '--no-such-flag'" -np 1 --no-such-flag true
# Same transport twice is fine.
run_env -np 1 --gloo --transport gloo
sees 0 HVD_TRANSPORT=gloo

# --- --help documents them ------------------------------------------------------
run_hvdrun --help
expect_rc 0 "--help"
for flag in --gloo --mpi --network-interfaces --autotune --autotune-log-file --log-level \
            --cache-capacity --disable-cache --no-stall-check --stall-check-warning-time-seconds \
            --stall-check-shutdown-time-seconds --gloo-timeout-seconds HOROVOD_RANK \
            HOROVOD_CROSS_SIZE --min-np --max-np --host-discovery-script --slots --elastic-timeout \
            --blacklist-cooldown-range --reset-limit --timeline-mark-cycles \
            --hierarchical-allreduce --hierarchical-allgather --output-filename --check-build; do
  grep -q -- "$flag" "$TMP/out" || fail "--help does not mention $flag"
done

# --- --output-filename: DIR/rank.N/{stdout,stderr}, and the console too --------
# Each file holds exactly the rank's bytes (a last line without '\n' stays so).
RANK_OUT='printf "out %s\n" "$HVD_RANK"; printf "err %s\n" "$HVD_RANK" >&2; printf "tail %s" "$HVD_RANK"'
check_output_files() {  # check_output_files DIR NP WIDTH
  local dir=$1 np=$2 width=$3 r n
  [ "$(ls "$dir" | wc -l)" = "$np" ] || fail "--output-filename: $dir holds $(ls "$dir" | paste -sd' ')"
  for r in $(seq 0 $((np - 1))); do
    n=$(printf "%0${width}d" "$r")
    printf 'out %s\ntail %s' "$r" "$r" | cmp -s - "$dir/rank.$n/stdout" ||
      fail "--output-filename: rank.$n/stdout is '$(cat "$dir/rank.$n/stdout" 2>&1)'"
    printf 'err %s\n' "$r" | cmp -s - "$dir/rank.$n/stderr" ||
      fail "--output-filename: rank.$n/stderr is '$(cat "$dir/rank.$n/stderr" 2>&1)'"
    grep -qxF "out $r" "$TMP/out" && grep -qxF "tail $r" "$TMP/out" ||
      fail "--output-filename: rank $r's stdout is missing from the console"
    grep -qxF "err $r" "$TMP/err" || fail "--output-filename: rank $r's stderr is missing from the console"
  done
}
# A folder that does not exist yet (made, parents too); ranks padded to the
# width of np-1, as horovodrun does: rank.00 .. rank.10 for 11 ranks.
run_hvdrun -np 11 --output-filename "$TMP/logs/a" sh -c "$RANK_OUT"
expect_rc 0 "--output-filename, 11 ranks"
check_output_files "$TMP/logs/a" 11 2
# One digit for 2 ranks; a second job over the same folder replaces the files.
printf 'old old old old\n' >"$TMP/logs/b.old"
mkdir -p "$TMP/logs/b/rank.1" && mv "$TMP/logs/b.old" "$TMP/logs/b/rank.1/stdout"
run_hvdrun -np 2 --output-filename "$TMP/logs/b" --tag-output sh -c "$RANK_OUT"
expect_rc 0 "--output-filename, 2 ranks"
# The console lines are tagged; the files are not.
expect_in "$TMP/out" '^\[1\]<stdout>: out 1$'
sed -i 's/^\[[0-9]*\]<std[a-z]*>: //' "$TMP/out" "$TMP/err"
check_output_files "$TMP/logs/b" 2 1
# Ranks on a remote host (a stand-in ssh that runs the command here): their
# streams are written as they reach hvdrun.
cat >"$TMP/fake_ssh" <<'EOS'
#!/bin/sh
for a; do last=$a; done
exec sh -c "$last"
EOS
chmod +x "$TMP/fake_ssh"
HVD_LAUNCHER_FORCE_SSH=1 HVD_LAUNCHER_SSH="$TMP/fake_ssh" \
  run_hvdrun -np 2 --output-filename "$TMP/logs/c" sh -c "$RANK_OUT"
expect_rc 0 "--output-filename, ranks over ssh"
check_output_files "$TMP/logs/c" 2 1
# A folder that cannot be made: hvdrun says so and fails.
: >"$TMP/logs/file"
run_hvdrun -np 1 --output-filename "$TMP/logs/file" true
[ "$RC" != 0 ] || fail "--output-filename over a file: exit 0"
expect_in "$TMP/err" "cannot start rank 0.*$TMP/logs/file"

# --- --check-build: the transports this build has --------------------------------
libdir="$(cd "$(dirname "$HVDRUN")/.." && pwd)/lib"
mkdir -p "$TMP/plugins"
: >"$TMP/plugins/libhvd_transport_probe.so"
for flag in --check-build -cb; do
  HVD_TRANSPORT_PATH="$TMP/plugins" run_hvdrun $flag
  expect_rc 0 "hvdrun $flag"
  for h in "Available Frameworks:" "Available Controllers:" "Available Tensor Operations:" \
           "    [X] local (built in: one process)" "    [X] probe" \
           "Plugins looked for in: $TMP/plugins $libdir"; do
    grep -qxF -- "$h" "$TMP/out" || fail "hvdrun $flag: no line '$h'"
  done
  for t in gloo mpi ucx nccl; do
    if [ -f "$libdir/libhvd_transport_$t.so" ]; then want="[X] $t"; else want="[ ] $t"; fi
    grep -qxF -- "    $want" "$TMP/out" || fail "hvdrun $flag: no line '$want'"
  done
  [ ! -s "$TMP/err" ] || fail "hvdrun $flag wrote to stderr"
done
run_hvdrun --check-build
expect_not_in "$TMP/out" 'probe'

# --- --mpi: mpirun starts the job (a stand-in records its command line) --------
cat >"$TMP/mpirun" <<'EOS'
#!/bin/sh
for a in "$@"; do printf '%s\n' "$a"; done >"$FAKE_DIR/args"
EOS
chmod +x "$TMP/mpirun"
FAKE_DIR="$TMP" HVD_LAUNCHER_MPIRUN="$TMP/mpirun" \
  run_hvdrun --mpi -np 2 -H localhost:2 --autotune --fusion-threshold-mb 1 --log-level info \
  --timeline-mark-cycles --hierarchical-allgather prog arg
expect_rc 0 "hvdrun --mpi"
args=$(paste -sd' ' "$TMP/args")
for want in "-np 2" "-H localhost:2" "-x HVD_TRANSPORT=mpi" "-x HVD_AUTOTUNE=1" \
            "-x HVD_FUSION_THRESHOLD=1048576" "-x HVD_LOG_LEVEL=info" \
            "-x HVD_TIMELINE_MARK_CYCLES=1" "-x HVD_HIERARCHICAL=1" "prog arg"; do
  case " $args " in *" $want "*) ;; *) fail "--mpi: mpirun's command line lacks '$want': $args" ;; esac
done

# --- --timeline-filename: a real hvd job writes the file ------------------------
lib="$(cd "$(dirname "$HVDRUN")/.." && pwd)/lib/libhvd.so"
pkg="$(cd "$(dirname "$0")/../../../bindings/python" && pwd)"
if [ ! -f "$lib" ] || ! python3 -c 'import numpy' 2>/dev/null; then
  echo "SKIP: the timeline check needs $lib and python3 with numpy"
  exit 77
fi
tl="$TMP/timeline.json"
HVD_LIBRARY_PATH="$lib" PYTHONPATH="$pkg" \
  run_hvdrun -np 2 --gloo --timeline-filename "$tl" --fusion-threshold-mb 1 --cycle-time-ms 2 \
  python3 -c 'import hvd, numpy as np
hvd.init()
assert hvd.transport() == "gloo", hvd.transport()
hvd.allreduce(np.ones(4), name="timeline_probe")
hvd.shutdown()
print("done", hvd.gloo_built())'
expect_rc 0 "hvdrun --timeline-filename (a python job)"
[ "$(grep -c '^done True$' "$TMP/out")" = 2 ] || fail "the python ranks did not finish"
[ -s "$tl" ] || fail "--timeline-filename: $tl was not written"
# A Chrome trace, complete after shutdown, naming the allreduce and its phases.
python3 - "$tl" <<'EOS' || fail "the timeline is not the expected trace: $(head -c 400 "$tl")"
import json, sys
events = json.load(open(sys.argv[1]))
names = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
phases = {e["name"] for e in events if e.get("ph") == "X"}
assert "timeline_probe" in names, names
assert {"NEGOTIATE", "ALLREDUCE"} <= phases, phases
assert not any(e.get("name") == "CYCLE_START" for e in events), "cycles marked unasked"
EOS

# --timeline-mark-cycles: the same job's timeline also marks every cycle; and
# a Horovod job's own variables (HOROVOD_TIMELINE, HOROVOD_TIMELINE_MARK_CYCLES)
# do the same with no flag.
check_cycles() {  # check_cycles FILE WHAT
  python3 - "$1" <<'EOS' || fail "$2: the timeline marks no cycles: $(head -c 400 "$1")"
import json, sys
events = json.load(open(sys.argv[1]))
marks = [e for e in events if e.get("name") == "CYCLE_START"]
assert marks and all(e["ph"] == "i" for e in marks), marks[:3]
assert any(e.get("ph") == "X" and e["name"] == "ALLREDUCE" for e in events)
EOS
}
PROBE='import hvd, numpy as np
hvd.init()
hvd.allreduce(np.ones(4), name="timeline_probe")
hvd.shutdown()
print("done")'
tl2="$TMP/timeline_cycles.json"
HVD_LIBRARY_PATH="$lib" PYTHONPATH="$pkg" \
  run_hvdrun -np 2 --gloo --timeline-filename "$tl2" --timeline-mark-cycles python3 -c "$PROBE"
expect_rc 0 "hvdrun --timeline-mark-cycles (a python job)"
[ "$(grep -c '^done$' "$TMP/out")" = 2 ] || fail "the python ranks did not finish"
check_cycles "$tl2" "--timeline-mark-cycles"
tl3="$TMP/timeline_horovod.json"
HVD_LIBRARY_PATH="$lib" PYTHONPATH="$pkg" \
  run_hvdrun -np 2 --gloo -x HOROVOD_TIMELINE="$tl3" -x HOROVOD_TIMELINE_MARK_CYCLES=1 \
  python3 -c "$PROBE"
expect_rc 0 "HOROVOD_TIMELINE (a python job)"
[ "$(grep -c '^done$' "$TMP/out")" = 2 ] || fail "the python ranks did not finish"
check_cycles "$tl3" "HOROVOD_TIMELINE_MARK_CYCLES=1"

echo PASS
