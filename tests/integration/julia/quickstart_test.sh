#!/usr/bin/env bash
# The Julia quick start (docs/julia.md), done the way a new user does it:
#
#   1. scripts/install-julia.sh, then the `export PATH=...` line it prints,
#      if it prints one; then the quick start's lines, read from
#      docs/julia.md: `export JULIA_LOAD_PATH=...` (in the repository root)
#      and `build/bin/hvdrun -np 2 julia examples/julia/train_logreg.jl`
#      (with $HVDRUN, this build tree's launcher, for build/bin/hvdrun);
#   2. from a folder outside the repository, with that environment and
#      nothing else: `julia -e 'using Hvd; ...'`, and `hvdrun -np 2 julia
#      train.jl` on a script there written with MPI.jl's forms
#      (allreduce!(A, +), op = +, *, min, max, broadcast!(A; root = 1)),
#      checked exactly; without JULIA_LOAD_PATH `using Hvd` must fail;
#   3. the install script's cases: no link (it prints the export line, which
#      works), a link in a folder on PATH (julia runs through it), a foreign
#      julia in that folder (left alone, export line printed);
#   4. a bad HVD_LIBRARY_PATH fails `using Hvd` with a message naming it, and
#      Hvd.rank() before Hvd.init() speaks of Hvd.init(), not hvd_init.
#
# The shell starts from the test's PATH without the private prefix's bin
# folder (a user who has not followed the script's advice yet). Run as root
# with no julia in /usr/local/bin, step 1 links /usr/local/bin/julia, as the
# install script does for any user.
#
# HVD_LIBRARY_PATH, when set (ctest sets it to this build tree's library),
# is kept: it chooses which build is tested; the quick start needs it not.
# Prints "N passed, N failed"; exits 77 (skipped) when Julia cannot be
# installed, unless HVD_JULIA_REQUIRED=1.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
docs=$root/docs/julia.md
install=$root/scripts/install-julia.sh
prefix=${HVD_JULIA_PREFIX:-${HOME:-/tmp}/.cache/hvd-julia}
hvdrun=${HVDRUN:-}
if [ -z "$hvdrun" ]; then
  for b in "${HVD_BUILD_DIR:-}" "$root/build"; do
    [ -n "$b" ] && [ -x "$b/bin/hvdrun" ] && { hvdrun=$b/bin/hvdrun; break; }
  done
fi
limit=${HVD_JULIA_TEST_TIMEOUT:-600}

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "quickstart: ok: $1"; }
fail() { failed=$((failed + 1)); echo "quickstart: FAILED: $1" >&2; }
finish() { echo "${passed} passed, ${failed} failed"; [ "$failed" -eq 0 ]; exit $?; }

