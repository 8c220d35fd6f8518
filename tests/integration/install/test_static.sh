# Static linking: with every transport plugin deleted from the prefix, a
# program linked against libhvd.a (hvd::hvd_static, then
# `pkg-config --static --libs hvd` with libhvd.so deleted too) runs on 2
# ranks over the Gloo transport compiled into libhvd.a. libhvd.a itself
# leaves no hvd symbol undefined.
. "$(dirname "$0")/lib.sh"
: "${PKG_CONFIG:?PKG_CONFIG must name pkg-config}"
[ "${HVD_WITH_GLOO:-OFF}" = ON ] || skip "hvd was built without Gloo (libhvd.a has no multi-process transport)"

install_tree
archive=$LIBDIR/libhvd.a
[ -f "$archive" ] || fail "no $archive"
# Self-contained: every hvd symbol an object of the archive needs is defined
# by another one (hvd_* C symbols, hvd:: C++ symbols).
nm -C --defined-only "$archive" 2>/dev/null | awk 'NF >= 3 { $1 = ""; $2 = ""; sub(/^  /, ""); print }' | sort -u >"$TMP/defined"
nm -C --undefined-only "$archive" 2>/dev/null | awk 'NF >= 2 { $1 = ""; sub(/^ /, ""); print }' | sort -u >"$TMP/undefined"
comm -23 "$TMP/undefined" "$TMP/defined" | grep -E '(^|[^A-Za-z0-9_])hvd(_|::)' >"$TMP/missing"
[ -s "$TMP/defined" ] || fail "nm found nothing in $archive"
if [ -s "$TMP/missing" ]; then
  head -20 "$TMP/missing" >&2
  fail "$archive needs hvd symbols it does not define ($(wc -l <"$TMP/missing") of them)"
fi
echo "ok: libhvd.a defines every hvd symbol it uses"

rm -f "$LIBDIR"/libhvd_transport_*.so
[ -z "$(ls "$LIBDIR"/libhvd_transport_* 2>/dev/null)" ] || fail "plugins still in $LIBDIR"

# find_package(hvd): hvd::hvd_static from a C-only project.
src=$HVD_SOURCE_DIR/tests/integration/install/consumer
"$CMAKE" -S "$src" -B "$TMP/consumer-build" -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_C_COMPILER="$CC" \
  -DCMAKE_BUILD_TYPE=Release >"$TMP/log" 2>&1 || fail "configuring the find_package(hvd) project failed"
"$CMAKE" --build "$TMP/consumer-build" --target consumer_static >"$TMP/log" 2>&1 \
  || fail "building consumer_static (hvd::hvd_static) failed"
prog=$TMP/consumer-build/consumer_static
if readelf -d "$prog" | grep -q 'NEEDED.*libhvd'; then fail "consumer_static needs a libhvd shared object"; fi
needs_no_build_tree "$prog"
run_job "$prog" gloo

# pkg-config --static: with libhvd.so gone as well, -lhvd can only be libhvd.a.
rm -f "$LIBDIR"/libhvd.so*
export PKG_CONFIG_PATH=$LIBDIR/pkgconfig
flags=$("$PKG_CONFIG" --static --cflags --libs hvd) || fail "pkg-config --static --cflags --libs hvd"
echo "pkg-config --static --cflags --libs hvd: $flags"
# shellcheck disable=SC2086
"$CC" -std=c99 -Wall -Werror -o "$TMP/consumer_pc_static" "$src/consumer.c" $flags >"$TMP/log" 2>&1 \
  || fail "cc with pkg-config --static flags failed"
if readelf -d "$TMP/consumer_pc_static" | grep -q 'NEEDED.*libhvd'; then fail "the pkg-config static program needs a libhvd shared object"; fi
run_job "$TMP/consumer_pc_static" gloo
