#!/usr/bin/env bash
# build_horovod.sh -- OPTIONAL: build Horovod 0.28.1 (the PyPI sdist) CPU-only against the installed
# torch and install it into a private prefix, leaving the system Python untouched.
#
#   bench/suite/build_horovod.sh [PREFIX] [SDIST_CACHE_DIR]
#
#   PREFIX           where to install (pip install --target); default /opt/horovod-0.28.1
#   SDIST_CACHE_DIR  optional (or env HOROVOD_SDIST_CACHE): a folder that holds, or will be
#                    given, horovod-0.28.1.tar.gz, so a rerun need not download it again
#
# Use it with   PYTHONPATH=PREFIX python3 ...   and   mpirun -x PYTHONPATH ...
#
# Optional: the benchmark suite measures Horovod only where `import horovod.torch` works and
# otherwise leaves it out of the tables; nothing else needs this script.
#
# Why patches are needed: Horovod 0.28.1 (June 2023) predates torch 2.x's newer C++ headers.
# Its horovod/torch/CMakeLists.txt pins CMAKE_CXX_STANDARD 14, while torch 2.15's headers
# refuse anything below C++20 ("#error C++20 or later compatible compiler is required to use
# PyTorch", then hundreds of errors such as std::is_enum_v / std::optional / std::strong_ordering
# missing). Patch 1 raises that one line to 20; no Horovod source file needs changing (the torch
# extension's .cc files and horovod/common compile as C++20 with GCC 12).
# Patch 3 follows from it: the bundled Gloo is built as C++14 (its own -std=c++11, overridden by
# the -std=c++14 that Horovod's top-level CMAKE_CXX_STANDARD 14 appends), where
# `static constexpr ... Store::kDefaultTimeout` plus its out-of-line definition in store.cc is a
# strong symbol, while Horovod's http_store.cc, now C++17+, emits the same member as an inline
# variable, so linking mpi_lib_v2.so fails with "multiple definition of
# gloo::rendezvous::Store::kDefaultTimeout". Building Gloo as C++17 (what Horovod itself does
# for its "compatible17_gloo" copy when TensorFlow needs C++17) makes both inline.
#
# Why CPU-only needs a patch too: Horovod's FindPytorch.cmake sets Pytorch_CUDA when torch was
# built with CUDA (torch.version.cuda) and torch finds a CUDA toolkit (CUDA_HOME, nvcc on PATH, or
# just /usr/local/cuda existing), and horovod/torch/CMakeLists.txt then calls add_cuda()
# unconditionally -- HAVE_CUDA=1, CUDA kernels built and cudart linked -- whatever the
# HOROVOD_GPU_* variables say. No environment setting can turn that off on a machine with a
# CUDA wheel of torch and /usr/local/cuda, and setup.py passes no user CMake flags. Patch 2 adds
# an opt-out: with HOROVOD_WITHOUT_CUDA=1 (a variable made up for this patch) Pytorch_CUDA is
# forced FALSE, so torch is treated as a CPU (CppExtension) build. HOROVOD_GPU_* must stay
# unset (they would request CUDA ops). HOROVOD_WITHOUT_NVTX=1 (a stock Horovod variable) keeps
# it from compiling in NVTX ranges from the CUDA toolkit's headers. CMake still detects nvcc
# (check_language/enable_language(CUDA) in the top-level CMakeLists.txt) but compiles nothing
# with it.
#
# Takes about 3-7 minutes (load-dependent) with MAKEFLAGS=-j2 on a 2-core machine.
set -euo pipefail

PREFIX=${1:-/opt/horovod-0.28.1}
CACHE=${2:-${HOROVOD_SDIST_CACHE:-}}
VERSION=0.28.1
PY=${PYTHON:-python3}

python_ok() { "$PY" -c "$1" >/dev/null 2>&1; }

