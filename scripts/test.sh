#!/usr/bin/env bash
# Installs, builds, and runs every test suite. Prints one closing line
# "N passed, N failed" over all suites and exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh core || exit 1
scripts/build.sh >/dev/null || { echo "build failed"; exit 1; }

passed=0
failed=0
log=$(mktemp)
# ctest: unit (GoogleTest), capi (CMocka), integration (multi-process).
(cd build && ctest --output-on-failure -j2 --timeout 900) 2>&1 | tee "$log"
summary=$(grep -E "tests passed, [0-9]+ tests failed out of" "$log" | tail -1)
if [ -z "$summary" ]; then
  echo "ctest printed no summary"; failed=$((failed + 1))
else
  total=$(echo "$summary" | sed -E 's/.*out of ([0-9]+).*/\1/')
  nfail=$(echo "$summary" | sed -E 's/.*, ([0-9]+) tests failed.*/\1/')
  [ "$total" -gt 0 ] || { echo "ctest ran no test"; nfail=1; }
  passed=$((passed + total - nfail)); failed=$((failed + nfail))
fi
rm -f "$log"
echo "suites: ${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
