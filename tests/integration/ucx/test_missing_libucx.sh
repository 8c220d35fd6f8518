#!/usr/bin/env bash
# test_missing_libucx.sh HVDRUN PROG: UCX's library missing at run time (the
# plugin built, libucp unusable: here hidden in a private mount namespace by
# binding /dev/null over it). hvd_init over UCX must fail at once with the
# transport's "not available" error naming the plugin it tried and the UCX
# library it could not load, as for any other plugin; never a crash or hang.
# Needs root (a mount namespace); skipped (77) without.
set -u
hvdrun=$1; prog=$2
fail() { echo "FAIL: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root for a private mount namespace"; exit 77; }
command -v unshare >/dev/null || { echo "SKIP: no unshare"; exit 77; }
ucp=$(ldd "$(dirname "$hvdrun")/../lib/libhvd_transport_ucx.so" 2>/dev/null |
      awk '/libucp\.so/ {print $3; exit}')
[ -n "$ucp" ] && [ -f "$ucp" ] || fail "cannot find the libucp the plugin links"
ucp=$(readlink -f "$ucp")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s)
unshare -m sh -c 'mount --bind /dev/null "$1" && shift && exec "$@"' sh "$ucp" \
  env HVD_TRANSPORT=ucx timeout -k 5 60 "$hvdrun" -np 2 --start-timeout 30 "$prog" >"$out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
cat "$out"
[ "$rc" -ne 0 ] || fail "the job succeeded without libucp"
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the job hung"
grep -q "transport 'ucx' is not available" "$out" || fail "no 'transport not available' error"
grep -q "libhvd_transport_ucx.so" "$out" || fail "the error does not name the plugin it tried"
grep -q "libucp.so" "$out" || fail "the error does not name the UCX library it could not load"
grep -qiE "segmentation|core dumped|terminate called" "$out" && fail "a crash"
[ "$took" -lt 20 ] || fail "took ${took}s"
echo "PASS (${took}s)"
