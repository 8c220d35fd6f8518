#!/usr/bin/env bash
# Builds the hvd Java binding (build.sh) and installs it as the Maven artifact
# org.hvd:hvd-java:0.1.0 (jar with the native libraries, and pom.xml) into a
# local Maven repository, where a project that depends on it resolves it.
#
#   bindings/java/install.sh                   # into /usr/share/maven-repo
#   bindings/java/install.sh ~/.m2/repository  # into another local repository
#
# The default is Debian's /usr/share/maven-repo, the local repository that
# offline Maven uses on this machine (it holds the Maven plugins): projects
# then build with  mvn -o -Dmaven.repo.local=/usr/share/maven-repo package.
# Where Maven can download its plugins, install into ~/.m2/repository (Maven's
# default local repository) and build with a plain  mvn package.
# HVD_BUILD_DIR picks the CMake build folder (as for build.sh).
# Prints the installed jar's path as its last line.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
debian_repo=/usr/share/maven-repo
dest=${1:-$debian_repo}
version=0.1.0

mkdir -p "$dest" 2>/dev/null || true
if [ ! -w "$dest" ]; then
  echo "install.sh: cannot write to $dest (run as its owner, or name another repository: install.sh DIR)" >&2
  exit 1
fi
dest=$(cd "$dest" && pwd)
jar=$("$here/build.sh" | tail -1)
# The install plugin itself comes from Debian's repository (offline).
mvn -o -B -q -Dstyle.color=never -Dmaven.repo.local=$debian_repo \
  org.apache.maven.plugins:maven-install-plugin:3.1.0:install-file \
  -Dfile="$jar" -DpomFile="$here/pom.xml" -DlocalRepositoryPath="$dest" >&2
installed=$dest/org/hvd/hvd-java/$version/hvd-java-$version.jar
[ -f "$installed" ] || { echo "install.sh: $installed was not written" >&2; exit 1; }
echo "install.sh: org.hvd:hvd-java:$version installed in $dest" >&2
echo "$installed"
