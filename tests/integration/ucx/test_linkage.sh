#!/usr/bin/env bash
# test_linkage.sh LIBHVD PLUGIN: libhvd.so must not link UCX (it loads the
# plugin with dlopen); the plugin links ucp and ucs and exports only
# hvd_transport_plugin.
set -u
libhvd=$1; plugin=$2
fail() { echo "FAIL: $*"; exit 1; }
deps=$(ldd "$libhvd") || fail "ldd $libhvd failed"
echo "$deps"
echo "$deps" | grep -qE "lib(ucp|ucs|uct|ucm)\.so" && fail "libhvd.so links UCX"
pdeps=$(ldd "$plugin") || fail "ldd $plugin failed"
echo "$pdeps"
echo "$pdeps" | grep -q "libucp\.so" || fail "the plugin does not link libucp"
echo "$pdeps" | grep -q "libucs\.so" || fail "the plugin does not link libucs"
echo "$pdeps" | grep -q "libhvd\.so" && fail "the plugin links libhvd"
syms=$(nm -D --defined-only "$plugin" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sort)
echo "exported: $syms"
[ "$syms" = "hvd_transport_plugin" ] || fail "the plugin exports more than hvd_transport_plugin"
echo PASS
