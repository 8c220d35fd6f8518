#!/usr/bin/env bash
# A simulated cluster of N hosts on this one machine, for multi-host hvd jobs.
#
#   cluster.sh up N [--rate RATE] [--delay D] [--decoy[=NAME]]
#   cluster.sh exec HOST cmd [args...]   run cmd inside HOST (its network,
#                                        host name, IPC and /dev/shm)
#   cluster.sh partition HOST | heal HOST
#   cluster.sh kill-host HOST            kill every process of HOST
#   cluster.sh status | env | down
#
# HOST is h1..hN, hvd-h1..hvd-hN, or 1..N. The cluster is named by
# $HVDC_ID (default "hvd"; letters and digits, at most 12), so several
# can be up at once; its state lives in $HVDC_DIR (default
# /tmp/hvd-cluster-<id>).
#
# What a host is. Each host hI has, of its own:
#   - a network namespace (hvdc-<id>-hI) with lo and eth0, one end of a veth
#     pair whose other end (hI) is a port of bridge br0 in a "switch"
#     namespace (hvdc-<id>-sw). Addresses come from a private 10.x.y.0/24
#     that overlaps no address or route of this machine; nothing is added to
#     the machine's own namespace, so no traffic of the cluster leaves the
#     namespaces made here. The "wire" is a memory copy through the kernel.
#   - a UTS namespace (host name hvd-hI), an IPC namespace, and a mount
#     namespace with a private /dev/shm (tmpfs) and a private /etc/hosts that
#     names every host of the cluster.
#   - an sshd listening on the host's address, port 22, with a host key of its
#     own; root logs in with a client key made for the cluster. ssh_config
#     (in the state directory; `ssh -F` it, or HVD_LAUNCHER_SSH_ARGS="-F ..."
#     for hvdrun) skips host-key checks and uses that key.
# What hosts share: the file system (the build tree, Python, /tmp: a job
# started on one host finds its program on every host) and the PID namespace
# (every host sees every process; a pid is unique across the cluster). The
# library's shared-memory host identity (shm::HostIdentity() in
# src/algorithms/shm/setup.cc: boot id, host name, IPC and PID namespaces) still
# differs between hosts, through the host name and the IPC namespace, and is
# the same for all ranks of one host, since they all run in its namespaces.
#
# Each host's namespaces are held by one process, its anchor (a `sleep`
# renamed hvd-cluster-<id>-hI); everything else enters them with nsenter.
#   --rate RATE    htb rate limit on each host link, both directions (tc rate
#                  units: 100mbit, 1gbit, ...)
#   --delay D      netem delay on each host link; refused where the kernel has
#                  no netem
#   --decoy[=NAME] in each host, before eth0, a bridge NAME (default podman0)
#                  with the same address 10.88.0.1/16 on every host, as
#                  container runtimes leave behind: software that picks the
#                  first interface picks one the other hosts cannot reach.
#   partition      detaches the host's port from the bridge: the host's link
#                  stays up and everything it sends, or is sent to it, is
#                  dropped silently (a cut further along the network, not an
#                  unplugged cable). heal re-attaches it.
#   kill-host      SIGKILLs every process in the host's network namespace (its
#                  sshd included) but the anchor: the host is dead, its
#                  namespaces stay for `exec` and `down`.
#   HVDC_PRIVATE_RUN=1  gives each host a private tmpfs on /run (with an
#                  empty /run/sshd for sshd); done anyway where this machine
#                  has no /run/sshd.
#   down           removes everything up made (processes, namespaces, veths,
#                  bridge, state directory); idempotent, and run by up itself
#                  when up fails half-way.
#
# Exit codes: 0 ok, 1 failure, 2 usage error, 77 this machine cannot run the
# cluster (not root, no network namespaces, no sshd, no netem for --delay):
# one line on stderr says why.
set -euo pipefail

