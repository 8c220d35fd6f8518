#!/usr/bin/env bash
# Installs, builds, and runs the main job: data-parallel training over 2
# processes on the embedded default transport (Gloo), started by hvdrun.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh core
scripts/build.sh >/dev/null
echo "== linear regression in C, 2 processes (hvdrun -np 2) =="
build/bin/hvdrun -np 2 build/bin/train_linreg 20 "${TMPDIR:-/tmp}/hvd_linreg.ckpt"
