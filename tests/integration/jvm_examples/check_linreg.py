"""Checks the final lines of the linear-regression examples (stdin).

  check_linreg.py RANKS MAX_LOSS

Every rank 0..RANKS-1 reports exactly one final loss below MAX_LOSS, all ranks
report the same weights hash, and the "identical on all RANKS ranks" verdict is
true. Prints what it found; exits 1 on the first thing wrong.
"""
import re
import sys

ranks, max_loss = int(sys.argv[1]), float(sys.argv[2])
text = sys.stdin.read()
# examples/java:  rank R of N: final loss L, max |w - w_true| E, weights H identical on all N ranks: true
# examples/spark: rank R: final loss L, max |w - w_true| E, weights H   (+ one verdict line)
found = re.findall(r"^rank (\d+)(?: of (\d+))?: final loss ([0-9.eE+-]+), max \|w - w_true\| "
                   r"([0-9.]+), weights ([0-9a-f]{8})(?: identical on all (\d+) ranks: (\w+))?$",
                   text, re.M)
verdicts = re.findall(r"^weights identical on all (\d+) ranks: (\w+)$", text, re.M)
problems = []
if sorted(int(f[0]) for f in found) != list(range(ranks)):
    problems.append(f"expected one final line per rank 0..{ranks - 1}, got {[f[0] for f in found]}")
for r, n, loss, err, h, n2, ok in found:
    if n and int(n) != ranks:
        problems.append(f"rank {r} reports a world of {n}")
    if not float(loss) < max_loss:
        problems.append(f"rank {r}: final loss {loss} is not below {max_loss}")
    if not float(err) < 0.05:
        problems.append(f"rank {r}: weights {err} away from the true ones")
    if ok and (ok.lower() != "true" or int(n2) != ranks):
        problems.append(f"rank {r}: identical on all {n2} ranks: {ok}")
if len({f[4] for f in found}) > 1:
    problems.append(f"ranks end with different weights: {[f[4] for f in found]}")
for n, ok in verdicts:
    if ok.lower() != "true" or int(n) != ranks:
        problems.append(f"verdict: identical on all {n} ranks: {ok}")
print(f"check_linreg: {len(found)} rank lines, {len(verdicts)} verdict lines, losses "
      f"{[f[2] for f in found]}, weights {sorted({f[4] for f in found})}")
for p in problems:
    print("check_linreg: " + p)
sys.exit(1 if problems or not found else 0)
