# Shared by the install tests: sourced, never run.
#
# install_tree installs the build folder $HVD_BUILD_DIR into a fresh temporary
# prefix ($PREFIX, removed on exit) with `cmake --install`, the way a user
# would. cmake --install always writes <build dir>/install_manifest.txt; the
# manifest of the user's own last install (used to uninstall it) is put back
# right after, and this install's manifest is kept as $TMP/manifest.
#
# Every program runs with LD_LIBRARY_PATH, HVD_LIBRARY_PATH and
# HVD_TRANSPORT_PATH unset: the installed files must find each other alone.
set -u
: "${HVD_BUILD_DIR:?HVD_BUILD_DIR must name the hvd build folder}"
: "${HVD_SOURCE_DIR:?HVD_SOURCE_DIR must name the hvd source folder}"
: "${HVD_LIBDIR:?HVD_LIBDIR must be CMAKE_INSTALL_LIBDIR}"
: "${HVD_BINDIR:?HVD_BINDIR must be CMAKE_INSTALL_BINDIR}"
: "${HVD_VERSION:?HVD_VERSION must be the project version}"
: "${CMAKE:?CMAKE must name cmake}"
: "${CC:?CC must name the C compiler}"
case "$HVD_LIBDIR:$HVD_BINDIR" in
  /*|*:/*) echo "SKIP: absolute CMAKE_INSTALL_LIBDIR/BINDIR do not follow --prefix" >&2; exit 77 ;;
esac
unset LD_LIBRARY_PATH HVD_LIBRARY_PATH HVD_TRANSPORT_PATH HVD_TRANSPORT
unset HVD_RANK HVD_SIZE RANK WORLD_SIZE OMPI_COMM_WORLD_RANK PMI_RANK

TMP=$(mktemp -d "${TMPDIR:-/tmp}/hvd-install-test.XXXXXX")
PREFIX=$TMP/prefix
LIBDIR=$PREFIX/$HVD_LIBDIR
BINDIR=$PREFIX/$HVD_BINDIR
trap 'rm -rf "$TMP"' EXIT

fail() {
  echo "FAIL: $*" >&2
  for f in "$TMP"/out "$TMP"/err "$TMP"/log; do
    if [ -s "$f" ]; then echo "--- $(basename "$f") (last 40 lines)" >&2; tail -n 40 "$f" | cut -c1-300 >&2; fi
  done
  exit 1
}

skip() {
  echo "SKIP: $*" >&2
  exit 77
}

install_tree() {
  local m=$HVD_BUILD_DIR/install_manifest.txt had=0
  if [ -e "$m" ]; then cp -p "$m" "$TMP/manifest.user" || fail "cannot save $m"; had=1; fi
  "$CMAKE" --install "$HVD_BUILD_DIR" --prefix "$PREFIX" >"$TMP/log" 2>&1
  local rc=$?
  if [ -e "$m" ]; then cp "$m" "$TMP/manifest"; fi
  if [ "$had" = 1 ]; then cp -p "$TMP/manifest.user" "$m"; else rm -f "$m"; fi
  [ "$rc" = 0 ] || fail "cmake --install $HVD_BUILD_DIR --prefix $PREFIX exited with $rc"
  [ -f "$LIBDIR/libhvd.so" ] || fail "no $LIBDIR/libhvd.so after install"
  [ -x "$BINDIR/hvdrun" ] || fail "no $BINDIR/hvdrun after install"
}

# The line consumer.c prints on rank R of 2, with transport T.
expected_line() {
  echo "rank $1/2 transport=$2 allreduce first=3 last=3000 total=1501500 broadcast first=1000 last=1105 total=16840"
}

# run_job PROGRAM TRANSPORT: the installed hvdrun runs PROGRAM on 2 ranks;
# both must exit 0 and print exactly their expected lines.
run_job() {
  local prog=$1 transport=$2 rc
  timeout -k 5 120 "$BINDIR/hvdrun" -np 2 --start-timeout 60 "$prog" >"$TMP/out" 2>"$TMP/err" </dev/null
  rc=$?
  [ "$rc" = 0 ] || fail "hvdrun -np 2 $(basename "$prog") exited with $rc"
  { expected_line 0 "$transport"; expected_line 1 "$transport"; } >"$TMP/want"
  sort "$TMP/out" >"$TMP/got"
  diff -u "$TMP/want" "$TMP/got" >&2 || fail "wrong output from $(basename "$prog")"
  echo "ok: hvdrun -np 2 $(basename "$prog") (transport $transport)"
}

# The RUNPATH of an ELF file ("" when none).
runpath_of() {
  readelf -d "$1" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]$/\1/p'
}

# needs_no_build_tree FILE: the program's dynamic section names nothing of the
# hvd build or source folder.
needs_no_build_tree() {
  local d
  d=$(readelf -d "$1") || fail "readelf -d $1"
  case "$d" in
    *"$HVD_BUILD_DIR"*|*"$HVD_SOURCE_DIR/"*) fail "$1 refers to the build tree: $(echo "$d" | grep -E 'PATH|NEEDED')" ;;
  esac
}
