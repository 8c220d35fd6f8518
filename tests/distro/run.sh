#!/usr/bin/env bash
# The wheel on another distribution: a debootstrap root of another Debian
# release (tests/distro/make-root.sh, cached) holding only python3 and
# python3-venv, run in its own mount and PID namespace with its own /proc and
# /dev/shm; the cached root stays pristine under an overlay whose writes are
# dropped at the end. Inside (tests/distro/steps.sh): a venv, the wheel and
# numpy from the package index, `hvdrun -np 2` on a numpy training script
# with exact collectives, the clear error for MPI where none is installed,
# then torch and examples/python/train_torch.py.
#
#   tests/distro/run.sh WHEEL [RELEASE]          (default release trixie)
#
# Needs root, network access to the package index and, the first time, to
# the Debian archive. HVD_DISTRO_TORCH_PIP_ARGS: extra pip arguments for the
# torch install (e.g. an index of CPU-only builds); HVD_DISTRO_SKIP_TORCH=1
# skips the torch step (several GB). Prints "distro: PASS" and exits 0 when
# every step passed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
wheel=$(readlink -f "${1:?usage: tests/distro/run.sh WHEEL [RELEASE]}")
release=${2:-trixie}
"$here/make-root.sh" "$release"
lower=${HVD_DISTRO_CACHE:-/var/cache/hvd/distro}/$release
work=$(mktemp -d /tmp/hvd-distro.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/{upper,work,root} "$work/upper/opt/hvd-test" "$work/upper/etc"
cp "$wheel" "$here/train.py" "$here/steps.sh" "$repo/examples/python/train_torch.py" \
   "$work/upper/opt/hvd-test/"
# Name resolution and the certificate bundle this machine's pip trusts.
cp -L /etc/resolv.conf "$work/upper/etc/resolv.conf"
ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
[[ -f $ca ]] && cp -L "$ca" "$work/upper/etc/hvd-pip-ca.crt"
# Everything mounted below lives in the new mount namespace and goes with it.
unshare --mount --pid --fork --propagation private bash -euo pipefail -c '
  w=$1 lower=$2 torch_args=$3 skip_torch=$4
  r=$w/root
  mount -t overlay overlay -o "lowerdir=$lower,upperdir=$w/upper,workdir=$w/work" "$r"
  mount -t proc proc "$r/proc"
  mount -t sysfs -o ro sysfs "$r/sys"
  mount --rbind /dev "$r/dev"
  mount -t tmpfs -o size=1g,mode=1777 tmpfs "$r/dev/shm"
  mount -t tmpfs tmpfs "$r/tmp"
  cert=()
  [[ -f $r/etc/hvd-pip-ca.crt ]] && cert=(PIP_CERT=/etc/hvd-pip-ca.crt)
  exec chroot "$r" /usr/bin/env -i HOME=/root LANG=C.UTF-8 OMP_NUM_THREADS=1 \
    PATH=/usr/local/bin:/usr/bin:/bin PIP_DEFAULT_TIMEOUT=180 "${cert[@]}" \
    HVD_DISTRO_TORCH_PIP_ARGS="$torch_args" HVD_DISTRO_SKIP_TORCH="$skip_torch" \
    /bin/bash /opt/hvd-test/steps.sh
' _ "$work" "$lower" "${HVD_DISTRO_TORCH_PIP_ARGS:-}" "${HVD_DISTRO_SKIP_TORCH:-0}"
