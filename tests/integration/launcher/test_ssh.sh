# The ssh path for real: an sshd started by this test on 127.0.0.2 and a
# spare port, with a host key and a user key made here. hvdrun is told to
# treat the loopback host as remote (HVD_LAUNCHER_FORCE_SSH=1). Skips (77)
# where sshd or ssh-keygen is missing or sshd cannot start.
. "$(dirname "$0")/lib.sh"

skip() { echo "SKIP: $*"; exit 77; }

SSHD=$(command -v sshd || ls /usr/sbin/sshd 2>/dev/null || true)
[ -n "$SSHD" ] || skip "sshd not installed (Debian: apt-get install openssh-server)"
command -v ssh >/dev/null || skip "ssh client not installed"
command -v ssh-keygen >/dev/null || skip "ssh-keygen not installed"
# sshd insists on its privilege separation directory.
if [ ! -d /run/sshd ]; then
  mkdir -p /run/sshd 2>/dev/null && chmod 755 /run/sshd || skip "no /run/sshd and cannot create it"
fi

D="$TMP/ssh"
mkdir -p "$D"
ssh-keygen -q -t ed25519 -N '' -f "$D/host_key" >/dev/null || skip "ssh-keygen failed"
ssh-keygen -q -t ed25519 -N '' -f "$D/user_key" >/dev/null || skip "ssh-keygen failed"
cp "$D/user_key.pub" "$D/authorized_keys"
chmod 600 "$D/user_key" "$D/host_key"

SSHD_PID=""
stop_sshd() {
  if [ -n "$SSHD_PID" ]; then kill "$SSHD_PID" 2>/dev/null; wait "$SSHD_PID" 2>/dev/null; fi
  SSHD_PID=""
}
trap 'stop_sshd; cleanup' EXIT

SSH_OPTS=(-o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile="$D/known_hosts"
          -o ConnectTimeout=5 -i "$D/user_key")
PORT=""
for attempt in 1 2 3 4 5; do
  port=$(( 20000 + (RANDOM % 30000) ))
  cat >"$D/sshd_config" <<CONF
Port $port
ListenAddress 127.0.0.2
HostKey $D/host_key
PidFile $D/sshd.pid
AuthorizedKeysFile $D/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
LogLevel ERROR
CONF
  "$SSHD" -D -e -f "$D/sshd_config" 2>>"$D/sshd.log" &
  SSHD_PID=$!
  for i in $(seq 1 50); do
    if ssh "${SSH_OPTS[@]}" -p "$port" 127.0.0.2 true 2>>"$D/probe.log" </dev/null; then
      PORT=$port
      break 2
    fi
    kill -0 "$SSHD_PID" 2>/dev/null || break
    sleep 0.1
  done
  stop_sshd
done
if [ -z "$PORT" ]; then
  echo "--- sshd log" >&2; tail -n 20 "$D/sshd.log" >&2
  echo "--- ssh probe" >&2; tail -n 5 "$D/probe.log" >&2
  skip "could not start an sshd on 127.0.0.2"
fi
echo "sshd on 127.0.0.2:$PORT"

export HVD_LAUNCHER_FORCE_SSH=1
export HVD_LAUNCHER_SSH_ARGS="-o UserKnownHostsFile=$D/known_hosts"
SSH_ARGS=(-H 127.0.0.2:2 -p "$PORT" -i "$D/user_key")
mkdir -p "$TMP/work dir"
cd "$TMP/work dir"

# 1. Variables, output and working directory through ssh.
run_hvdrun -np 2 "${SSH_ARGS[@]}" -v --tag-output -x HVD_EXTRA="a b'c" sh -c '
  echo "pwd=$(pwd)"
  exec "$1" env --connect' "$MARK" "$RANK_HELPER"
expect_rc 0 "two ranks over ssh"
expect_in "$TMP/err" '^hvdrun:   127\.0\.0\.2 \(ssh\): ranks 0-1$'
for r in 0 1; do
  expect_in "$TMP/out" "^\[$r\]<stdout>: ENV HVD_RANK=$r HVD_SIZE=2 HVD_LOCAL_RANK=$r HVD_LOCAL_SIZE=2 HVD_CROSS_RANK=0 HVD_CROSS_SIZE=1 RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 HVD_HOSTNAME=127\.0\.0\.2$"
  expect_in "$TMP/out" "^\[$r\]<stdout>: SECRET rank=$r ok=1$"
  grep -qxF "[$r]<stdout>: pwd=$TMP/work dir" "$TMP/out" || fail "rank $r did not run in hvdrun's directory"
  grep -qxF "[$r]<stdout>: OPT rank=$r HVD_EXTRA=a b'c" "$TMP/out" || fail "-x value mangled by quoting"
