# A third party's transport plugin, built from the installed headers alone.
#
#   third_party_plugin.sh p2p          the plugin's table, driven directly
#   third_party_plugin.sh collectives  hvd's collectives over the plugin
#
# Installs the build folder into a temporary prefix (cmake --install, see
# ../install/lib.sh), compiles tests/plugins/uds_transport.c as
# libhvd_transport_uds.so with -std=c99 -pedantic -Wall -Wextra -Werror and
# no include folder but <prefix>/include, and checks that it exports only
# hvd_transport_plugin and needs no libhvd. Then:
#  p2p:         tests/plugins/uds_p2p_check.c dlopens it and drives the
#               table across forked ranks (2, 3, 4 ranks, lost and
#               missing ranks, timeouts, abort); a second run builds both
#               under AddressSanitizer (leaks, use after free), where the
#               compiler can.
#  collectives: tests/plugins/collective_suite.c, linked against the
#               installed libhvd only, runs under the installed hvdrun at 2
#               and 3 ranks with HVD_TRANSPORT=uds and HVD_TRANSPORT_PATH set
#               to the plugin's folder; every rank must print its "checks
#               passed" line with transport=uds; each np runs three ways:
#               the core's choice (shared memory first), HVD_SHM=0 (every
#               collective over the plugin's isend/irecv), and HVD_SHM=0 with
#               the other allreduce and broadcast algorithms.
mode=${1:?usage: third_party_plugin.sh p2p|collectives}
. "$(dirname "$0")/../install/lib.sh"
SRC=$HVD_SOURCE_DIR/tests/plugins
READELF=${READELF:-readelf}

install_tree
[ -f "$PREFIX/include/hvd_transport.h" ] || fail "no $PREFIX/include/hvd_transport.h after install"
[ -f "$PREFIX/include/hvd.h" ] || fail "no $PREFIX/include/hvd.h after install"

# The plugin: C99, warnings as errors, the installed headers only.
mkdir -p "$TMP/plugin" || fail "mkdir"
SO=$TMP/plugin/libhvd_transport_uds.so
"$CC" -std=c99 -pedantic -Wall -Wextra -Werror -O2 -fPIC -shared -I"$PREFIX/include" \
  -o "$SO" "$SRC/uds_transport.c" -pthread >"$TMP/log" 2>&1 || fail "cc uds_transport.c failed"
exports=$("$READELF" --dyn-syms -W "$SO" | awk '$5 == "GLOBAL" && $7 != "UND" {print $8}' | sort)
[ "$exports" = hvd_transport_plugin ] || fail "the plugin exports '$exports', not only hvd_transport_plugin"
if "$READELF" -d "$SO" | grep -q 'NEEDED.*libhvd'; then fail "the plugin links against libhvd"; fi
needs_no_build_tree "$SO"
echo "ok: uds_transport.c builds as C99 from $PREFIX/include alone; exports hvd_transport_plugin only"

case "$mode" in
p2p)
  "$CC" -std=c99 -pedantic -Wall -Wextra -Werror -O2 -I"$PREFIX/include" -o "$TMP/uds_p2p_check" \
    "$SRC/uds_p2p_check.c" -ldl -pthread >"$TMP/log" 2>&1 || fail "cc uds_p2p_check.c failed"
  timeout -k 5 200 "$TMP/uds_p2p_check" "$SO" >"$TMP/out" 2>"$TMP/err" </dev/null
  rc=$?
  cat "$TMP/out"
  [ "$rc" = 0 ] || fail "uds_p2p_check exited with $rc"
  grep -qx "all passed" "$TMP/out" || fail "uds_p2p_check did not say 'all passed'"
  # Again under AddressSanitizer: finalize must free every request, and no
  # path may touch freed memory. Skipped where the compiler cannot.
  mkdir -p "$TMP/asan"
  if "$CC" -std=c99 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fPIC -shared \
       -I"$PREFIX/include" -o "$TMP/asan/libhvd_transport_uds.so" "$SRC/uds_transport.c" -pthread \
       >"$TMP/log" 2>&1 &&
     "$CC" -std=c99 -g -fsanitize=address,undefined -I"$PREFIX/include" -o "$TMP/asan/check" \
       "$SRC/uds_p2p_check.c" -ldl -pthread >>"$TMP/log" 2>&1 &&
     "$TMP/asan/check" 2>&1 | grep -q usage; then
    UDS_CHECK_QUIET=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=halt_on_error=1 \
      timeout -k 5 200 "$TMP/asan/check" "$TMP/asan/libhvd_transport_uds.so" >"$TMP/out" 2>"$TMP/err" </dev/null
    rc=$?
    [ "$rc" = 0 ] || fail "uds_p2p_check under AddressSanitizer exited with $rc"
    if grep -q "Sanitizer" "$TMP/err"; then fail "sanitizer reports under AddressSanitizer"; fi
    echo "ok: uds_p2p_check under AddressSanitizer and UBSan: no leak, no error"
  else
    echo "note: $CC cannot build with -fsanitize=address,undefined here; that run is left out"
  fi
  ;;
collectives)
  "$CC" -std=c99 -pedantic -Wall -Wextra -Werror -O2 -I"$PREFIX/include" -o "$TMP/collective_suite" \
    "$SRC/collective_suite.c" -L"$LIBDIR" -lhvd -lm -Wl,-rpath,"$LIBDIR" >"$TMP/log" 2>&1 ||
    fail "cc collective_suite.c against the installed libhvd failed"
  needs_no_build_tree "$TMP/collective_suite"
  # Three ways through the core: its own choice (shared memory first, all
  # ranks being on one host), the point-to-point algorithms only (HVD_SHM=0),
  # and the other point-to-point algorithm where a collective has two.
  for np in 2 3; do
    for how in auto p2p p2p-alt; do
      case $how in
        auto) extra=() ;;
        p2p) extra=(HVD_SHM=0) ;;
        p2p-alt) extra=(HVD_SHM=0 HVD_ALGORITHM_ALLREDUCE=ring HVD_ALGORITHM_BROADCAST=chain) ;;
      esac
      env "${extra[@]}" HVD_TRANSPORT=uds HVD_TRANSPORT_PATH="$TMP/plugin" \
        timeout -k 5 300 "$BINDIR/hvdrun" -np "$np" --start-timeout 60 "$TMP/collective_suite" uds \
        >"$TMP/out" 2>"$TMP/err" </dev/null
      rc=$?
      [ "$rc" = 0 ] || fail "hvdrun -np $np collective_suite over uds ($how: ${extra[*]}) exited with $rc"
      for ((r = 0; r < np; r++)); do
        grep -Eq "^rank $r/$np transport=uds: [0-9]+ checks passed$" "$TMP/out" ||
          fail "rank $r of $np ($how) printed no 'transport=uds: N checks passed' line"
      done
      echo "ok: hvdrun -np $np ($how${extra[*]:+: ${extra[*]}}): the collective suite over the uds plugin passed on every rank"
    done
  done
  ;;
*) fail "unknown mode '$mode' (p2p or collectives)" ;;
esac
