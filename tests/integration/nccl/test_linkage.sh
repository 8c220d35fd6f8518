#!/usr/bin/env bash
# test_linkage.sh LIBHVD PLUGIN: libhvd.so must link neither the CUDA driver,
# the CUDA runtime nor NCCL (it loads the plugin with dlopen); the plugin links
# the CUDA runtime and NCCL, not libhvd, and exports only
# hvd_transport_plugin.
set -u
libhvd=$1; plugin=$2
fail() { echo "FAIL: $*"; exit 1; }
deps=$(ldd "$libhvd") || fail "ldd $libhvd failed"
echo "$deps"
echo "$deps" | grep -qE "lib(cuda|cudart|nccl)\.so" && fail "libhvd.so links CUDA or NCCL"
readelf -d "$libhvd" | grep -qiE "NEEDED.*(cuda|nccl)" && fail "libhvd.so names CUDA or NCCL as NEEDED"
pdeps=$(ldd "$plugin") || fail "ldd $plugin failed"
echo "$pdeps"
echo "$pdeps" | grep -q "libcudart\.so" || fail "the plugin does not link libcudart"
echo "$pdeps" | grep -q "libnccl\.so" || fail "the plugin does not link libnccl"
echo "$pdeps" | grep -q "not found" && fail "the plugin has unresolved libraries"
echo "$pdeps" | grep -q "libhvd\.so" && fail "the plugin links libhvd"
syms=$(nm -D --defined-only "$plugin" | awk '$2 ~ /^[TDBRVWiu]$/ {print $3}' | sort)
echo "exported: $syms"
[ "$syms" = "hvd_transport_plugin" ] || fail "the plugin exports more than hvd_transport_plugin"
echo PASS
