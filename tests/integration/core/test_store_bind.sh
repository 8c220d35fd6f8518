#!/usr/bin/env bash
# Without HVD_SECRET, a torchrun-style job's store (hosted by rank 0) is not
# authenticated. It must then listen only on MASTER_ADDR, never on every
# interface, and say so at WARNING level; only when MASTER_ADDR is not an
# address of this host does it fall back to every interface, with a WARNING
# naming that. With HVD_SECRET there is nothing to warn about.
# The listening address is read from /proc/net/tcp and /proc/net/tcp6.
set -u
prog=$1
fail() { echo "FAIL: $*"; exit 1; }
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# An IPv4 address as /proc/net/tcp writes it (hex of the 32-bit word in host order).
hex4() { python3 -c 'import socket,struct,sys; print("%08X" % struct.unpack("=I", socket.inet_aton(sys.argv[1]))[0])' "$1"; }
# The local addresses (hex) of the sockets listening on port $1, one per line.
listeners() {
  local p; p=$(printf '%04X' "$1")
  awk -v p="$p" 'FNR > 1 && $4 == "0A" { split($2, a, ":"); if (a[2] == p) print a[1] }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null | sort
}
# Whether a TCP connect to $1:$2 succeeds within 2 s.
can_connect() {
  python3 -c 'import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2])), 2)' "$1" "$2" 2>/dev/null
}

# run MASTER_ADDR [VAR=value...]: starts rank 0 of 2, waits until its store
# listens, and sets $seen (listening addresses), $port and $log (stderr file).
run() {
  local addr=$1; shift
  port=$(free_port)
  log=$(mktemp)
  env "$@" RANK=0 WORLD_SIZE=2 MASTER_ADDR="$addr" MASTER_PORT="$port" HVD_START_TIMEOUT=30 \
    timeout 60 "$prog" >/dev/null 2>"$log" &
  pid=$!
  seen=""
  for _ in $(seq 1 200); do
    seen=$(listeners "$port")
    [ -n "$seen" ] && break
    sleep 0.05
  done
}
stop() { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; cat "$log"; rm -f "$log"; }

# 1. MASTER_ADDR 127.0.0.1: only 127.0.0.1 listens.
run 127.0.0.1
got=$seen
warned=$(grep -c "WARNING: no HVD_SECRET: the rendezvous store this rank hosts is NOT authenticated; it listens only on 127.0.0.1:$port" "$log")
stop
[ "$got" = "$(hex4 127.0.0.1)" ] || fail "MASTER_ADDR=127.0.0.1: the store listens on [$got], expected only 127.0.0.1 ($(hex4 127.0.0.1))"
[ "$warned" -ge 1 ] || fail "MASTER_ADDR=127.0.0.1: no WARNING naming the unauthenticated store on 127.0.0.1:$port"
echo "ok: 127.0.0.1 only, with a WARNING"

# 2. MASTER_ADDR a non-loopback address of this host: that address only.
ip4=$(python3 - <<'PY'
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.connect(("192.0.2.123", 9))  # no packet is sent: this only picks a route
    a = s.getsockname()[0]
    print("" if a.startswith("127.") else a)
except OSError:
    print("")
PY
)
if [ -n "$ip4" ]; then
  run "$ip4"
  got=$seen
  reach_own=0; can_connect "$ip4" "$port" && reach_own=1
  reach_lo=0; can_connect 127.0.0.1 "$port" && reach_lo=1
  warned=$(grep -c "WARNING: .*NOT authenticated; it listens only on $ip4:$port" "$log")
  stop
  [ "$got" = "$(hex4 "$ip4")" ] || fail "MASTER_ADDR=$ip4: the store listens on [$got], expected only $ip4 ($(hex4 "$ip4"))"
  [ "$reach_own" -eq 1 ] || fail "MASTER_ADDR=$ip4: cannot connect to the store at $ip4:$port"
  [ "$reach_lo" -eq 0 ] || fail "MASTER_ADDR=$ip4: the store also answers on 127.0.0.1:$port"
  [ "$warned" -ge 1 ] || fail "MASTER_ADDR=$ip4: no WARNING naming the unauthenticated store on $ip4:$port"
  echo "ok: $ip4 only, with a WARNING"
else
  echo "skip: this host has no non-loopback IPv4 address"
fi

# 3. MASTER_ADDR not an address of this host (as behind NAT or a service
# address): every interface, and the WARNING says so.
other=""
for cand in 198.51.100.77 203.0.113.77 192.0.2.77; do
  if ! python3 -c 'import socket,sys; socket.socket().bind((sys.argv[1], 0))' "$cand" 2>/dev/null; then
    other=$cand
    break
  fi
done
[ -n "$other" ] || fail "found no address that is not this host's"
run "$other"
got=$seen
warned=$(grep -c "WARNING: .*NOT authenticated and listens on EVERY interface, port $port ($other is not an address of this host)" "$log")
stop
[ -n "$got" ] || fail "MASTER_ADDR=$other: the store never listened"
[ "$warned" -ge 1 ] || fail "MASTER_ADDR=$other: no WARNING that the store listens on every interface"
echo "ok: $other is not ours: every interface, with a WARNING"

# 4. With HVD_SECRET the store is authenticated: no warning.
run 127.0.0.1 HVD_SECRET="$(python3 -c 'import secrets; print(secrets.token_hex(32))')"
got=$seen
warned=$(grep -c "NOT authenticated" "$log")
stop
[ -n "$got" ] || fail "with HVD_SECRET: the store never listened"
[ "$warned" -eq 0 ] || fail "with HVD_SECRET: warned about an unauthenticated store"
echo "ok: with HVD_SECRET, no warning"
echo PASS
