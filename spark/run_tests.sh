#!/usr/bin/env bash
# Spark integration: builds (spark/build.sh: the Java binding, then spark/ with
# javac against the jars of the pyspark wheel), and runs
#   1. the JUnit 5 tests (JUnit's console launcher from Debian's junit5) on a
#      local-cluster[2,1,1024]: real executor JVMs;
#   2. the PySpark helper's tests (bindings/python/tests/test_spark.py).
# Installs pyspark (and pytest, numpy) with pip when missing. Ends with the line
# "spark: N passed, N failed" and exits non-zero on any failure.
# The examples (examples/spark) run as their own ctest test, integration.examples.spark.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
exec 2>&1

# ---- build --------------------------------------------------------------------
# HVD_JAVA_JAR=<jar> skips the Java binding's build (spark/build.sh).
out=$("$here/build.sh") || { echo "spark: build failed"; echo "spark: 0 passed, 1 failed"; exit 1; }
eval "$out"
hvdjar=$HVD_JAVA_JAR
sparkjar=$HVD_SPARK_JAR
build=${HVD_BUILD_DIR:-$root/build-java}
python3 -c "import pytest" 2>/dev/null || python3 -m pip install -q --no-cache-dir pytest
python3 -c "import numpy" 2>/dev/null || python3 -m pip install -q --no-cache-dir numpy
export SPARK_HOME SPARK_SCALA_VERSION JAVA_HOME SPARK_LOCAL_IP=127.0.0.1
console=/usr/share/java/junit-platform-console-standalone.jar
echo "run_tests.sh: Spark $(python3 -c 'import pyspark; print(pyspark.__version__)') at $SPARK_HOME; hvd jar $hvdjar"

target=$here/target
rm -rf "$target/test-classes"
mkdir -p "$target/test-classes"
sparkcp="$SPARK_HOME/jars/*"
javac -nowarn -encoding UTF-8 --release 17 -d "$target/test-classes" -cp "$sparkcp:$hvdjar:$sparkjar:$console" \
  $(find "$here/src/test/java" -name '*.java') || { echo "spark: 0 passed, 1 failed"; exit 1; }

passed=0
failed=0

# ---- 1. Java: JUnit on a local cluster ------------------------------------------
read -r -a jvmopts <<<"$(java -cp "$sparkcp:$target/test-classes" org.hvd.spark.PrintJavaOptions)"
log=$(mktemp)
t0=$(date +%s)
java "${jvmopts[@]}" -Xmx1g \
  -Dhvd.test.executorClasspath="$hvdjar:$sparkjar:$target/test-classes" \
  -Dlog4j2.level=warn \
  -cp "$sparkcp:$hvdjar:$sparkjar:$target/test-classes:$console" \
  org.junit.platform.console.ConsoleLauncher --disable-banner --details=tree --fail-if-no-tests \
  --scan-classpath "$target/test-classes" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
ok=$(grep -E "tests successful" "$log" | grep -oE "[0-9]+" | head -1)
bad=$(grep -E "tests failed" "$log" | grep -oE "[0-9]+" | head -1)
ok=${ok:-0}; bad=${bad:-0}
[ "$rc" -eq 0 ] || [ "$bad" -gt 0 ] || bad=1
echo "run_tests.sh: JUnit (Spark) took $(( $(date +%s) - t0 )) s: $ok passed, $bad failed"
passed=$((passed + ok)); failed=$((failed + bad))

# ---- 2. Python: hvd.spark.run ------------------------------------------------------
t0=$(date +%s)
HVD_TEST_SPARK=1 HVD_LIBRARY_PATH="${HVD_LIBRARY_PATH:-$build/lib}" \
  PYTHONPATH="$root/bindings/python${PYTHONPATH:+:$PYTHONPATH}" \
  python3 -m pytest -p no:cacheprovider -ra -q "$root/bindings/python/tests/test_spark.py" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
line=$(grep -E "[0-9]+ (passed|failed)" "$log" | tail -1)
ok=$(echo "$line" | grep -oE "[0-9]+ passed" | grep -oE "[0-9]+" || true)
bad=0
for n in $(echo "$line" | grep -oE "[0-9]+ (failed|errors?)" | grep -oE "^[0-9]+"); do bad=$((bad + n)); done
ok=${ok:-0}
[ "$rc" -eq 0 ] || [ "$bad" -gt 0 ] || bad=1
echo "run_tests.sh: pytest (PySpark) took $(( $(date +%s) - t0 )) s: $ok passed, $bad failed"
passed=$((passed + ok)); failed=$((failed + bad))
rm -f "$log"

echo "spark: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
