#!/usr/bin/env bash
# test_linkage.sh LIBHVD KERNELS: libhvd_cuda_kernels.so links the shared CUDA
# runtime (libcudart.so.N, the one the core loads; not the static runtime),
# not libhvd, and exports only hvd_cuda_kernels_v1; libhvd.so links no CUDA
# runtime (it loads both with dlopen).
set -u
libhvd=$1; kernels=$2
fail() { echo "FAIL: $*"; exit 1; }
[ -f "$kernels" ] || fail "$kernels not found"
kdeps=$(ldd "$kernels") || fail "ldd $kernels failed"
echo "$kdeps"
echo "$kdeps" | grep -qE "libcudart\.so\.[0-9]+" || fail "the kernels library does not link libcudart.so"
echo "$kdeps" | grep -q "not found" && fail "the kernels library has unresolved libraries"
echo "$kdeps" | grep -q "libhvd\.so" && fail "the kernels library links libhvd"
readelf -d "$kernels" | grep -qE "NEEDED.*libcudart\.so" || fail "libcudart.so is not NEEDED by the kernels library"
# The static runtime would carry cudaLaunchKernel itself (and its own state).
nm -D --defined-only "$kernels" | grep -q " cudaLaunchKernel" && fail "the kernels library carries the CUDA runtime (static cudart)"
syms=$(nm -D --defined-only "$kernels" | awk '$2 ~ /^[TDBRVWiu]$/ {print $3}' | sort)
echo "exported: $syms"
[ "$syms" = "hvd_cuda_kernels_v1" ] || fail "the kernels library exports more than hvd_cuda_kernels_v1"
deps=$(ldd "$libhvd") || fail "ldd $libhvd failed"
echo "$deps"
echo "$deps" | grep -qE "lib(cuda|cudart)\.so" && fail "libhvd.so links the CUDA runtime or driver"
readelf -d "$libhvd" | grep -qiE "NEEDED.*(cudart|hvd_cuda_kernels)" && fail "libhvd.so names the CUDA runtime or the kernels library as NEEDED"
echo PASS
