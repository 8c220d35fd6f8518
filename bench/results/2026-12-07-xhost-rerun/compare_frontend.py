"""hvd's torch frontend against the faster of Horovod's two cycle times, row
by row, in the earlier cluster run (2026-12-07-xhost-horovod) and in this one.

  python3 compare_frontend.py
"""
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))


def load(path):
    rows = {}
    for line in open(path):
        if not (line.startswith("| 10gbit") or line.startswith("| none")):
            continue
        c = [x.strip() for x in line.strip().strip("|").split("|")]

        def us(s):
            m = re.match(r"([\d.]+) (µs|ms)", s)
            return float(m.group(1)) * (1000 if m.group(2) == "ms" else 1)
        rows[tuple(c[:4])] = dict(hv=us(c[5]), hv01=us(c[6]), torch=us(c[9]))
    return rows


def main():
    a = load(os.path.join(HERE, "..", "2026-12-07-xhost-horovod", "table.md"))
    b = load(os.path.join(HERE, "table.md"))
    n1 = n2 = 0
    print("rate layout op bytes: hvd-torch ÷ Horovod's faster, earlier -> this run")
    for k in sorted(a):
        ra = a[k]["torch"] / min(a[k]["hv"], a[k]["hv01"])
        rb = b[k]["torch"] / min(b[k]["hv"], b[k]["hv01"])
        n1 += ra <= 1
        n2 += rb <= 1
        if int(k[3]) <= 65536:
            print(" ".join(k) + f": {ra:.2f} -> {rb:.2f}")
    print(f"rows at or under Horovod's: {n1} -> {n2} of {len(a)}")


if __name__ == "__main__":
    main()
