#!/usr/bin/env bash
# Builds the hvd Java binding: the native libraries with CMake (libhvd, the
# transport plugins, hvdrun, the SWIG-generated libhvd_jni) and the jar with
# Maven, offline, against Debian's Maven repository. Installs what it needs
# with apt-get when missing (skipping what is present).
#
#   bindings/java/build.sh                      # mvn package -DskipTests
#   bindings/java/build.sh package              # with the JUnit tests
#   HVD_BUILD_DIR=build bindings/java/build.sh  # another CMake build folder
#
# Prints the jar's path as its last line.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${HVD_BUILD_DIR:-$root/build-java}
jobs=${HVD_BUILD_JOBS:-2}
repo=/usr/share/maven-repo

# ---- dependencies (Debian packages) --------------------------------------------
# The Maven plugin versions pinned in pom.xml are the ones Debian 12 ships.
need=()
command -v javac >/dev/null || need+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || need+=(maven)
command -v swig >/dev/null || need+=(swig)
command -v cmake >/dev/null || need+=(cmake)
[ -d $repo/org/apache/maven/plugins/maven-compiler-plugin/3.10.1 ] || need+=(libmaven-compiler-plugin-java)
[ -d $repo/org/apache/maven/plugins/maven-surefire-plugin/2.22.3 ] || need+=(libsurefire-java)
[ -d $repo/org/apache/maven/plugins/maven-jar-plugin/3.3.0 ] || need+=(libmaven-jar-plugin-java)
[ -d $repo/org/apache/maven/plugins/maven-resources-plugin/3.3.0 ] || need+=(libmaven-resources-plugin-java)
[ -d $repo/org/apache/maven/plugins/maven-install-plugin/3.1.0 ] || need+=(libmaven-install-plugin-java)
[ -d $repo/org/junit/jupiter/junit-jupiter-engine/5.9.2 ] || need+=(junit5)
if [ ${#need[@]} -gt 0 ]; then
  echo "build.sh: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi
if [ -z "${JAVA_HOME:-}" ]; then
  JAVA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")
  export JAVA_HOME
fi

# ---- native half ----------------------------------------------------------------
if [ -f "$build/CMakeCache.txt" ]; then
  cmake "$build" >/dev/null  # re-configure as it is (picks up bindings/java)
else
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
targets=(hvd_java_natives)
help=$(cmake --build "$build" --target help 2>/dev/null || true)
for t in hvdrun hvd_fake_elastic_launcher; do  # the multi-process tests' launchers
  if echo "$help" | grep -w "$t" >/dev/null; then targets+=("$t"); fi
done
cmake --build "$build" --target "${targets[@]}" -j "$jobs" >&2
if [ ! -d "$build/java-swig/org/hvd/swig" ]; then
  echo "build.sh: $build has no SWIG output: the Java binding was skipped (swig >= 4 and a JDK needed)" >&2
  exit 1
fi

# ---- the jar ----------------------------------------------------------------------
if [ $# -eq 0 ]; then set -- package -DskipTests; fi
mvn -o -B -Dstyle.color=never -Dmaven.repo.local=$repo -Dhvd.build.dir="$build" -f "$here/pom.xml" "$@" >&2
jar=$here/target/hvd-java-0.1.0.jar
[ -f "$jar" ] || { echo "build.sh: no $jar" >&2; exit 1; }
echo "$jar"
