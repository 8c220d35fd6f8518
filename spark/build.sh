#!/usr/bin/env bash
# Builds the Spark integration: the Java binding's jar (bindings/java/build.sh,
# or the jar named by HVD_JAVA_JAR) and spark/target/hvd-spark-0.1.0.jar, compiled
# with javac against the jars of the pyspark wheel (SPARK_HOME = the pyspark
# package folder; pyspark is installed with pip when missing).
#
# Prints, on stdout, shell assignments for the caller to eval (everything else
# goes to stderr):
#   HVD_JAVA_JAR=...  HVD_SPARK_JAR=...  SPARK_HOME=...  SPARK_SCALA_VERSION=...  JAVA_HOME=...
#
#   eval "$(spark/build.sh)" || exit 1
#
# Why javac and not Maven: Spark's jars are not in Debian's Maven repository and
# no other repository is reachable; the pyspark wheel ships them (about 280
# jars, whose file names carry versions), and javac's "jars/*" class path takes
# whichever pyspark is installed, where Maven would need every jar pinned as a
# system-scope dependency.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
PYSPARK_SPEC=${HVD_PYSPARK_SPEC:-pyspark>=4.0,<5}   # Spark 4 runs on Java 17 (and needs it)

if [ -n "${HVD_JAVA_JAR:-}" ]; then
  hvdjar=$HVD_JAVA_JAR
  [ -f "$hvdjar" ] || { echo "spark/build.sh: HVD_JAVA_JAR=$hvdjar: no such file" >&2; exit 1; }
else
  hvdjar=$("$root/bindings/java/build.sh" package -DskipTests -q | tail -1) || {
    echo "spark/build.sh: the build of the Java binding failed" >&2; exit 1; }
fi

if ! python3 -c "import pyspark" 2>/dev/null; then
  echo "spark/build.sh: pip install $PYSPARK_SPEC" >&2
  t0=$(date +%s)
  python3 -m pip install -q --no-cache-dir "$PYSPARK_SPEC" >&2
  echo "spark/build.sh: pyspark installed in $(( $(date +%s) - t0 )) s" >&2
fi
SPARK_HOME=$(python3 -c "import os, pyspark; print(os.path.dirname(pyspark.__file__))")
# A Spark launched without its bin/ scripts (a driver in a plain JVM, as the
# JUnit run is) must be told its Scala version, or local-cluster workers cannot
# build the executors' class path.
SPARK_SCALA_VERSION=$(ls "$SPARK_HOME/jars" | sed -n 's/^spark-core_\([0-9.]*\)-.*/\1/p' | head -1)
if [ -z "${JAVA_HOME:-}" ]; then
  JAVA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")
fi
export JAVA_HOME

target=$here/target
rm -rf "$target/classes"
mkdir -p "$target/classes"
javac -nowarn -encoding UTF-8 --release 17 -d "$target/classes" -cp "$SPARK_HOME/jars/*:$hvdjar" \
  $(find "$here/src/main/java" -name '*.java') >&2
sparkjar=$target/hvd-spark-0.1.0.jar
rm -f "$sparkjar"
jar cf "$sparkjar" -C "$target/classes" .
printf 'HVD_JAVA_JAR=%q\nHVD_SPARK_JAR=%q\nSPARK_HOME=%q\nSPARK_SCALA_VERSION=%q\nJAVA_HOME=%q\n' \
  "$hvdjar" "$sparkjar" "$SPARK_HOME" "$SPARK_SCALA_VERSION" "$JAVA_HOME"
