# A C program built with `cc $(pkg-config --cflags --libs hvd)` against the
# installed prefix runs under the installed hvdrun over the installed Gloo
# plugin; with that plugin gone, it fails naming the installed folder.
. "$(dirname "$0")/lib.sh"
: "${PKG_CONFIG:?PKG_CONFIG must name pkg-config}"
[ "${HVD_WITH_GLOO:-OFF}" = ON ] || skip "hvd was built without Gloo"

install_tree
export PKG_CONFIG_PATH=$LIBDIR/pkgconfig
[ "$("$PKG_CONFIG" --modversion hvd)" = "$HVD_VERSION" ] || fail "pkg-config --modversion hvd is not $HVD_VERSION"
[ -d "$("$PKG_CONFIG" --variable=libdir hvd)" ] || fail "pkg-config libdir does not exist"
flags=$("$PKG_CONFIG" --cflags --libs hvd) || fail "pkg-config --cflags --libs hvd"
echo "pkg-config --cflags --libs hvd: $flags"
# shellcheck disable=SC2086
"$CC" -std=c99 -Wall -Werror -o "$TMP/consumer" "$HVD_SOURCE_DIR/tests/integration/install/consumer/consumer.c" \
  $flags -Wl,-rpath,"$LIBDIR" >"$TMP/log" 2>&1 || fail "cc with pkg-config flags failed"
readelf -d "$TMP/consumer" | grep -q 'NEEDED.*\[libhvd\.so\.' || fail "consumer does not link libhvd.so"
needs_no_build_tree "$TMP/consumer"

run_job "$TMP/consumer" gloo

# The plugin is found only where it was installed: remove it and the job
# fails, naming the installed lib folder.
rm -f "$LIBDIR/libhvd_transport_gloo.so"
timeout -k 5 120 "$BINDIR/hvdrun" -np 2 --start-timeout 60 "$TMP/consumer" >"$TMP/out" 2>"$TMP/err" </dev/null
rc=$?
[ "$rc" != 0 ] || fail "the job succeeded without the installed Gloo plugin"
grep -Fq "libhvd_transport_gloo.so was not found in $LIBDIR" "$TMP/err" || fail "no 'not found in $LIBDIR' message"
echo "ok: without the plugin the job fails (exit $rc) naming $LIBDIR"
