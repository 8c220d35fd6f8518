#!/usr/bin/env bash
# Runs the Python SDK's tests. Extra arguments go to pytest.
#   bindings/python/tests/run_tests.sh            # everything
#   bindings/python/tests/run_tests.sh -k numpy   # a subset
#   bindings/python/tests/run_tests.sh tests/test_single_torch.py
# The library comes from HVD_LIBRARY_PATH or the build-tree search (build/lib,
# then build-*/lib); hvdrun from HVD_HVDRUN or the same build tree.
#
# TensorFlow and torch cannot share a process (both bundle LLVM; a process
# that loads both can abort), so the files run in one pytest process per
# group -- core, torch, tensorflow, by the frameworks a file imports (see
# tests/framework_groups.py) -- and the run closes with one line over all of
# them in pytest's format ("=== N passed, M failed, K skipped in Xs ===").
# The exit status is non-zero when any group failed, died, or collected
# nothing (pytest's "no tests collected" included), and when no test ran at
# all. With -x/--exitfirst the groups after a failing one are not run.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fg="$here/framework_groups.py"

groups=$(python3 "$fg" groups) || { echo "run_tests.sh: cannot list the test groups" >&2; exit 1; }
stop_early=0
for a in "$@"; do
  case "$a" in -x|--exitfirst) stop_early=1 ;; esac
done

reports=$(mktemp -d)
trap 'rm -rf "$reports"' EXIT
start=$(date +%s.%N)
runs=()
stopped=()
failed_before=0
for g in $groups; do
  if [ "$failed_before" -eq 1 ]; then
    stopped+=("$g")
    continue
  fi
  echo "run_tests.sh: [$g] one pytest process for the $g group"
  HVD_TEST_GROUP="$g" HVD_TEST_REPORT="$reports/$g.json" python3 -m pytest -ra "$@"
  rc=$?
  runs+=("$reports/$g.json" "$rc")
  if [ "$stop_early" -eq 1 ] && [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then
    failed_before=1
  fi
done
seconds=$(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" \
  "$start" "$(date +%s.%N)")
stopped_list=$(IFS=,; echo "${stopped[*]:-}")
python3 "$fg" combine "$seconds" "$stopped_list" "${runs[@]}"
