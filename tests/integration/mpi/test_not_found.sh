#!/usr/bin/env bash
# test_not_found.sh LIBHVD PLUGIN DLOPEN_HVD: libhvd.so does not need MPI;
# the plugin does, and exports nothing but its tables; a libhvd.so with
# no MPI plugin next to it (and HVD_TRANSPORT_PATH naming an empty folder)
# answers transport "mpi" with HVD_ERR_NOT_FOUND and a clear message, while
# the same program next to the plugin gets a working MPI context.
set -u
libhvd=$1; plugin=$2; prog=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

ldd "$libhvd" >"$tmp/ldd" || fail "ldd $libhvd failed"
cat "$tmp/ldd"
grep -qiE "mpi|open-pal|open-rte|pmix" "$tmp/ldd" && fail "libhvd.so depends on MPI"
ldd "$plugin" | grep -q "libmpi" || fail "the plugin does not link libmpi (so the check above proves nothing)"
exports=$(nm -D --defined-only "$plugin" | awk '$2 ~ /^[TDBRVW]$/ { print $3 }' | sort | tr '\n' ' ')
[ "$exports" = "hvd_transport_plugin " ] || fail "the plugin exports: $exports"

mkdir -p "$tmp/lib" "$tmp/plugins"
cp -L "$libhvd" "$tmp/lib/libhvd.so"
env -u OMPI_COMM_WORLD_RANK -u HVD_TRANSPORT HVD_TRANSPORT_PATH="$tmp/plugins" \
  "$prog" "$tmp/lib/libhvd.so" missing || fail "missing plugin: see above"
# Control: the real build tree, plugin next to libhvd.so.
command -v "${MPIRUN:-mpirun}" >/dev/null 2>&1 || { echo "PASS (control skipped: no mpirun)"; exit 0; }
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 "$prog" "$libhvd" present ||
  fail "with the plugin present: see above"
echo PASS
