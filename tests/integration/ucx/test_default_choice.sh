#!/usr/bin/env bash
# test_default_choice.sh LAUNCH_SIM_HOSTS PROG: the transport a job gets
# when it names none (docs/transports.md), on ranks that count as hosts of
# their own (launch_sim_hosts.sh: HVD_HOSTNAME per rank). PROG is
# train_linreg (20 epochs: a broadcast, then allreduces, checked).
#   - 2 hosts x 1 rank: UCX, rank 0 saying why; every rank connects over it.
#   - 1 host x 2 ranks: Gloo, rank 0 saying the job is on one host.
#   - 2 hosts x 1 rank with libucp hidden from rank 1 only (a private mount
#     namespace binds /dev/null over it; needs root, else this part is
#     skipped): Gloo on both ranks, rank 0 naming rank 1 and its host, rank 1
#     saying why it cannot load UCX.
# Every job must succeed.
set -u
launch=$1; prog=$2
fail() { echo "FAIL: $*"; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export HVD_LOG_LEVEL=debug
count() { grep -cE -- "$2" "$1" || true; }

job() {  # job NAME LAYOUT: runs PROG on the layout, output in $out/NAME
  local name=$1 layout=$2
  "$launch" "$layout" 60 "$prog" 20 "$out/$name.ckpt" >"$out/$name" 2>&1 ||
    { cat "$out/$name"; fail "$name: the job failed"; }
}

job two_hosts 1,1
n=$(count "$out/two_hosts" "transport ucx chosen: the job spans 2 hosts and every rank loads UCX")
[ "$n" -eq 1 ] || { cat "$out/two_hosts"; fail "two_hosts: the choice of UCX logged $n times, want 1 (rank 0)"; }
n=$(count "$out/two_hosts" "transport 'ucx' connected")
[ "$n" -eq 2 ] || { cat "$out/two_hosts"; fail "two_hosts: $n of 2 ranks connected over ucx"; }

job one_host 2
n=$(count "$out/one_host" "transport gloo chosen: one host")
[ "$n" -eq 1 ] || { cat "$out/one_host"; fail "one_host: the choice of Gloo logged $n times, want 1"; }
n=$(count "$out/one_host" "transport 'gloo' connected")
[ "$n" -eq 2 ] || { cat "$out/one_host"; fail "one_host: $n of 2 ranks connected over gloo"; }

if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null; then
  echo "PASS (the part without libucp skipped: needs root and unshare)"
  exit 0
fi
ucp=$(ldd "$(dirname "$prog")/../lib/libhvd_transport_ucx.so" 2>/dev/null |
      awk '/libucp\.so/ {print $3; exit}')
[ -n "$ucp" ] && [ -f "$ucp" ] || fail "cannot find the libucp the plugin links"
ucp=$(readlink -f "$ucp")
# Rank 1 alone runs without libucp: a wrapper of PROG for that rank only.
cat >"$out/wrap.sh" <<EOF
#!/usr/bin/env bash
if [ "\$RANK" = 1 ]; then
  exec unshare -m sh -c 'mount --bind /dev/null "\$1" && shift && exec "\$@"' sh "$ucp" "$prog" "\$@"
fi
exec "$prog" "\$@"
EOF
chmod +x "$out/wrap.sh"
prog="$out/wrap.sh" job no_ucx 1,1
n=$(count "$out/no_ucx" "transport gloo chosen: the job spans 2 hosts, but rank 1 \(host simhost1\) cannot load UCX")
[ "$n" -eq 1 ] || { cat "$out/no_ucx"; fail "no_ucx: rank 0 did not name rank 1 as the reason ($n lines)"; }
n=$(count "$out/no_ucx" "rank 1 \(host simhost1\) cannot load UCX: .*libucp")
[ "$n" -eq 1 ] || { cat "$out/no_ucx"; fail "no_ucx: rank 1 did not say why it cannot load UCX"; }
n=$(count "$out/no_ucx" "transport 'gloo' connected")
[ "$n" -eq 2 ] || { cat "$out/no_ucx"; fail "no_ucx: $n of 2 ranks connected over gloo"; }
grep -hE "chosen|cannot load" "$out"/two_hosts "$out"/one_host "$out"/no_ucx | cut -c1-400
echo "PASS"
