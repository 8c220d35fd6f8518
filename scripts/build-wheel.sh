#!/usr/bin/env bash
# Builds the self-contained binary wheel: dist/hvd-<version>-py3-none-manylinux_<glibc>_x86_64.whl
#
#   scripts/build-wheel.sh [OUT_DIR]        (default dist/)
#
# 1. pip wheel ./bindings/python (scikit-build-core runs CMake; the native
#    files are libhvd.so, the transport plugins and hvdrun);
# 2. auditwheel repair: copies what those files need beyond the manylinux
#    policy (Debian's libgloo.so.0 with hiredis, ibverbs and libnl; OpenSSL's
#    libcrypto is linked statically, see pyproject.toml) into hvd.libs/ under
#    unique names, points the RUNPATHs there and tags the wheel with the
#    lowest policy its symbol versions allow. The optional transports' own libraries (MPI, UCX, CUDA,
#    NCCL) are excluded: those plugins load where the library is present and
#    name what to install where it is not.
#
# Needs: scikit-build-core, auditwheel and patchelf (scripts/install-deps.sh
# wheel). HVD_WHEEL_BUILD_DIR keeps the CMake build folder between runs
# (default build-wheel/); CMAKE_BUILD_PARALLEL_LEVEL sets the build's jobs;
# PYTHON the interpreter whose pip and scikit-build-core build (python3).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
build=${HVD_WHEEL_BUILD_DIR:-$PWD/build-wheel}
for tool in auditwheel patchelf; do
  command -v "$tool" >/dev/null || {
    echo "build-wheel: $tool is missing: scripts/install-deps.sh wheel" >&2; exit 1; }
done
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
"${PYTHON:-python3}" -m pip wheel -v --no-deps --no-build-isolation -w "$raw" \
  --config-settings=build-dir="$build" ./bindings/python
wheels=("$raw"/hvd-*.whl)
[[ ${#wheels[@]} -eq 1 && -f ${wheels[0]} ]] || { echo "build-wheel: no wheel in $raw" >&2; exit 1; }
mkdir -p "$out"
# The optional transports' libraries: found on the user's machine at run time.
optional=(libmpi.so.* libopen-pal.so.* libopen-rte.so.* libucp.so.* libucs.so.* libuct.so.*
          libucm.so.* libcudart.so.* libnccl.so.* libcuda.so.*)
excludes=()
for lib in "${optional[@]}"; do excludes+=(--exclude "$lib"); done
auditwheel repair "${excludes[@]}" -w "$out" "${wheels[0]}"
ls -l "$out"/hvd-*manylinux*.whl