# --- prerequisites -----------------------------------------------------------------------------
python_ok 'import torch' || { echo "build_horovod.sh: torch is not importable by $PY" >&2; exit 1; }
command -v mpicxx >/dev/null || { echo "build_horovod.sh: mpicxx not found (Open MPI dev files needed)" >&2; exit 1; }
command -v cmake >/dev/null || { echo "build_horovod.sh: cmake (>= 3.13) not found" >&2; exit 1; }
command -v patch >/dev/null || { echo "build_horovod.sh: patch not found" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/build_horovod.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# --- 1. the sdist --------------------------------------------------------------------------------
SDIR=${CACHE:-$WORK}
mkdir -p "$SDIR"
SDIST=$SDIR/horovod-$VERSION.tar.gz
if [[ ! -f $SDIST ]]; then
    "$PY" -m pip download --no-deps --no-binary :all: "horovod==$VERSION" -d "$SDIR"
fi
tar xzf "$SDIST" -C "$WORK"
SRC=$WORK/horovod-$VERSION
cd "$SRC"

# --- 2. the patches ------------------------------------------------------------------------------
# Patch 1: the torch extension is compiled as C++20 (was 14); torch 2.15's headers require C++20.
# Patch 2: HOROVOD_WITHOUT_CUDA=1 makes FindPytorch report a CPU-only torch, so
#          horovod/torch/CMakeLists.txt does not call add_cuda() (HAVE_CUDA stays unset).
# Patch 3: the bundled Gloo is compiled as C++17 (was 14) so that its Store::kDefaultTimeout is
#          an inline variable, as it is in Horovod's C++20 objects (else: multiple definition).
patch -p1 --forward <<'PATCH'
--- a/horovod/torch/CMakeLists.txt
+++ b/horovod/torch/CMakeLists.txt
@@ -64,7 +64,7 @@
 add_definitions(-DPYTORCH_VERSION=${VERSION_DEC} -DTORCH_API_INCLUDE_EXTENSION_H=1)
 set(Pytorch_CXX11 ${Pytorch_CXX11} PARENT_SCOPE)
 if(NOT Pytorch_VERSION VERSION_LESS "1.5.0")
-    set(CMAKE_CXX_STANDARD 14)
+    set(CMAKE_CXX_STANDARD 20)
 endif()
 
 # PyTorch SOURCES
--- a/cmake/Modules/FindPytorch.cmake
+++ b/cmake/Modules/FindPytorch.cmake
@@ -26,6 +26,9 @@
                 OUTPUT_VARIABLE Pytorch_CUDA OUTPUT_STRIP_TRAILING_WHITESPACE)
 string(REGEX REPLACE "No (CUDA|ROCm) runtime[^\n]*\n?" "" Pytorch_CUDA "${Pytorch_CUDA}")
 string(TOUPPER "${Pytorch_CUDA}" Pytorch_CUDA)
+if("$ENV{HOROVOD_WITHOUT_CUDA}" STREQUAL "1")
+    set(Pytorch_CUDA FALSE)  # CPU-only build against a CUDA-enabled torch
+endif()
 
 execute_process(COMMAND ${PY_EXE} -c "import torch; from torch.utils.cpp_extension import ROCM_HOME; print(True if ((torch.version.hip is not None) and (ROCM_HOME is not None)) else False)"
                 OUTPUT_VARIABLE Pytorch_ROCM OUTPUT_STRIP_TRAILING_WHITESPACE)
--- a/third_party/gloo/CMakeLists.txt
+++ b/third_party/gloo/CMakeLists.txt
@@ -117,7 +117,8 @@
 # Compiler flags
 
 if(NOT MSVC)
-  set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} -std=c++11 -fPIC")
+  set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} -std=c++17 -fPIC")
+  set(CMAKE_CXX_STANDARD 17)  # else the top-level CMAKE_CXX_STANDARD 14 appends -std=c++14
 endif()
 
 # Recurse into main project directory
PATCH

# --- 3. build and install (CPU-only: PyTorch + MPI + Gloo) ---------------------------------------
unset HOROVOD_GPU HOROVOD_GPU_OPERATIONS HOROVOD_GPU_ALLREDUCE HOROVOD_GPU_ALLGATHER \
      HOROVOD_GPU_BROADCAST HOROVOD_GPU_ALLTOALL HOROVOD_GPU_REDUCESCATTER HOROVOD_CUDA_HOME
export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
export HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1
export HOROVOD_WITHOUT_CUDA=1 HOROVOD_WITHOUT_NVTX=1
export MAKEFLAGS=${MAKEFLAGS:--j$(nproc)}
mkdir -p "$PREFIX"
# --no-build-isolation: build against the installed torch (an isolated build would fetch another).
# --no-deps: Horovod's plain requirements are added below, only those the system Python lacks, so
# the prefix does not shadow installed packages.
"$PY" -m pip install --no-build-isolation --no-cache-dir --no-deps --upgrade --target "$PREFIX" "$SRC"
missing=()
for pair in cloudpickle:cloudpickle psutil:psutil yaml:pyyaml packaging:packaging; do
    python_ok "import ${pair%%:*}" || missing+=("${pair#*:}")
done
if ((${#missing[@]})); then
    "$PY" -m pip install --no-cache-dir --upgrade --target "$PREFIX" "${missing[@]}"
fi

# --- 4. check ------------------------------------------------------------------------------------
cd /
PYTHONPATH="$PREFIX${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c '
import horovod, horovod.torch as hvd
hvd.init()
print("horovod", horovod.__version__, "size", hvd.size(), "mpi_built", hvd.mpi_built(),
      "gloo_built", hvd.gloo_built(), "cuda_built", hvd.cuda_built())
assert not hvd.cuda_built()
'
echo "build_horovod.sh: Horovod $VERSION installed in $PREFIX (use PYTHONPATH=$PREFIX)"
