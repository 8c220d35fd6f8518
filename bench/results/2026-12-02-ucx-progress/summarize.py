"""Median over repeats of each (layout, transport, hier, size), BEFORE vs AFTER.
   python3 summarize.py output.jsonl"""
import json
import statistics
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cells = {}
for r in rows:
    k = (r["layout"], r["system"], r["hier"], r["bytes"])
    cells.setdefault(k, {}).setdefault(r["build"], []).append(r["time_us"])


def fmt(us):
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


print("| layout | system | hier | size | before (median) | after (median) | after ÷ before | runs |")
print("| --- | --- | --: | --: | --: | --: | --: | --: |")
for k in sorted(cells, key=lambda k: (k[0], k[1], k[2], k[3])):
    b, a = cells[k].get("BEFORE", []), cells[k].get("AFTER", [])
    if not b or not a:
        continue
    mb, ma = statistics.median(b), statistics.median(a)
    print(f"| {k[0]} | {k[1]} | {k[2]} | {size(k[3])} | {fmt(mb)} | {fmt(ma)} | {ma / mb:.2f}× | {len(b)}+{len(a)} |")
