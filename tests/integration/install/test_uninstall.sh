# Uninstalling: cmake/uninstall.cmake (the `uninstall` target) removes every
# file the install put down, per its manifest, and nothing else.
. "$(dirname "$0")/lib.sh"

install_tree
[ -s "$TMP/manifest" ] || fail "cmake --install wrote no manifest"
n_files=$(find "$PREFIX" \( -type f -o -type l \) | wc -l)
n_manifest=$(grep -c . "$TMP/manifest")
[ "$n_files" = "$n_manifest" ] || fail "$n_files files installed, $n_manifest in the manifest"
touch "$LIBDIR/not-hvd.txt"
"$CMAKE" -DHVD_MANIFEST="$TMP/manifest" -P "$HVD_SOURCE_DIR/cmake/uninstall.cmake" >"$TMP/log" 2>&1 \
  || fail "cmake/uninstall.cmake failed"
grep -q "uninstall: removed $n_manifest files" "$TMP/log" || fail "uninstall did not report $n_manifest files removed"
left=$(find "$PREFIX" \( -type f -o -type l \) ! -name not-hvd.txt)
[ -z "$left" ] || fail "left after uninstall: $left"
[ -f "$LIBDIR/not-hvd.txt" ] || fail "uninstall removed a file it did not install"
[ ! -e "$LIBDIR/cmake/hvd" ] || fail "uninstall left the empty folder $LIBDIR/cmake/hvd"
# A second run finds nothing more to remove and still succeeds.
"$CMAKE" -DHVD_MANIFEST="$TMP/manifest" -P "$HVD_SOURCE_DIR/cmake/uninstall.cmake" >"$TMP/log" 2>&1 \
  || fail "a second uninstall failed"
grep -q "uninstall: removed 0 files" "$TMP/log" || fail "a second uninstall removed files"
echo "ok: uninstall removed the $n_manifest installed files and nothing else"
