# Progress output is forwarded as it comes, not when the line ends: every '\r'
# update at once, a partial line once the rank's stream has been idle for
# 200 ms; with --tag-output the tag is redrawn after each '\r' but never
# repeated inside a line; two ranks' partial lines never share a line.
#
# The ranks (rank_helper progress) stamp every update with the time they
# wrote it; hvdrun's stdout goes through rank_helper stamp, which notes when
# each piece arrived. Every update must arrive within LIMIT seconds.
. "$(dirname "$0")/lib.sh"

LIMIT=0.5
N=6     # updates per rank
GAP=300 # ms between updates: more than hvdrun's idle time

# run_stamped ARGS...: hvdrun ARGS with its stdout read by the stamper; the
# bytes end up in $TMP/out, the arrival times in $TMP/stamps. Sets RC.
run_stamped() {
  timeout 60 "$HVDRUN" "$@" 2>"$TMP/err" </dev/null |
    timeout 70 "$RANK_HELPER" stamp "$TMP/out" >"$TMP/stamps"
  RC=${PIPESTATUS[0]}
}

# check_latency COUNT MIN: COUNT updates arrived, each once, each between MIN
# and LIMIT seconds after it was written.
check_latency() {
  awk -v COUNT="$1" -v MIN="$2" -v LIMIT="$LIMIT" '
    {
      t = $1
      rest = substr($0, length($1) + 2)
      while (match(rest, /r[0-9]+u[0-9]+@[0-9]+\.[0-9]+/)) {
        tok = substr(rest, RSTART, RLENGTH)
        rest = substr(rest, RSTART + RLENGTH)
        split(tok, a, "@")
        if (a[1] in seen) { print "update " a[1] " arrived twice" > "/dev/stderr"; err = 1; continue }
        seen[a[1]] = 1
        lat = t - a[2]
        if (n++ == 0 || lat < lo) lo = lat
        if (lat > hi) hi = lat
        if (lat > LIMIT || lat < MIN) {
          printf "update %s arrived %.3f s after it was written (allowed: %s to %s s)\n", a[1], lat, MIN, LIMIT > "/dev/stderr"
          err = 1
        }
      }
    }
    END {
      if (n != COUNT) { print n + 0 " updates arrived, expected " COUNT > "/dev/stderr"; err = 1 }
      printf "  %d updates, %.3f to %.3f s from write to hvdrun output\n", n, lo, hi
      exit err
    }' "$TMP/stamps"
}

# check_shape TAGGED RANKS LINES: hvdrun's output is lines of updates and
# '\r's only; each line holds the updates of one rank, in order, with the tag
# (when TAGGED) at its start and after each '\r', and nowhere else; every
# rank's N updates are there. LINES > 0: the output has exactly that many lines.
check_shape() {
  awk -v TAGGED="$1" -v RANKS="$2" -v LINES="$3" -v N="$N" '
    function bad(msg) { print "output line " NR ": " msg > "/dev/stderr"; err = 1 }
    {
      k = split($0, piece, "\r")
      owner = -1
      for (j = 1; j <= k; j++) {
        p = piece[j]
        if (p == "" && j == k) continue
        if (TAGGED) {
          if (!match(p, /^\[[0-9]+\]<stdout>: /)) { bad("no tag: " p); continue }
          tag = substr(p, 2, index(p, "]") - 2) + 0
          p = substr(p, RLENGTH + 1)
          if (p == "" && k == 1) continue  # an empty line
        }
        if (p !~ /^(r[0-9]+u[0-9]+@[0-9]+\.[0-9]+ ?)+$/) { bad("not just updates: " p); continue }
        m = split(p, tok, " ")
        for (i = 1; i <= m; i++) {
          split(tok[i], a, "[ru@]")
          r = a[2] + 0
          u = a[3] + 0
          if (owner < 0) owner = r
          if (r != owner) bad("updates of ranks " owner " and " r " on one line")
          if (TAGGED && r != tag) bad("tag [" tag "] on an update of rank " r)
          if (u != last[r] + 1) bad("rank " r ": update " u " after update " last[r] + 0)
          last[r] = u
        }
      }
    }
    END {
      for (r = 0; r < RANKS; r++) {
        if (last[r] != N) { print "rank " r ": " last[r] + 0 " updates, expected " N > "/dev/stderr"; err = 1 }
      }
      if (LINES > 0 && NR != LINES) { print NR " output lines, expected " LINES > "/dev/stderr"; err = 1 }
      exit err
    }' "$TMP/out"
}

for tagged in 0 1; do
  flags=()
  [ "$tagged" = 1 ] && flags=(--tag-output)

  # '\r' after each update: forwarded as it arrives. One line, redrawn N times.
  echo "cr-end, tagged=$tagged"
  run_stamped -np 1 "${flags[@]}" "$RANK_HELPER" progress cr-end "$N" "$GAP" 0 "$MARK"
  expect_rc 0 "cr-end (tagged=$tagged)"
  check_latency "$N" 0 || fail "cr-end updates late (tagged=$tagged)"
  check_shape "$tagged" 1 1 || fail "cr-end output (tagged=$tagged)"
  [ "$(tr -cd '\r' <"$TMP/out" | wc -c)" = "$N" ] || fail "cr-end: expected $N carriage returns"

  # tqdm's way, '\r' before each update: the text shows after the idle time.
  echo "cr-start, tagged=$tagged"
  run_stamped -np 1 "${flags[@]}" "$RANK_HELPER" progress cr-start "$N" "$GAP" 0 "$MARK"
  expect_rc 0 "cr-start (tagged=$tagged)"
  check_latency "$N" 0.15 || fail "cr-start updates late (tagged=$tagged)"
  check_shape "$tagged" 1 1 || fail "cr-start output (tagged=$tagged)"

  # A line written piece by piece, no '\r': each piece after the idle time,
  # and still one line (with one tag).
  echo "partial, tagged=$tagged"
  run_stamped -np 1 "${flags[@]}" "$RANK_HELPER" progress partial "$N" "$GAP" 0 "$MARK"
  expect_rc 0 "partial (tagged=$tagged)"
  check_latency "$N" 0.15 || fail "partial pieces late or early (tagged=$tagged)"
  check_shape "$tagged" 1 1 || fail "partial output (tagged=$tagged)"

  # Two ranks, the second 130 ms behind the first: their partial lines and
  # their bars overlap in time, but never share an output line.
  for style in partial cr-end; do
    echo "two ranks, $style, tagged=$tagged"
    run_stamped -np 2 "${flags[@]}" "$RANK_HELPER" progress "$style" "$N" "$GAP" 130 "$MARK"
    expect_rc 0 "two ranks $style (tagged=$tagged)"
    check_latency $((2 * N)) 0 || fail "two ranks $style: updates late (tagged=$tagged)"
    check_shape "$tagged" 2 0 || fail "two ranks $style: output mixed (tagged=$tagged)"
  done
done
expect_no_survivors
echo PASS
