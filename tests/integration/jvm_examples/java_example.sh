#!/usr/bin/env bash
# examples/java/TrainLinearRegression.java as its header says: javac against the
# hvd-java jar, then hvdrun -np 2 (and once alone, a world of one). Checks the
# final loss (< 0.02: the noise floor is 0.01), the weights' distance to the
# true ones, and that every rank ends with the same weights.
# HVD_JAVA_JAR=<jar> skips the Java binding's build.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=${HVD_BUILD_DIR:-$root/build-java}
exec 2>&1

jar=${HVD_JAVA_JAR:-}
if [ -z "$jar" ]; then
  jar=$(HVD_BUILD_DIR=$build "$root/bindings/java/build.sh" 2>/dev/null | tail -1) || {
    echo "java_example: the build of the Java binding failed"; exit 1; }
fi
hvdrun=${HVD_HVDRUN:-$build/bin/hvdrun}
[ -x "$hvdrun" ] || cmake --build "$build" --target hvdrun -j 2 >/dev/null
[ -x "$hvdrun" ] || { echo "java_example: no hvdrun at $hvdrun"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

javac -cp "$jar" -d "$tmp/classes" "$root/examples/java/TrainLinearRegression.java" || exit 1
fail=0
t0=$SECONDS
timeout 180 "$hvdrun" -np 2 java -cp "$jar:$tmp/classes" TrainLinearRegression 20 >"$tmp/out2" 2>&1
rc=$?
cat "$tmp/out2"
echo "java_example: hvdrun -np 2 exited $rc after $((SECONDS - t0)) s"
[ "$rc" -eq 0 ] || fail=1
python3 "$here/check_linreg.py" 2 0.02 <"$tmp/out2" || fail=1
# The loss went down from the first epoch's.
first=$(sed -n 's/^epoch 1: loss \([0-9.]*\)$/\1/p' "$tmp/out2")
last=$(sed -n 's/^epoch 20: loss \([0-9.]*\)$/\1/p' "$tmp/out2")
python3 -c "import sys; sys.exit(0 if float('$first') > 10 * float('$last') else 1)" 2>/dev/null || {
  echo "java_example: epoch 1 loss '$first', epoch 20 loss '$last': no tenfold drop"; fail=1; }

timeout 120 java -cp "$jar:$tmp/classes" TrainLinearRegression 5 >"$tmp/out1" 2>&1
rc=$?
cat "$tmp/out1"
[ "$rc" -eq 0 ] || fail=1
python3 "$here/check_linreg.py" 1 0.02 <"$tmp/out1" || fail=1

[ "$fail" -eq 0 ] && echo "java_example: passed" || echo "java_example: FAILED"
exit "$fail"