readonly PROG=${0##*/}
readonly REPO=$(cd "$(dirname "$0")/../.." && pwd)
ID=${HVDC_ID:-hvd}
STATE=${HVDC_DIR:-/tmp/hvd-cluster-$ID}
PFX="hvdc-$ID"
SW="$PFX-sw"

die() { echo "$PROG: $*" >&2; exit 1; }
usage() { echo "$PROG: $*" >&2; echo "usage: $PROG up N [--rate RATE] [--delay D] [--decoy[=NAME]] | exec HOST cmd... | partition HOST | heal HOST | kill-host HOST | status | env | down" >&2; exit 2; }
refuse() { echo "$PROG: cannot run here: $*" >&2; exit 77; }

[[ $ID =~ ^[a-zA-Z0-9]{1,12}$ ]] || usage "HVDC_ID must be 1 to 12 letters or digits, not '$ID'"

# ---- helpers ----------------------------------------------------------------

ip2int() {
  local IFS=. a b c d
  read -r a b c d <<<"$1"
  echo $(( (a << 24) | (b << 16) | (c << 8) | d ))
}

# overlaps A/LA B/LB: whether two IPv4 prefixes share an address.
overlaps() {
  local a=$1 la=$2 b=$3 lb=$4 l
  l=$(( la < lb ? la : lb ))
  local mask=$(( l == 0 ? 0 : (0xffffffff << (32 - l)) & 0xffffffff ))
  (( ($(ip2int "$a") & mask) == ($(ip2int "$b") & mask) ))
}

# The machine's own IPv4 prefixes (addresses and routes), "addr len" a line.
machine_prefixes() {
  ip -o -4 addr show | awk '{ for (i = 1; i <= NF; i++) if ($i == "inet") print $(i + 1) }'
  ip -4 route show table all 2>/dev/null | awk '$1 != "default" && $1 != "broadcast" && $1 != "local" && $1 ~ /^[0-9]/ { print $1 } $1 == "local" || $1 == "broadcast" { print $2 }'
}

free_prefix() {   # prints x.y.z (a /24 that overlaps nothing of this machine's)
  local taken base k p len
  taken=$(machine_prefixes | sed 's|$|/32|' | awk -F/ '{ print $1, $2 }')
  for base in 10.147 172.29 192.168; do
    for k in $(seq 0 255); do
      local clash=0
      while read -r p len; do
        [ -n "$p" ] || continue
        if overlaps "$base.$k.0" 24 "$p" "$len"; then clash=1; break; fi
      done <<<"$taken"
      [ $clash -eq 0 ] && { echo "$base.$k"; return 0; }
    done
  done
  return 1
}

host_index() {   # h3 | hvd-h3 | 3  ->  3
  local h=$1
  h=${h#hvd-}; h=${h#h}
  [[ $h =~ ^[0-9]+$ ]] && [ "$h" -ge 1 ] || usage "not a host: '$1'"
  [ -f "$STATE/h$h/anchor.pid" ] || die "no host h$h in cluster '$ID' (is it up? $STATE)"
  echo "$h"
}

anchor_of() { cat "$STATE/h$1/anchor.pid"; }

# Exists and is not a zombie (killed processes wait for init to reap them).
alive() {
  [ -n "${1:-}" ] && [ -r "/proc/$1/stat" ] && [ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" != Z ]
}

# Every cluster namespace that exists, switch last.
our_namespaces() {
  ip netns list 2>/dev/null | awk '{ print $1 }' | grep -E "^$PFX-h[0-9]+\$" || true
  ip netns list 2>/dev/null | awk '{ print $1 }' | grep -Fx -e "$SW" -e "$PFX-probe" || true
}

kill_netns_pids() {   # NS [KEEP_PID]: SIGKILL every process in NS but KEEP_PID
  local ns=$1 keep=${2:-} i pids p
  for i in $(seq 1 50); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    local left=""
    for p in $pids; do [ "$p" = "$keep" ] || left="$left $p"; done
    [ -n "$left" ] || return 0
    # shellcheck disable=SC2086
    kill -KILL $left 2>/dev/null || true
    sleep 0.1
  done
  echo "$PROG: processes still in $ns after 5 s:$(ip netns pids "$ns" | tr '\n' ' ')" >&2
  return 1
}

# ---- verbs --------------------------------------------------------------------

cmd_down() {
  local ns ok=0
  for ns in $(our_namespaces); do
    kill_netns_pids "$ns" || ok=1
    ip netns del "$ns" 2>/dev/null || { echo "$PROG: cannot delete namespace $ns" >&2; ok=1; }
  done
  # Anchors whose network namespace went missing (half-made hosts).
  local f
  for f in "$STATE"/h*/anchor.pid; do
    [ -f "$f" ] || continue
    local a
    a=$(cat "$f")
    if alive "$a" && grep -qx "hvd-cluster-$ID-h[0-9]*" <(tr '\0' '\n' </proc/"$a"/cmdline 2>/dev/null | head -1); then
      kill -KILL "$a" 2>/dev/null || true
    fi
  done
  # Only a directory up made (it writes "size" first), or an empty one.
  if [ -d "$STATE" ] && { [ -f "$STATE/size" ] || [ -z "$(ls -A "$STATE")" ]; }; then
    rm -rf -- "$STATE"
  fi
  return $ok
}

check_machine() {
  [ "$(id -u)" -eq 0 ] || refuse "needs root (network namespaces, veths, sshd on port 22)"
  local c
  for c in unshare nsenter setsid ssh ssh-keygen; do
    command -v "$c" >/dev/null || refuse "no '$c' on PATH"
  done
  if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    "$REPO/scripts/install-deps.sh" core >&2 || true
    command -v ip >/dev/null && command -v tc >/dev/null || refuse "no 'ip'/'tc' (iproute2) and scripts/install-deps.sh core could not install it"
  fi
  ip netns list >/dev/null 2>&1 || refuse "'ip netns' does not work here"
  SSHD=$(command -v sshd || true)
  [ -n "$SSHD" ] || { [ -x /usr/sbin/sshd ] && SSHD=/usr/sbin/sshd; } || true
  if [ -z "$SSHD" ]; then
    echo "$PROG: no sshd: scripts/install-deps.sh core (openssh-server)" >&2
    "$REPO/scripts/install-deps.sh" core >&2 || true
    SSHD=$(command -v sshd || { [ -x /usr/sbin/sshd ] && echo /usr/sbin/sshd; } || true)
    [ -n "$SSHD" ] || refuse "no sshd (openssh-server), and scripts/install-deps.sh core could not install it"
  fi
}

# Probes a namespace feature in a scratch namespace; true when it works.
probe_ns() {   # NAME cmd...: runs "cmd" with @NS@ replaced by the scratch namespace
  local ns="$PFX-probe" rc=0
  ip netns add "$ns" 2>/dev/null || return 1
  "${@//@NS@/$ns}" >/dev/null 2>&1 || rc=1
  ip netns del "$ns" 2>/dev/null || true
  return $rc
}

cmd_up() {
  local n=${1:-}
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] || usage "up: N must be 1 to 64, not '$n'"
  shift
  local rate="" delay="" decoy=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --rate) [ $# -ge 2 ] || usage "--rate needs a value"; rate=$2; shift 2 ;;
      --rate=*) rate=${1#*=}; shift ;;
      --delay) [ $# -ge 2 ] || usage "--delay needs a value"; delay=$2; shift 2 ;;
      --delay=*) delay=${1#*=}; shift ;;
      --decoy) decoy=podman0; shift ;;
      --decoy=*) decoy=${1#*=}; shift ;;
      *) usage "up: unknown option '$1'" ;;
    esac
  done
  [ -z "$rate" ] || [[ $rate =~ ^[0-9]+(\.[0-9]+)?[kmgt]?(bit|bps)$ ]] || usage "--rate: not a tc rate: '$rate' (e.g. 100mbit, 1gbit)"
  [ -z "$delay" ] || [[ $delay =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] || usage "--delay: not a tc time: '$delay' (e.g. 200us, 2ms)"
  if [ -n "$decoy" ]; then
    [[ $decoy =~ ^[a-zA-Z][a-zA-Z0-9_.-]{0,14}$ ]] && [ "$decoy" != eth0 ] && [ "$decoy" != lo ] ||
      usage "--decoy: not a usable interface name: '$decoy'"
  fi

  check_machine
  if [ -e "$STATE" ] || [ -n "$(our_namespaces)" ]; then
    die "cluster '$ID' is already up (or left over): '$PROG down' first (HVDC_ID=$ID)"
  fi
  probe_ns ip -n @NS@ link set lo up || refuse "cannot create a network namespace (ip netns add)"
  probe_ns sh -c "ip -n @NS@ link add b0 type bridge && ip -n @NS@ link add v0 type veth peer name v1" ||
    refuse "cannot create a bridge and a veth pair in a network namespace (kernel without bridge/veth?)"
  unshare --uts --ipc --mount --propagation private -- true 2>/dev/null ||
    refuse "cannot create UTS/IPC/mount namespaces (unshare)"
  if [ -n "$rate" ]; then
    probe_ns tc -n @NS@ qdisc add dev lo root handle 1: htb default 1 ||
      refuse "--rate: no htb qdisc (tc) in this kernel"
  fi
  if [ -n "$delay" ]; then
    probe_ns tc -n @NS@ qdisc add dev lo root netem delay 1ms ||
      refuse "--delay: this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM), so no link delay"
  fi
  local net
  net=$(free_prefix) || die "no /24 in 10.147.x, 172.29.x or 192.168.x overlaps nothing of this machine's"

  # From here on, a failure tears down what was made.
  trap 'rc=$?; if [ $rc -ne 0 ]; then echo "$PROG: up failed; tearing down" >&2; cmd_down || true; fi' EXIT
  trap 'exit 130' INT TERM
  mkdir -p -m 700 "$STATE"
  echo "$n" >"$STATE/size"
  echo "$net" >"$STATE/net"
  ssh-keygen -q -t ed25519 -N '' -C "hvd-cluster-$ID" -f "$STATE/id_ed25519" >/dev/null
  cp "$STATE/id_ed25519.pub" "$STATE/authorized_keys"
  {
    printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n'
    for i in $(seq 1 "$n"); do printf '%s.%d\thvd-h%d\n' "$net" $((10 + i)) "$i"; done
  } >"$STATE/hosts"
  {
    echo "# ssh -F $STATE/ssh_config hvd-h1: the simulated cluster '$ID'"
    echo "Host *"
    echo "  User root"
    echo "  IdentityFile $STATE/id_ed25519"
    echo "  IdentitiesOnly yes"
    echo "  StrictHostKeyChecking no"
    echo "  UserKnownHostsFile $STATE/known_hosts"
    echo "  GlobalKnownHostsFile /dev/null"
    echo "  BatchMode yes"
    echo "  ConnectTimeout 5"
    echo "  LogLevel ERROR"
  } >"$STATE/ssh_config"

  ip netns add "$SW"
  ip -n "$SW" link set lo up
  ip -n "$SW" link add br0 type bridge
  ip -n "$SW" link set br0 up

  local i ns addr privrun=0
  [ -d /run/sshd ] || privrun=1
  [ "${HVDC_PRIVATE_RUN:-0}" = 1 ] && privrun=1
  for i in $(seq 1 "$n"); do
    ns="$PFX-h$i"
    addr="$net.$((10 + i))"
    mkdir -p "$STATE/h$i"
    echo "$addr" >"$STATE/h$i/addr"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    if [ -n "$decoy" ]; then
      # Made first, so it comes before eth0 in the interface list.
      ip -n "$ns" link add "$decoy" type bridge
      ip -n "$ns" addr add 10.88.0.1/16 dev "$decoy"
      ip -n "$ns" link set "$decoy" up
    fi
    ip -n "$SW" link add "h$i" type veth peer name eth0 netns "$ns"
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$SW" link set "h$i" master br0 up
    local dev
    for dev in "$ns:eth0" "$SW:h$i"; do
      if [ -n "$rate" ]; then
        tc -n "${dev%%:*}" qdisc add dev "${dev#*:}" root handle 1: htb default 1
        tc -n "${dev%%:*}" class add dev "${dev#*:}" parent 1: classid 1:1 htb rate "$rate" ceil "$rate" quantum 60000
        [ -z "$delay" ] || tc -n "${dev%%:*}" qdisc add dev "${dev#*:}" parent 1:1 handle 10: netem delay "$delay"
      elif [ -n "$delay" ]; then
        tc -n "${dev%%:*}" qdisc add dev "${dev#*:}" root netem delay "$delay"
      fi
    done

    # The anchor: holds the host's UTS, IPC and mount namespaces (and sits in
    # its network namespace). setsid and /dev/null: it outlives this script
    # and holds no caller's terminal or pipe.
    local setup="hostname hvd-h$i && mount -t tmpfs -o mode=1777,nosuid,nodev hvd-shm /dev/shm && mount --bind '$STATE/hosts' /etc/hosts"
    [ $privrun -eq 0 ] || setup="$setup && mount -t tmpfs -o mode=755 hvd-run /run && mkdir -m 755 /run/sshd"
    setsid ip netns exec "$ns" unshare --uts --ipc --mount --propagation private -- \
      bash -c "$setup && echo \$\$ > '$STATE/h$i/anchor.tmp' && mv '$STATE/h$i/anchor.tmp' '$STATE/h$i/anchor.pid' && exec -a hvd-cluster-$ID-h$i sleep infinity" \
      </dev/null >>"$STATE/h$i/anchor.log" 2>&1 &
    local t
    for t in $(seq 1 100); do
      [ -f "$STATE/h$i/anchor.pid" ] && break
      sleep 0.05
    done
    [ -f "$STATE/h$i/anchor.pid" ] || die "host h$i did not come up: $(cat "$STATE/h$i/anchor.log")"

    ssh-keygen -q -t ed25519 -N '' -C "hvd-h$i" -f "$STATE/h$i/ssh_host_ed25519_key" >/dev/null
    cat >"$STATE/h$i/sshd_config" <<CONF
# sshd of simulated host hvd-h$i (cluster '$ID')
ListenAddress $addr:22
HostKey $STATE/h$i/ssh_host_ed25519_key
PidFile $STATE/h$i/sshd.pid
AuthorizedKeysFile $STATE/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
AllowTcpForwarding no
MaxStartups 128:30:256
MaxSessions 128
# A client cut off (partition) is dropped after ~6 s, and with it its
# session's processes.
ClientAliveInterval 2
ClientAliveCountMax 3
LogLevel ERROR
CONF
    # Checked inside the host, as it will run: sshd -t wants its privilege
    # separation directory, which may exist only in the host's private /run.
    nsenter -t "$(anchor_of "$i")" -n -u -i -m --wd=/ -- "$SSHD" -t -f "$STATE/h$i/sshd_config" ||
      die "sshd rejects $STATE/h$i/sshd_config"
    nsenter -t "$(anchor_of "$i")" -n -u -i -m --wd=/ -- "$SSHD" -f "$STATE/h$i/sshd_config" \
      -E "$STATE/h$i/sshd.log" </dev/null >/dev/null 2>&1 || die "sshd of h$i did not start: $(cat "$STATE/h$i/sshd.log" 2>/dev/null)"
  done

  # Every host reachable over ssh from h1, as itself, within 10 s.
  for i in $(seq 1 "$n"); do
    local got="" t
    for t in $(seq 1 50); do
      got=$(nsenter -t "$(anchor_of 1)" -n -u -i -m --wd=/ -- \
              ssh -F "$STATE/ssh_config" "hvd-h$i" hostname </dev/null 2>>"$STATE/up.log" || true)
      [ "$got" = "hvd-h$i" ] && break
      sleep 0.2
    done
    [ "$got" = "hvd-h$i" ] || die "ssh from hvd-h1 to hvd-h$i failed: $(tail -3 "$STATE/up.log") $(cat "$STATE/h$i/sshd.log" 2>/dev/null)"
  done
  echo "rate=${rate:-none} delay=${delay:-none} decoy=${decoy:-none}" >"$STATE/options"
  trap - EXIT INT TERM
  echo "$PROG: cluster '$ID' up: $n host(s) hvd-h1..hvd-h$n on $net.0/24; ssh -F $STATE/ssh_config"
}

cmd_exec() {
  [ $# -ge 2 ] || usage "exec HOST cmd [args...]"
  local i
  i=$(host_index "$1")
  shift
  # No --fork: nsenter execs the command, so signals and the exit code pass
  # straight through. The PID namespace is shared: no -p.
  exec nsenter -t "$(anchor_of "$i")" -n -u -i -m --wd="$PWD" -- "$@"
}

cmd_partition() {
  [ $# -eq 1 ] || usage "partition HOST"
  local i
  i=$(host_index "$1")
  ip -n "$SW" link set "h$i" nomaster
  touch "$STATE/h$i/partitioned"
}

cmd_heal() {
  [ $# -eq 1 ] || usage "heal HOST"
  local i
  i=$(host_index "$1")
  ip -n "$SW" link set "h$i" master br0
  rm -f "$STATE/h$i/partitioned"
}

cmd_kill_host() {
  [ $# -eq 1 ] || usage "kill-host HOST"
  local i
  i=$(host_index "$1")
  kill_netns_pids "$PFX-h$i" "$(anchor_of "$i")"
  touch "$STATE/h$i/killed"
}

cmd_status() {
  if [ ! -d "$STATE" ]; then
    local left
    left=$(our_namespaces | tr '\n' ' ')
    echo "cluster '$ID': down${left:+ (namespaces left over: $left; run down)}"
    [ -z "$left" ]
    return
  fi
  echo "cluster '$ID': $(cat "$STATE/size" 2>/dev/null) host(s), $(cat "$STATE/net" 2>/dev/null).0/24, $(cat "$STATE/options" 2>/dev/null || echo 'options: ?'), state $STATE"
  local d i a s link procs
  for d in "$STATE"/h*/; do
    i=$(basename "$d"); i=${i#h}
    a=$(cat "$d/anchor.pid" 2>/dev/null || true)
    s=$(cat "$d/sshd.pid" 2>/dev/null || true)
    link="up"
    [ -f "$d/partitioned" ] && link="partitioned"
    procs=$(ip netns pids "$PFX-h$i" 2>/dev/null | wc -l)
    printf 'hvd-h%s  %-15s  anchor %s  sshd %s  link %s  processes %s%s\n' "$i" "$(cat "$d/addr")" \
      "$(alive "$a" && echo "$a" || echo dead)" "$(alive "$s" && echo "$s" || echo dead)" \
      "$link" "$procs" "$([ -f "$d/killed" ] && echo '  (killed)' || true)"
  done
}

cmd_env() {
  [ -d "$STATE" ] || die "cluster '$ID' is not up"
  local n hosts="" i
  n=$(cat "$STATE/size")
  for i in $(seq 1 "$n"); do hosts="$hosts${hosts:+ }hvd-h$i"; done
  printf 'HVDC_DIR=%q\n' "$STATE"
  printf 'HVDC_SSH_CONFIG=%q\n' "$STATE/ssh_config"
  printf 'HVDC_HOSTS=%q\n' "$hosts"
  # hvdrun's ssh and mpirun's ssh agent, both through the cluster's config.
  printf 'HVD_LAUNCHER_SSH_ARGS=%q\n' "-F $STATE/ssh_config"
  printf 'OMPI_MCA_plm_rsh_args=%q\n' "-F $STATE/ssh_config"
}

verb=${1:-}
[ -n "$verb" ] || usage "no verb"
shift
case "$verb" in
  up) cmd_up "$@" ;;
  exec) cmd_exec "$@" ;;
  partition) cmd_partition "$@" ;;
  heal) cmd_heal "$@" ;;
  kill-host) cmd_kill_host "$@" ;;
  status) cmd_status "$@" ;;
  env) cmd_env "$@" ;;
  down) [ "$(id -u)" -eq 0 ] || refuse "needs root"; cmd_down ;;
  -h|--help|help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) usage "unknown verb '$verb'" ;;
esac
