#!/usr/bin/env bash
# Makes (once) and caches a root file system of another Debian release that
# holds python3 and python3-venv and nothing else the project installs: no
# compiler, no libgloo0, no OpenSSL development files, no MPI. The mirror is
# the one this machine's apt sources name for Debian's main archive.
#
#   tests/distro/make-root.sh [RELEASE]   (default trixie)
#
# The root lands in $HVD_DISTRO_CACHE/<release> (default /var/cache/hvd/distro);
# a finished root carries .hvd-root-ready and is reused as it is.
set -euo pipefail
release=${1:-trixie}
cache=${HVD_DISTRO_CACHE:-/var/cache/hvd/distro}
root="$cache/$release"
if [[ -f "$root/.hvd-root-ready" ]]; then
  echo "make-root: $root is ready (cached)"
  exit 0
fi
command -v debootstrap >/dev/null || {
  echo "make-root: debootstrap is missing: scripts/install-deps.sh distro" >&2; exit 1; }

# The Debian archive's URI from the apt sources (deb822 or one-line format):
# the first URI whose suites include this machine's release and component main.
mirror() {
  local codename
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  python3 - "$codename" <<'PY'
import glob, re, sys
codename = sys.argv[1]
files = glob.glob("/etc/apt/sources.list.d/*.sources") + ["/etc/apt/sources.list"] + \
        glob.glob("/etc/apt/sources.list.d/*.list")
for path in files:
    try:
        text = open(path).read()
    except OSError:
        continue
    if path.endswith(".sources"):
        for stanza in re.split(r"\n\s*\n", text):
            f = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
            suites = f.get("Suites", "").split()
            if codename in suites and "main" in f.get("Components", "").split():
                print(f["URIs"].split()[0]); sys.exit(0)
    else:
        for line in text.splitlines():
            m = re.match(r"\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)\s+(.*)", line)
            if m and m.group(2) == codename and "main" in m.group(3).split():
                print(m.group(1)); sys.exit(0)
sys.exit("no Debian main archive for %r in the apt sources" % codename)
PY
}
url=$(mirror)
echo "make-root: debootstrap $release from the archive in this machine's apt sources"
rm -rf "$root.tmp"
mkdir -p "$cache"
t0=$(date +%s)
debootstrap --variant=minbase --include=python3,python3-venv "$release" "$root.tmp" "$url"
# apt's downloaded archives are not part of the root.
rm -rf "$root.tmp"/var/cache/apt/archives/*.deb
touch "$root.tmp/.hvd-root-ready"
mv "$root.tmp" "$root"
echo "make-root: $root made in $(( $(date +%s) - t0 )) s, $(du -sh "$root" | cut -f1)"