done

# 2. The secret never appears on any command line of this machine.
run_hvdrun -np 2 "${SSH_ARGS[@]}" sh -c '
  printenv HVD_SECRET >"$1/pattern.$HVD_RANK"
  n=$(for f in /proc/[0-9]*/cmdline; do tr "\0" " " <"$f" 2>/dev/null; echo; done | grep -c -F -f "$1/pattern.$HVD_RANK")
  echo "secret on command lines: $n"' "$MARK" "$TMP"
expect_rc 0 "secret check"
[ "$(grep -c '^secret on command lines: 0$' "$TMP/out")" = 2 ] || fail "the secret is visible on a command line"

# 3. A remote rank fails: exit code, message, and the other remote rank dies
# (of the SIGTERM its watcher sends: the grace period is long).
run_hvdrun -np 2 "${SSH_ARGS[@]}" --grace-period 30 sh -c '
  if [ "$HVD_RANK" = 1 ]; then sleep 1; exit 3; fi
  "$1" sleep 60 "$0" &
  exec "$1" sleep 60 "$0"' "$MARK" "$RANK_HELPER"
expect_rc 3 "a remote rank exiting 3"
expect_faster 15 "stopping a remote job"
expect_in "$TMP/err" '^hvdrun: rank 1 \(host 127\.0\.0\.2\) exited with code 3$'
expect_no_survivors

# 4. A command not found on the remote host.
run_hvdrun -np 2 "${SSH_ARGS[@]}" no-such-command-"$MARK"
expect_rc 127 "a missing remote command"
expect_faster 15 "a missing remote command"
expect_in "$TMP/err" 'exited with code 127'
expect_in "$TMP/err" 'No such file or directory'

# 5. SIGTERM to hvdrun stops remote ranks; so does hvdrun dying by SIGKILL.
for sig in TERM KILL; do
  : >"$TMP/out"  # before the job starts: the wait below must not see the last round's lines
  "$HVDRUN" -np 2 "${SSH_ARGS[@]}" --grace-period 2 sh -c '
    "$1" sleep 60 "$0" &
    exec "$1" connect --sleep 60 "$0"' "$MARK" "$RANK_HELPER" >"$TMP/out" 2>"$TMP/err" </dev/null &
  job=$!
  for i in $(seq 1 100); do
    [ "$(grep -c '^connected rank=' "$TMP/out")" = 2 ] && break
    sleep 0.1
  done
  [ "$(grep -c '^connected rank=' "$TMP/out")" = 2 ] || fail "remote ranks did not start"
  kill -s "$sig" "$job"
  { wait "$job"; } 2>/dev/null
  RC=$?
  if [ "$sig" = TERM ]; then expect_rc 143 "SIGTERM to hvdrun"; fi
  # Remote ranks notice ssh going away, then get TERM, then KILL after 2 s.
  for i in $(seq 1 40); do [ -z "$(survivors)" ] && break; sleep 0.25; done
  expect_no_survivors
done

# 7. Elastic workers over ssh (docs/elastic.md): their variables travel.
. "$(dirname "$0")/elastic_lib.sh"
FAKE_PLAN='*@0=done' run_hvdrun --min-np 2 "${SSH_ARGS[@]}" -x RANK_HELPER -x FAKE_PLAN \
  bash "$WORKER" "$MARK"
expect_rc 0 "elastic workers over ssh"
expect_joins 'W 127.0.0.2:0:0 join 0: ok 0 0 2 0' \
             'W 127.0.0.2:1:1 join 0: ok 0 1 2 0'
expect_no_survivors

# 6. ssh failing to log in names the problem.
run_hvdrun -np 1 -H 127.0.0.2:1 -p "$PORT" -i "$D/host_key" true
expect_rc 255 "a key the server does not accept"
expect_in "$TMP/err" 'exited with code 255 \(ssh to 127.0.0.2 was refused: key-based login failed'

echo PASS
