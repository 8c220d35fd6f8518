# A C-only CMake project with find_package(hvd CONFIG REQUIRED) and
# CMAKE_PREFIX_PATH=<prefix> links hvd::hvd; the program runs under the
# installed hvdrun over the installed Gloo plugin.
. "$(dirname "$0")/lib.sh"
[ "${HVD_WITH_GLOO:-OFF}" = ON ] || skip "hvd was built without Gloo"

install_tree
src=$HVD_SOURCE_DIR/tests/integration/install/consumer
"$CMAKE" -S "$src" -B "$TMP/consumer-build" -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_C_COMPILER="$CC" \
  -DCMAKE_BUILD_TYPE=Release >"$TMP/log" 2>&1 || fail "configuring the find_package(hvd) project failed"
grep -q "^hvd_DIR:PATH=$LIBDIR/cmake/hvd\$" "$TMP/consumer-build/CMakeCache.txt" \
  || fail "find_package(hvd) did not take $LIBDIR/cmake/hvd"
"$CMAKE" --build "$TMP/consumer-build" --target consumer_shared >"$TMP/log" 2>&1 \
  || fail "building consumer_shared (hvd::hvd) failed"
prog=$TMP/consumer-build/consumer_shared
readelf -d "$prog" | grep -q 'NEEDED.*\[libhvd\.so\.' || fail "consumer_shared does not link libhvd.so"
case ":$(runpath_of "$prog"):" in
  *":$LIBDIR:"*) ;;
  *) fail "consumer_shared's RUNPATH '$(runpath_of "$prog")' lacks $LIBDIR" ;;
esac
needs_no_build_tree "$prog"

run_job "$prog" gloo
