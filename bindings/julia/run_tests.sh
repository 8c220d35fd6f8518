#!/usr/bin/env bash
# Runs the Julia SDK's tests and prints one closing line "N passed, N failed"
# over all of them; exits non-zero on any failure.
#
#   1. Hvd/test/runtests.jl   one process (a world of one)
#   2. Hvd/test/elastic_tests.jl  elastic jobs: the loop on a fake backend, and
#      worker processes under tests/integration/elastic's fake launcher
#      ($HVD_FAKE_ELASTIC_LAUNCHER, else the build tree's; skipped without one),
#      then elastic_worker.jl under hvdrun's elastic driver (1 test)
#   3. Hvd/test/mp_tests.jl   2 ranks under hvdrun, then again over the UCX
#      plugin where it is built (Hvd.init(transport = "ucx"), HVD_SHM=0)
#   4. Hvd/test/process_set_tests.jl   3 ranks, then 4 ranks under hvdrun
#   5. examples/julia/train_logreg.jl alone, then with 2 ranks (1 test each)
#
# Julia: $JULIA if set, else a `julia` (1.5 or newer) on PATH, else the one
# scripts/install-julia.sh installs (Debian bullseye's 1.5.3 in a private
# prefix; downloaded on first use). If Julia cannot be installed the suite
# is skipped (exit 77) unless HVD_JULIA_REQUIRED=1.
#
# The library and launcher: $HVD_LIBRARY_PATH (libhvd.so or its folder) and
# $HVDRUN (ctest passes both, tests/integration/julia/CMakeLists.txt), else
# the build tree in $HVD_BUILD_DIR, else build/, else the newest build-*/.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
pkg=$here/Hvd
np=${HVD_JULIA_TEST_NP:-2}
step_timeout=${HVD_JULIA_TEST_TIMEOUT:-900}

say() { echo "julia-tests: $*" >&2; }

# ---- Julia ------------------------------------------------------------------
julia_ok() {  # julia_ok PATH: runs and is 1.5 or newer
  "$1" --startup-file=no -e 'VERSION >= v"1.5" || exit(1)' >/dev/null 2>&1
}
julia=""
if [ -n "${JULIA:-}" ]; then
  julia=$JULIA
elif command -v julia >/dev/null && julia_ok "$(command -v julia)"; then
  julia=$(command -v julia)
else
  if out=$("$root/scripts/install-julia.sh"); then
    julia=$(echo "$out" | tail -1)
  else
    say "scripts/install-julia.sh failed: cannot run the Julia tests"
    if [ "${HVD_JULIA_REQUIRED:-0}" = 1 ]; then echo "0 passed, 1 failed"; exit 1; fi
    echo "julia unavailable: skipped"
    exit 77
  fi
fi
julia_ok "$julia" || { say "$julia does not run"; echo "0 passed, 1 failed"; exit 1; }
# hvdrun starts `julia` by name in the ranks.
export PATH="$(dirname "$julia"):$PATH"
say "julia: $julia ($("$julia" --startup-file=no -e 'print(VERSION)'))"

# ---- library and launcher --------------------------------------------------
newest_build() {  # newest build tree holding libhvd.so
  local best="" t bt=0
  for d in "$root"/build "$root"/build-*; do
    [ -f "$d/lib/libhvd.so" ] || continue
    t=$(stat -c %Y "$d/lib/libhvd.so")
    if [ -z "$best" ] || [ "$t" -gt "$bt" ]; then best=$d; bt=$t; fi
  done
  echo "$best"
}
build=${HVD_BUILD_DIR:-}
if [ -z "$build" ] && [ -f "$root/build/lib/libhvd.so" ]; then build=$root/build; fi
[ -n "$build" ] || build=$(newest_build)
if [ -z "${HVD_LIBRARY_PATH:-}" ] && [ -n "$build" ]; then
  export HVD_LIBRARY_PATH=$build/lib
fi
hvdrun=${HVDRUN:-}
if [ -z "$hvdrun" ]; then
  if [ -n "$build" ] && [ -x "$build/bin/hvdrun" ]; then hvdrun=$build/bin/hvdrun
  else hvdrun=$(command -v hvdrun || true); fi
fi
[ -n "$hvdrun" ] && [ -x "$hvdrun" ] || {
  say "hvdrun not found: build it (cmake --build build --target hvdrun) or set HVDRUN"
  echo "0 passed, 1 failed"; exit 1; }
say "library: ${HVD_LIBRARY_PATH:-(package search)}; launcher: $hvdrun"

jl=("$julia" --startup-file=no --project="$pkg")

# ---- run --------------------------------------------------------------------
passed=0
failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# Adds the counts of a step's closing "N passed, N failed" line; a step that
# printed none, or exited non-zero with no failure counted, is one failure.
count() {  # count NAME RC
  local line p f
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -1)
  if [ -z "$line" ]; then
    say "$1: no result line (exit code $2)"; failed=$((failed + 1)); return
  fi
  p=${line%% passed*}; f=${line#*, }; f=${f%% failed}
  passed=$((passed + p)); failed=$((failed + f))
  if [ "$2" -ne 0 ] && [ "$f" -eq 0 ]; then
    say "$1: exit code $2"; failed=$((failed + 1))
  fi
}
# One test for a whole command: passes on exit code 0.
one() {  # one NAME RC
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); else say "$1: exit code $2"; failed=$((failed + 1)); fi
}

