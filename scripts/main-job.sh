#!/usr/bin/env bash
# Installs, builds, and runs the main job: a PyTorch model trained
# data-parallel over 2 processes on the embedded default transport (Gloo),
# started by hvdrun, on scikit-learn's bundled digits data set; then the same
# idea in plain C.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh python
scripts/build.sh >/dev/null
export HVD_LIBRARY_PATH=$PWD/build/lib
echo "== PyTorch, 2 processes: hvdrun -np 2 python examples/python/train_torch.py =="
build/bin/hvdrun -np 2 python3 examples/python/train_torch.py --checkpoint-dir "${TMPDIR:-/tmp}/hvd_torch_checkpoints"
echo "== C linear regression, 2 processes: hvdrun -np 2 build/bin/train_linreg =="
build/bin/hvdrun -np 2 build/bin/train_linreg 20 "${TMPDIR:-/tmp}/hvd_linreg.ckpt"
