#!/usr/bin/env bash
# Installs what hvd needs on a fresh Debian bookworm machine, skipping what is
# already there. Usage: scripts/install-deps.sh [core] [python] ...
# (no argument = everything the test suites need).
set -euo pipefail
cd "$(dirname "$0")/.."

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(core)

apt_core=(cmake g++ make libgloo-dev libgtest-dev libcmocka-dev libssl-dev openmpi-bin
          libopenmpi-dev openssh-server openssh-client binutils procps python3)

apt_want=()
for g in "${groups[@]}"; do
  case "$g" in
    core) apt_want+=("${apt_core[@]}") ;;
    *) echo "install-deps: unknown group '$g'" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${apt_want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "install-deps: apt-get install ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "install-deps: ${groups[*]}: ready"
