#!/usr/bin/env bash
# Runs the tests that need a CUDA device (tests/gpu/README.md): the gpu-marked
# Python tests (hvd.torch on CUDA tensors), then the NCCL plugin's ctest tests.
# Without a device the Python tests skip (saying why) and this exits 0.
#   BUILD_DIR=build tests/gpu/run.sh [--multi-gpu] [pytest arguments]
# --multi-gpu also runs the NCCL jobs of 2, 4 and 8 ranks (one GPU each; those
# with more ranks than GPUs skip) and a peer killed mid-job.
set -euo pipefail
if [ "${1:-}" = "--multi-gpu" ]; then
  export HVD_TEST_MULTI_GPU=1
  shift
fi
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
lib="$PWD/$BUILD_DIR/lib/libhvd.so"
if [ ! -e "$lib" ]; then
  echo "run.sh: $lib not found: build first (BUILD_DIR=$BUILD_DIR scripts/build.sh)" >&2
  exit 1
fi
export HVD_LIBRARY_PATH="$lib"
export HVD_HVDRUN="$PWD/$BUILD_DIR/bin/hvdrun"
has_gpu=$(python3 -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)
if [ "$has_gpu" != 1 ]; then
  echo "SKIP: no CUDA device (torch.cuda.is_available() is False or torch is missing); the gpu tests below report skipped"
fi
(cd bindings/python && timeout 900 python3 -m pytest -m gpu -rs tests/test_gpu_torch.py "$@")
if [ "$has_gpu" = 1 ] && ls "$BUILD_DIR"/lib/libhvd_transport_nccl.so >/dev/null 2>&1; then
  timeout 900 ctest --test-dir "$BUILD_DIR" -R "nccl|cuda" --output-on-failure
fi