[ -n "$hvdrun" ] && [ -x "$hvdrun" ] || { fail "hvdrun not found (set HVDRUN)"; finish; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hvd-julia-quickstart.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
case "$tmp/" in "$root"/*) fail "temporary folder $tmp is inside the repository"; finish ;; esac

# The user's PATH: this one without the private prefix's bin folder.
user_path=$(printf '%s' "$PATH" | tr ':' '\n' | grep -vxF "$prefix/bin" | paste -sd: -)

# ---- 1. the quick start, as docs/julia.md writes it -----------------------
mapfile -t lines < <(awk '/^## Quick start/ { q = 1 }
                          q && /^```sh$/ { b = 1; next }
                          b && /^```$/ { exit }
                          b { print }' "$docs")
if [ "${#lines[@]}" -ne 3 ] || [ "${lines[0]}" != "scripts/install-julia.sh" ] ||
   [[ "${lines[1]}" != "export JULIA_LOAD_PATH="* ]] ||
   [[ "${lines[2]}" != "build/bin/hvdrun -np 2 julia "* ]]; then
  fail "docs/julia.md's quick start is not the three lines this test runs: $(printf '[%s] ' "${lines[@]}")"
  finish
fi
run_line=$hvdrun${lines[2]#build/bin/hvdrun}

# Step 1 in a shell of its own, which then writes down the environment it
# ended with (PATH, JULIA_LOAD_PATH) for the later steps.
(
  cd "$root" || exit 1
  export PATH="$user_path"
  unset JULIA_LOAD_PATH
  eval "${lines[0]}" > "$tmp/install.out" 2> "$tmp/install.err" || exit 2
  # The script's advice: the `export PATH=` line it printed, if any.
  while IFS= read -r l; do
    case "$l" in 'export PATH='*) eval "$l" ;; esac
  done < "$tmp/install.err"
  eval "${lines[1]}"
  printf '%s' "$PATH" > "$tmp/env.path"
  printf '%s' "$JULIA_LOAD_PATH" > "$tmp/env.jlp"
)
rc=$?
cat "$tmp/install.err" >&2
if [ "$rc" -eq 2 ]; then
  echo "quickstart: scripts/install-julia.sh failed" >&2
  if [ "${HVD_JULIA_REQUIRED:-0}" = 1 ]; then fail "scripts/install-julia.sh"; finish; fi
  echo "julia unavailable: skipped"
  exit 77
fi
[ "$rc" -eq 0 ] || { fail "quick start step 1 (exit code $rc)"; finish; }
upath=$(cat "$tmp/env.path")
jlp=$(cat "$tmp/env.jlp")
wrapper=$(tail -1 "$tmp/install.out")

# `julia` now is the installed Julia.
found=$(PATH=$upath command -v julia || true)
if [ -n "$found" ] && [ "$(readlink -f "$found")" = "$(readlink -f "$wrapper")" ]; then
  pass "after the install script and its advice, julia on PATH is $found"
else
  fail "after the install script and its advice, julia on PATH is '${found}', not $wrapper"
  finish
fi
[ "$jlp" = "$root/bindings/julia:" ] && pass "JULIA_LOAD_PATH=$jlp" ||
  fail "JULIA_LOAD_PATH from the quick start is '$jlp', not '$root/bindings/julia:'"

# Users run from their own shells: no julia-specific variables from ctest.
user() {  # user CMD...: run CMD with the user's PATH and JULIA_LOAD_PATH
  env -u JULIA_PROJECT -u JULIA_DEPOT_PATH PATH="$upath" JULIA_LOAD_PATH="$jlp" "$@"
}

# Precompile once, alone (several ranks compiling at once only wastes time).
(cd "$tmp" && user timeout -k 10 "$limit" julia -e 'using Hvd') > "$tmp/pre.log" 2>&1 ||
  { cat "$tmp/pre.log" >&2; fail "julia -e 'using Hvd' (precompiling)"; finish; }

(cd "$root" && user timeout -k 10 "$limit" bash -c "$run_line") > "$tmp/ex.log" 2>&1
rc=$?
if [ "$rc" -eq 0 ]; then
  pass "${lines[2]}"
else
  tail -30 "$tmp/ex.log" >&2
  fail "${lines[2]} (exit code $rc)"
fi

# ---- 2. the user's own folder ------------------------------------------------
work=$tmp/work
mkdir -p "$work"
out=$(cd "$work" && user timeout -k 10 "$limit" julia -e '
  using Hvd
  Hvd.init()
  print(Hvd.size(), " ", Hvd.allreduce!([3, 4], +), " ", Hvd.library_version().major)
  Hvd.shutdown()' 2> "$tmp/own.err")
if [ "$out" = "1 [3, 4] 0" ]; then
  pass "julia -e 'using Hvd; ...' in a folder outside the repository"
else
  cat "$tmp/own.err" >&2
  fail "julia -e 'using Hvd; ...' outside the repository printed '$out', not '1 [3, 4] 0'"
fi

# Without JULIA_LOAD_PATH, Julia cannot find Hvd (what users met before).
(cd "$work" && env -u JULIA_LOAD_PATH -u JULIA_PROJECT PATH="$upath" \
   timeout -k 10 "$limit" julia -e 'using Hvd') > "$tmp/noload.log" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && grep -q "Package Hvd not found" "$tmp/noload.log"; then
  pass "without JULIA_LOAD_PATH, 'using Hvd' fails (Package Hvd not found)"
else
  cat "$tmp/noload.log" >&2
  fail "without JULIA_LOAD_PATH, 'using Hvd' gave exit code $rc and not 'Package Hvd not found'"
fi

cat > "$work/train.jl" <<'EOF'
# MPI.jl's forms, checked exactly (integers) on every rank.
using Hvd
Hvd.init()
r, n = Hvd.rank(), Hvd.size()
bad = String[]
check(what, got, want) = got == want || push!(bad, "$what: got $(repr(got)), want $(repr(want))")
A = [r + 1, 10 * (r + 1)]
check("Hvd.allreduce!(A, +)", Hvd.allreduce!(copy(A), +), [sum(1:n), 10 * sum(1:n)])
check("allreduce!(A; op = +)", allreduce!(copy(A); op = +), [sum(1:n), 10 * sum(1:n)])
check("allreduce(A, *)", allreduce(A, *), [prod(1:n), prod(10 .* (1:n))])
check("allreduce(A, min)", allreduce(A, min), [1, 10])
check("allreduce(A; op = max)", allreduce(A; op = max), [n, 10 * n])
check("allreduce(x, +)", allreduce(r + 1, +), sum(1:n))
check("allreduce(A) averages", allreduce([2 * (r + 1)]), [div(2 * sum(1:n), n)])
B = fill(r, 3)
check("Hvd.broadcast!(B; root = 1)", Hvd.broadcast!(B; root = 1), fill(1, 3))
check("B after broadcast!", B, fill(1, 3))
check("Hvd.broadcast(x; root = n - 1)", Hvd.broadcast([r]; root = n - 1), [n - 1])
check("broadcast_parameters!(p; root = 1)", broadcast_parameters!((w = [r, r],); root = 1).w, [1, 1])
check("reducescatter(A, +)", reducescatter(collect(1:2n) .* (r + 1), +),
      collect(2r+1:2r+2) .* sum(1:n))
Hvd.shutdown()
foreach(m -> println(stderr, "rank $r: ", m), bad)
println("rank $r: ", isempty(bad) ? "ok" : "FAILED")
exit(isempty(bad) ? 0 : 1)
EOF
(cd "$work" && user timeout -k 10 "$limit" "$hvdrun" -np 2 julia train.jl) > "$tmp/train.log" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q "rank 0: ok" "$tmp/train.log" && grep -q "rank 1: ok" "$tmp/train.log"; then
  pass "hvdrun -np 2 julia train.jl (MPI.jl forms, exact) outside the repository"
else
  cat "$tmp/train.log" >&2
  fail "hvdrun -np 2 julia train.jl outside the repository (exit code $rc)"
fi

# ---- 3. the install script's ways onto PATH ----------------------------------
bare_path=$(printf '%s' "$user_path" | tr ':' '\n' |
            while IFS= read -r d; do [ -e "$d/julia" ] || echo "$d"; done | paste -sd: -)
err=$(env HVD_JULIA_LINK_DIR=none PATH="$bare_path" "$install" 2>&1 >/dev/null)
want="export PATH=\"$prefix/bin:\$PATH\""
if printf '%s\n' "$err" | grep -qxF "$want"; then
  got=$(PATH="$bare_path"; eval "$want"; command -v julia && julia --startup-file=no -e 'print(VERSION)')
  if [ "$got" = "$(printf '%s\n%s' "$prefix/bin/julia" "1.5.3")" ]; then
    pass "no link: the script prints '$want', and it works"
  else
    fail "no link: after '$want', julia gave '$got'"
  fi
else
  printf '%s\n' "$err" >&2
  fail "no link and no julia on PATH: the script did not print '$want'"
fi

mkdir -p "$tmp/bin"
err=$(env HVD_JULIA_LINK_DIR="$tmp/bin" PATH="$tmp/bin:$bare_path" "$install" 2>&1 >/dev/null)
got=$(cd "$work" && PATH="$tmp/bin:$bare_path" timeout -k 10 "$limit" julia --startup-file=no -e 'print(VERSION)' 2>&1)
if [ -L "$tmp/bin/julia" ] && [ "$(readlink "$tmp/bin/julia")" = "$prefix/bin/julia" ] &&
   [ "$got" = "1.5.3" ] && ! printf '%s\n' "$err" | grep -q '^export PATH='; then
  pass "link: $tmp/bin/julia -> the wrapper, and julia runs through it"
else
  printf '%s\n' "$err" >&2
  fail "link in a folder on PATH: link $(readlink "$tmp/bin/julia" 2>&1), julia printed '$got'"
fi

rm -f "$tmp/bin/julia"
printf '#!/bin/sh\necho another julia\n' > "$tmp/bin/julia"
chmod 755 "$tmp/bin/julia"
before=$(cat "$tmp/bin/julia")
err=$(env HVD_JULIA_LINK_DIR="$tmp/bin" PATH="$tmp/bin:$bare_path" "$install" 2>&1 >/dev/null)
if [ ! -L "$tmp/bin/julia" ] && [ "$(cat "$tmp/bin/julia")" = "$before" ] &&
   printf '%s\n' "$err" | grep -qxF "$want" && printf '%s\n' "$err" | grep -q "left alone"; then
  pass "a julia already in the link folder is left alone, and the export line is printed"
else
  printf '%s\n' "$err" >&2
  fail "a julia already in the link folder: not left alone, or no export line"
fi

# ---- 4. errors a user meets ---------------------------------------------------
for bad in "$tmp/nowhere" "$tmp/bin" "$work/train.jl"; do
  (cd "$work" && env HVD_LIBRARY_PATH="$bad" PATH="$upath" JULIA_LOAD_PATH="$jlp" \
     timeout -k 10 "$limit" julia -e 'using Hvd') > "$tmp/bad.log" 2>&1
  rc=$?
  case "$bad" in
    */nowhere) what="no such file or folder" ;;
    */bin) what="is a folder without libhvd.so" ;;
    *) what="cannot load" ;;
  esac
  if [ "$rc" -ne 0 ] && grep -qF "HVD_LIBRARY_PATH=$bad" "$tmp/bad.log" &&
     grep -qF "$what" "$tmp/bad.log"; then
    pass "HVD_LIBRARY_PATH=$bad: using Hvd fails ($what)"
  else
    cat "$tmp/bad.log" >&2
    fail "HVD_LIBRARY_PATH=$bad: exit code $rc, or no message naming it ('$what')"
  fi
done

(cd "$work" && user timeout -k 10 "$limit" julia -e 'using Hvd; Hvd.rank()') > "$tmp/rank.log" 2>&1
if grep -qF "Hvd.rank(): not initialized; call Hvd.init() first" "$tmp/rank.log" &&
   ! grep -q "hvd_init\|hvd_context_create\|ctx is NULL" "$tmp/rank.log"; then
  pass "Hvd.rank() before Hvd.init(): the message speaks Julia"
else
  cat "$tmp/rank.log" >&2
  fail "Hvd.rank() before Hvd.init(): message not in the Julia API's words"
fi

finish
