# Output is forwarded line by line: with --tag-output every line carries its
# rank, and lines from ranks printing long lines fast never mix mid-line.
. "$(dirname "$0")/lib.sh"

N=1000    # lines per rank (half on stdout, half on stderr)
LEN=3000  # payload bytes per line: several lines exceed a pipe's atomic write

# check_stream FILE PREFIX_REGEX STREAM_PARITY: every line is whole and from
# the rank its prefix names; every rank's lines are all there, in order.
check_stream() {
  awk -v N="$N" -v LEN="$LEN" -v P="$3" -v TAGGED="$2" '
    function bad(msg) { print "bad line " NR ": " msg ": " substr($0, 1, 120) > "/dev/stderr"; err = 1; exit 1 }
    {
      line = $0
      if (TAGGED) {
        if (!match(line, /^\[[0-9]+\]<std(out|err)>: /)) bad("no tag")
        tag = substr(line, 2, index(line, "]") - 2)
        line = substr(line, RLENGTH + 1)
      }
      if (line ~ /^R[0-9]+ tail-without-newline$/) { split(line, t, " "); tails[substr(t[1], 2)]++; next }
      n = split(line, f, " ")
      if (n != 4 || f[4] != "END") bad("torn line")
      r = substr(f[1], 2) + 0
      if (TAGGED && tag != r) bad("tag " tag " on a line of rank " r)
      if (length(f[3]) != LEN) bad("payload length " length(f[3]))
      c = substr("abcdefghijklmnopqrstuvwxyz", r % 26 + 1, 1)
      if (f[3] !~ ("^" c "+$")) bad("payload of another rank")
      if (f[2] % 2 != P) bad("line on the wrong stream")
      want = (r in next_i) ? next_i[r] : P
      if (f[2] + 0 != want) bad("line " f[2] " of rank " r " out of order (expected " want ")")
      next_i[r] = f[2] + 2
      count[r]++
    }
    END {
      if (err) exit 1
      for (r = 0; r < 4; r++) {
        if (count[r] != N / 2) { print "rank " r ": " count[r] " lines, expected " N / 2 > "/dev/stderr"; exit 1 }
        if (P == 0 && tails[r] != 1) { print "rank " r ": last partial line missing" > "/dev/stderr"; exit 1 }
      }
    }' "$1"
}

# Rank r sends even lines to stdout and odd ones to stderr.
for tagged in 1 0; do
  flags=()
  [ "$tagged" = 1 ] && flags=(--tag-output)
  run_hvdrun -np 4 "${flags[@]}" "$RANK_HELPER" spam "$N" "$LEN"
  expect_rc 0 "spam (tagged=$tagged)"
  check_stream "$TMP/out" "$tagged" 0 || fail "stdout (tagged=$tagged) mixed or incomplete"
  check_stream "$TMP/err" "$tagged" 1 || fail "stderr (tagged=$tagged) mixed or incomplete"
done

# The tag format, exactly.
run_hvdrun -np 2 --tag-output sh -c 'echo "out $HVD_RANK"; echo "err $HVD_RANK" >&2' "$MARK"
expect_rc 0 "tag format"
expect_in "$TMP/out" '^\[0\]<stdout>: out 0$'
expect_in "$TMP/out" '^\[1\]<stdout>: out 1$'
expect_in "$TMP/err" '^\[0\]<stderr>: err 0$'
expect_in "$TMP/err" '^\[1\]<stderr>: err 1$'

echo PASS
