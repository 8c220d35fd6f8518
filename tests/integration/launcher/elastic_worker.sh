# A stand-in for an elastic hvd worker, for the launcher tests: it speaks the
# protocol of docs/elastic.md to hvdrun's store through rank_helper, without
# the library. Run by hvdrun as: bash elastic_worker.sh MARK (MARK: the test's
# marker, so the test can find processes left behind).
#
# Every epoch: join (elastic/join/<id>/<n>), wait for the answer, print it as
#   W <id> join <n>: <answer>
# register its pid under fake/e<epoch>/pid/<rank> and wait for every peer's
# (the stand-in for connecting to them), then do what FAKE_PLAN says for this
# worker and epoch. FAKE_PLAN: words "HOST:SLOT@EPOCH=ACTION", the left side
# a shell pattern ("*@2=done"); the first that matches wins. Actions:
#   train   (the default) run until a peer dies (the stand-in for a failed
#           collective) or elastic/hosts_version goes above the answer's (the
#           stand-in for state.commit()), then join again
#   exitN   exit with code N at once
#   done    wait for every peer to be done too, then exit 0
#   hang    like train, but never join again (sleep instead)
#   stop    like train, but SIGSTOP itself instead of joining again
# While training, once the file FAKE_FINISH exists it prints "W <id> finished"
# and exits 0. On "exit <message>" it prints "W <id> told: <message>" and
# exits 1.
set -u
MARK=${1:-}
RH=${RANK_HELPER:?}
ID=${HVD_ELASTIC_WORKER:?}
SLOTKEY=${ID%:*}
say() { echo "W $ID $*"; }

action_for() {
  local rule
  for rule in ${FAKE_PLAN:-}; do
    # shellcheck disable=SC2254
    case "$SLOTKEY@$1" in
      ${rule%%=*}) echo "${rule#*=}"; return ;;
    esac
  done
  echo train
}

n=0
while :; do
  "$RH" store set "elastic/join/$ID/$n" "$HVD_HOSTNAME" || { say "cannot join"; exit 9; }
  a=$("$RH" store get "elastic/assign/$ID/$n" "${HVD_ELASTIC_TIMEOUT:?}") || { say "no answer to join $n"; exit 8; }
  say "join $n: $a"
  n=$((n + 1))
  case "$a" in
    exit\ *) say "told: ${a#exit }"; exit 1 ;;
  esac
  # shellcheck disable=SC2086
  set -- $a
  E=$2 R=$3 S=$4 HV=$5
  "$RH" store set "fake/e$E/pid/$R" "$$"
  peers=""
  r=0
  while [ $r -lt "$S" ]; do
    p=$("$RH" store get "fake/e$E/pid/$r" 20) || { say "peer $r of epoch $E never came"; exit 7; }
    peers="$peers $p"
    r=$((r + 1))
  done
  act=$(action_for "$E")
  case "$act" in
    exit*) say "exits with ${act#exit}"; exit "${act#exit}" ;;
    done)
      "$RH" store set "fake/e$E/done/$R" 1
      r=0
      while [ $r -lt "$S" ]; do
        "$RH" store get "fake/e$E/done/$r" 20 >/dev/null || { say "peer $r never finished"; exit 6; }
        r=$((r + 1))
      done
      say "done"
      exit 0 ;;
  esac
  # Training: until a peer is lost or the hosts change.
  while :; do
    lost=""
    for p in $peers; do kill -0 "$p" 2>/dev/null || lost=$p; done
    if [ -n "$lost" ]; then say "peer $lost lost"; break; fi
    if [ -n "${FAKE_FINISH:-}" ] && [ -e "$FAKE_FINISH" ]; then say "finished"; exit 0; fi
    hv=$("$RH" store get elastic/hosts_version 5) || { say "no hosts_version"; exit 5; }
    if [ "$hv" -gt "$HV" ]; then say "hosts updated ($hv)"; break; fi
    sleep 0.2
  done
  case "$act" in
    hang) say "hangs"; exec "$RH" sleep 60 "$MARK" ;;
    stop) say "stops"; kill -STOP $$ ;;
  esac
done
