#!/usr/bin/env bash
# install_peers.sh -- OPTIONAL: install the benchmark suite's extra CPU peers, Intel oneCCL and
# DeepSpeed's shared-memory allreduce with pip, and raw UCX's ucx_perftest with apt. Nothing
# else in hvd needs them; the suite measures each peer where it is installed and otherwise
# records why it was skipped.
#
#   bench/suite/install_peers.sh [--only oneccl|deepspeed|ucx] [PREFIX]
#
#   PREFIX  where oneCCL goes (PREFIX/oneccl); default $HVD_BENCH_PEERS, else
#           /opt/hvd-bench-peers. run_all.py looks there too (same variable, same default).
#
# oneCCL: the oneccl-cpu (libccl) and oneccl-cpu-devel (headers, static archive) wheels and
#   the impi-rt wheel they depend on (Intel MPI: mpiexec.hydra, libmpi.so.12, libfabric and its
#   providers), installed with `pip install --prefix PREFIX/oneccl` rather than into the
#   Python environment: impi-rt ships `mpirun`/`mpiexec` scripts that would otherwise land in
#   the Python's bin folder (and, under pyenv, in a shim ahead of /usr/bin), shadowing Open
#   MPI's mpirun for everything else. Versions: ONECCL_VERSION (default 2021.17.2). Newer
#   oneccl-cpu releases (2022.x) require a `libfabric` wheel that the package index does not
#   have, so pip cannot install them. The bench program (oneccl-bench) is built by CMake when
#   it finds PREFIX/oneccl at configure time (-DHVD_ONECCL_ROOT=... to point elsewhere), or by
#   run_all.py on its own.
#
# DeepSpeed: `pip install deepspeed` into the current Python (DEEPSPEED_VERSION, default
#   0.19.8; it uses the installed torch), then its CPU shared-memory op (ShareMemCommBuilder,
#   the kernel behind deepspeed.comm.inference_all_reduce) is compiled once with the local
#   compiler into torch's extension cache, so the benchmark does not time or repeat that build.
#
# ucx: Debian's ucx-utils (ucx_perftest, for the latency part's raw UCX line beside hvd over
#   its UCX plugin), with apt-get unless it is installed already (as root, else with sudo).
set -euo pipefail

PY=${PYTHON:-python3}
ONLY=""
if [ "${1:-}" = "--only" ]; then
  ONLY=${2:?"--only needs oneccl, deepspeed or ucx"}
  shift 2
fi
PREFIX=${1:-${HVD_BENCH_PEERS:-/opt/hvd-bench-peers}}
ONECCL_VERSION=${ONECCL_VERSION:-2021.17.2}
DEEPSPEED_VERSION=${DEEPSPEED_VERSION:-0.19.8}

install_oneccl() {
  local dest="$PREFIX/oneccl"
  echo "install_peers.sh: oneCCL $ONECCL_VERSION (+ impi-rt) into $dest"
  "$PY" -m pip install --prefix "$dest" --ignore-installed --no-deps --no-warn-script-location \
    "oneccl-cpu==$ONECCL_VERSION" "oneccl-cpu-devel==$ONECCL_VERSION" "impi-rt==$ONECCL_VERSION"
  for f in include/oneapi/ccl.hpp lib/ccl/cpu/lib/libccl.a bin/mpiexec.hydra lib/libmpi.so.12; do
    [ -e "$dest/$f" ] || { echo "install_peers.sh: $dest/$f is missing after the install" >&2; exit 1; }
  done
  echo "install_peers.sh: oneCCL installed; reconfigure the hvd build (cmake) to build oneccl-bench"
}

install_deepspeed() {
  echo "install_peers.sh: DeepSpeed $DEEPSPEED_VERSION into $("$PY" -c 'import sys; print(sys.prefix)')"
  "$PY" -c 'import torch' || { echo "install_peers.sh: torch is not importable by $PY" >&2; exit 1; }
  "$PY" -m pip install "deepspeed==$DEEPSPEED_VERSION"
  echo "install_peers.sh: compiling DeepSpeed's CPU shared-memory op (a minute or two)"
  DS_ACCELERATOR=cpu "$PY" -c '
from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder
m = ShareMemCommBuilder().load()
print("install_peers.sh: shm op ready, vector kernel level", m.vector_kernel_level())
'
}

install_ucx() {
  if dpkg-query -W -f='${Status}' ucx-utils 2>/dev/null | grep -q "install ok installed"; then
    echo "install_peers.sh: ucx-utils is installed ($(command -v ucx_perftest))"
    return
  fi
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "install_peers.sh: apt-get install ucx-utils (ucx_perftest)"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends ucx-utils >/dev/null
  command -v ucx_perftest >/dev/null || { echo "install_peers.sh: no ucx_perftest after the install" >&2; exit 1; }
}

case "$ONLY" in
  "") install_ucx; install_oneccl; install_deepspeed ;;
  oneccl) install_oneccl ;;
  deepspeed) install_deepspeed ;;
  ucx) install_ucx ;;
  *) echo "install_peers.sh: --only takes oneccl, deepspeed or ucx, not '$ONLY'" >&2; exit 2 ;;
esac
