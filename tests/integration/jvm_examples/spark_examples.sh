#!/usr/bin/env bash
# examples/spark as their headers and docs/spark.md say, with spark-submit from
# the pyspark wheel on --master local[2]:
#   1. SparkLinearRegression.java: javac against Spark's jars, hvd-java and
#      hvd-spark (spark/build.sh), then spark-submit --jars ... --class;
#   2. pyspark_linreg.py: spark-submit with hvd importable on the driver only
#      (PYTHONPATH=bindings/python; no HVD_LIBRARY_PATH, nothing for executors).
# Each run is bounded (timeout 300 s); checks every rank's final loss (< 0.02:
# the noise floor is 0.01), the weights' distance to the true ones, and that all
# ranks end with the same weights. HVD_JAVA_JAR=<jar> skips the Java binding's build.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
exec 2>&1

out=$("$root/spark/build.sh") || { echo "spark_examples: build failed"; exit 1; }
eval "$out"
export SPARK_HOME SPARK_SCALA_VERSION JAVA_HOME SPARK_LOCAL_IP=127.0.0.1
submit=$SPARK_HOME/bin/spark-submit
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# ---- 1. the Java job --------------------------------------------------------------
javac -cp "$SPARK_HOME/jars/*:$HVD_JAVA_JAR:$HVD_SPARK_JAR" -d "$tmp/classes" \
  "$root/examples/spark/SparkLinearRegression.java" || exit 1
jar cf "$tmp/sparklr.jar" -C "$tmp/classes" .
t0=$SECONDS
timeout 300 "$submit" --master "local[2]" --conf spark.ui.enabled=false \
  --jars "$HVD_JAVA_JAR,$HVD_SPARK_JAR" --class SparkLinearRegression "$tmp/sparklr.jar" 2 20 \
  >"$tmp/java.out" 2>"$tmp/java.err"
rc=$?
cat "$tmp/java.out"
echo "spark_examples: Java job exited $rc after $((SECONDS - t0)) s"
[ "$rc" -eq 0 ] || { tail -40 "$tmp/java.err"; fail=1; }
python3 "$here/check_linreg.py" 2 0.02 <"$tmp/java.out" || fail=1

# ---- 2. the PySpark script -----------------------------------------------------------
t0=$SECONDS
(cd "$tmp" && env -u HVD_LIBRARY_PATH PYTHONPATH="$root/bindings/python" \
  PYSPARK_PYTHON="$(command -v python3)" \
  timeout 300 "$submit" --master "local[2]" --conf spark.ui.enabled=false \
  "$root/examples/spark/pyspark_linreg.py" --ranks 2 --epochs 20) >"$tmp/py.out" 2>"$tmp/py.err"
rc=$?
cat "$tmp/py.out"
echo "spark_examples: PySpark script exited $rc after $((SECONDS - t0)) s"
[ "$rc" -eq 0 ] || { tail -40 "$tmp/py.err"; fail=1; }
python3 "$here/check_linreg.py" 2 0.02 <"$tmp/py.out" || fail=1

[ "$fail" -eq 0 ] && echo "spark_examples: passed" || echo "spark_examples: FAILED"
exit "$fail"
