#!/usr/bin/env bash
# The same wheel with other framework releases: a fresh venv (no system site
# packages) per pair, the wheel plus one torch or TensorFlow release from the
# package index, and the example for it with 2 ranks (accuracy >= 0.90).
#
#   tests/distro/frameworks.sh WHEEL [SPEC ...]
#
# SPEC is torch==<version> or tensorflow-cpu==<version> (default: torch==2.4.1
# tensorflow-cpu==2.16.2, releases older than the suite's). Needs network
# access to the package index; each venv is removed afterwards. Prints
# "frameworks: PASS" when every pair passed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
wheel=$(readlink -f "${1:?usage: tests/distro/frameworks.sh WHEEL [SPEC ...]}")
shift
specs=("$@")
[[ ${#specs[@]} -gt 0 ]] || specs=(torch==2.4.1 tensorflow-cpu==2.16.2)
work=$(mktemp -d /tmp/hvd-frameworks.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp "$repo/examples/python/train_torch.py" "$repo/examples/python/train_keras.py" \
   "$repo/examples/python/_hvd_path.py" "$work/"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore OMP_NUM_THREADS=1
unset HVD_LIBRARY_PATH HVD_HVDRUN PYTHONPATH LD_LIBRARY_PATH
for spec in "${specs[@]}"; do
  case "$spec" in
    torch*) example=train_torch.py; extra=(scikit-learn tqdm) ;;
    tensorflow*) example=train_keras.py; extra=(scikit-learn) ;;
    *) echo "frameworks: unknown spec $spec" >&2; exit 2 ;;
  esac
  venv="$work/venv"
  rm -rf "$venv" "$work/checkpoints"
  python3 -m venv "$venv"
  t0=$(date +%s)
  "$venv/bin/pip" install -q "$wheel" "$spec" "${extra[@]}"
  version=$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('${spec%%==*}'))")
  echo "frameworks: $spec installed in $(( $(date +%s) - t0 )) s (${spec%%==*} $version)"
  out=$(cd "$work" && PATH="$venv/bin:$PATH" hvdrun -np 2 python "$example" 2>&1) ||
    { echo "$out" | tail -30; echo "frameworks: FAIL: $example with $spec"; exit 1; }
  line=$(echo "$out" | grep "test accuracy:" | tail -1)
  echo "frameworks: $spec: $line"
  acc=$(echo "$line" | sed -n 's/.*test accuracy: \([0-9.]*\) .*2 rank.*/\1/p')
  python3 -c "import sys; sys.exit(0 if float('${acc:-0}') >= 0.90 else 1)" ||
    { echo "frameworks: FAIL: $example with $spec: accuracy ${acc:-none}"; exit 1; }
done
echo "frameworks: PASS"