# Compile the package once before several ranks load it at the same time.
"${jl[@]}" -e 'using Hvd' || { say "the Hvd package does not load"; echo "0 passed, 1 failed"; exit 1; }

say "single process: Hvd/test/runtests.jl"
timeout -k 10 "$step_timeout" "${jl[@]}" "$pkg/test/runtests.jl" 2>&1 | tee "$log"
count runtests.jl "${PIPESTATUS[0]}"

fake_launcher=${HVD_FAKE_ELASTIC_LAUNCHER:-}
if [ -z "$fake_launcher" ] && [ -n "$build" ] && [ -x "$build/bin/hvd_fake_elastic_launcher" ]; then
  fake_launcher=$build/bin/hvd_fake_elastic_launcher
fi
say "elastic: Hvd/test/elastic_tests.jl (fake launcher: ${fake_launcher:-none})"
HVD_FAKE_ELASTIC_LAUNCHER=$fake_launcher timeout -k 10 "$step_timeout" "${jl[@]}" \
  "$pkg/test/elastic_tests.jl" 2>&1 | tee "$log"
count elastic_tests.jl "${PIPESTATUS[0]}"

# An elastic job under hvdrun's driver (where it has one): three workers on
# three loopback hosts, the third dies at step 3; the two others restore the
# commit of step 2, form epoch 1 and finish with the total 3 + 3 + 4 * 2.
if "$hvdrun" --help 2>&1 | grep -q -- '--min-np'; then
  say "elastic job under hvdrun: 3 workers, one dies"
  timeout -k 10 "$step_timeout" "$hvdrun" --min-np 2 -np 3 --elastic-timeout 120 \
    --start-timeout 120 --grace-period 2 -H 127.0.0.1,127.0.0.2,127.0.0.3 --tag-output \
    sh -c 'case $HVD_ELASTIC_WORKER in 127.0.0.3:*) exec "$@" 3 3 ;; esac; exec "$@" -1' sh \
    "${jl[@]}" "$pkg/test/elastic_worker.jl" 6 >"$log" 2>&1
  rc=$?
  bad=0
  [ "$rc" -eq 0 ] || { say "hvdrun exited with $rc"; bad=1; }
  for r in 0 1; do
    id=127.0.0.$((r + 1)):0:$r
    want="start rank=$r size=3 epoch=0 elastic=true|lost a peer at step 3|reset epoch=1 rank=$r size=2|done total=14 step=6 epoch=1 rank=$r size=2"
    got=$(grep -F "[$id]<stdout>: " "$log" | sed "s/^\[$id\]<stdout>: //" | paste -sd'|')
    [ "$got" = "$want" ] || { say "worker $id printed '$got', not '$want'"; bad=1; }
  done
  [ "$bad" -eq 0 ] || cat "$log"
  one "elastic job under hvdrun" "$bad"
else
  say "elastic job under hvdrun: skipped ($hvdrun has no --min-np)"
fi

say "$np ranks: Hvd/test/mp_tests.jl"
timeout -k 10 "$step_timeout" "$hvdrun" -np "$np" "${jl[@]}" "$pkg/test/mp_tests.jl" 2>&1 | tee "$log"
count mp_tests.jl "${PIPESTATUS[0]}"

# Over the UCX plugin where it is built: Hvd.init(transport = "ucx"), the
# core's shared memory off so every collective goes through UCX.
libdir=${HVD_LIBRARY_PATH:-}
[ -z "$libdir" ] || [ -d "$libdir" ] || libdir=$(dirname "$libdir")
if [ -n "$libdir" ] && [ -f "$libdir/libhvd_transport_ucx.so" ]; then
  say "$np ranks over UCX: Hvd/test/mp_tests.jl"
  HVD_JULIA_TEST_TRANSPORT=ucx HVD_SHM=0 timeout -k 10 "$step_timeout" "$hvdrun" -np "$np" \
    "${jl[@]}" "$pkg/test/mp_tests.jl" 2>&1 | tee "$log"
  count "mp_tests.jl over UCX" "${PIPESTATUS[0]}"
else
  say "$np ranks over UCX: skipped (no libhvd_transport_ucx.so beside the library${libdir:+ in $libdir})"
fi

for ps_np in 3 4; do
  say "$ps_np ranks: Hvd/test/process_set_tests.jl"
  timeout -k 10 "$step_timeout" "$hvdrun" -np "$ps_np" "${jl[@]}" "$pkg/test/process_set_tests.jl" 2>&1 | tee "$log"
  count "process_set_tests.jl ($ps_np ranks)" "${PIPESTATUS[0]}"
done

say "example alone: examples/julia/train_logreg.jl"
timeout -k 10 "$step_timeout" "$julia" --startup-file=no "$root/examples/julia/train_logreg.jl" 2>&1
one "train_logreg.jl alone" $?

say "example, $np ranks: examples/julia/train_logreg.jl"
timeout -k 10 "$step_timeout" "$hvdrun" -np "$np" "$julia" --startup-file=no \
  "$root/examples/julia/train_logreg.jl" 2>&1
one "train_logreg.jl with $np ranks" $?

echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
