#!/usr/bin/env bash
# Runs the Python SDK's tests. Extra arguments go to pytest.
#   bindings/python/tests/run_tests.sh            # everything
#   bindings/python/tests/run_tests.sh -k numpy   # a subset
# The library comes from HVD_LIBRARY_PATH or the build-tree search (build/lib,
# then build-*/lib); hvdrun from HVD_HVDRUN or the same build tree.
# pytest's exit code 5 ("no tests collected") is turned into a failure, so a
# run that tested nothing never passes.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 -m pytest tests -ra "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "run_tests.sh: pytest collected no tests; failing" >&2
  exit 1
fi
exit "$rc"
