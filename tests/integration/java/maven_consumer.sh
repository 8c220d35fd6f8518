#!/usr/bin/env bash
# ctest integration.java.maven: the Java binding as a Maven dependency, the way
# docs/java.md tells a user to take it. bindings/java/install.sh installs
# org.hvd:hvd-java:0.1.0 into a local repository (a temporary one here: links
# to Debian's /usr/share/maven-repo for the plugins, as the real one has them);
# a project in a temporary folder outside this repository, made of the
# pom.xml and Train.java that docs/java.md shows, builds offline against it;
# hvdrun runs it as 2 ranks, and the results must be exact.
# Also checks that the same project fails to resolve before the install.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
build=${HVD_BUILD_DIR:-$root/build-java}
doc=$root/docs/java.md
exec 2>&1

fail() { echo "maven_consumer: FAILED: $*"; exit 1; }

tmp=$(mktemp -d /tmp/hvd-maven-consumer-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
repo=$tmp/m2
mkdir "$repo"
cp -rs /usr/share/maven-repo/. "$repo/"

# The code block that follows the line "<!-- file: NAME -->" in docs/java.md.
doc_block() {
  awk -v want="<!-- file: $1 -->" '
    $0 == want { found = 1; next }
    found == 1 && /^```/ { found = 2; next }
    found == 2 && /^```/ { exit }
    found == 2 { print }' "$doc"
}
app=$tmp/app
mkdir -p "$app/src/main/java"
doc_block pom.xml > "$app/pom.xml"
doc_block Train.java > "$app/src/main/java/Train.java"
[ -s "$app/pom.xml" ] && [ -s "$app/src/main/java/Train.java" ] ||
  fail "docs/java.md has no '<!-- file: pom.xml -->' or '<!-- file: Train.java -->' block"
grep -q '<artifactId>hvd-java</artifactId>' "$app/pom.xml" || fail "the pom in docs/java.md does not depend on hvd-java"

mvn_app() { (cd "$app" && timeout 300 mvn -o -B -Dstyle.color=never -Dmaven.repo.local="$repo" "$@"); }

# 1. Before the install the dependency cannot be resolved.
if mvn_app -q package > "$tmp/before.log" 2>&1; then
  cat "$tmp/before.log"; fail "the project built before org.hvd:hvd-java was installed"
fi
grep -q "org.hvd:hvd-java:jar:0.1.0" "$tmp/before.log" || { cat "$tmp/before.log"; fail "unexpected failure before the install"; }
echo "maven_consumer: before the install: org.hvd:hvd-java:0.1.0 does not resolve (as expected)"

# 2. Install, build, run.
jar=$(timeout 900 "$root/bindings/java/install.sh" "$repo" | tail -1)
[ "$jar" = "$repo/org/hvd/hvd-java/0.1.0/hvd-java-0.1.0.jar" ] || fail "install.sh printed '$jar'"
[ -f "$repo/org/hvd/hvd-java/0.1.0/hvd-java-0.1.0.pom" ] || fail "no pom installed"
mvn_app package || fail "mvn package of the consumer project"
[ -f "$app/target/classes/Train.class" ] || fail "Train.class not compiled"

out=$(cd "$app" && timeout 120 "$build/bin/hvdrun" -np 2 --start-timeout 60 \
  java -Xmx256m -cp "target/classes:$jar" Train) || { echo "$out"; fail "hvdrun -np 2 exited $?"; }
echo "$out"
for r in 0 1; do
  want="rank $r/2: sum 3.0 1.0, buffer 3.0, average 0.5"
  grep -qxF "$want" <<<"$out" || fail "missing the line '$want'"
done
echo "maven_consumer: passed"
