#!/usr/bin/env bash
# Builds the Java binding and runs its JUnit 5 tests (Maven Surefire prints the
# summary): single-process tests, threads-as-ranks tests with several contexts
# in one JVM, and multi-process tests that start 2-3 JVMs through hvdrun.
# Exits non-zero on any failure. Extra arguments go to Maven
# (e.g. -Dtest=MultiProcessTest).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec 2>&1
"$here/build.sh" package "$@"
