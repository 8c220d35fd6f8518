import json, sys, statistics as st, collections
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l); d[(r["system"], r["bytes"])].append(r["busbw_gbs"])
systems = sorted({k[0] for k in d}, key=lambda s: (s != "gloo-tcp", s))
sizes = sorted({k[1] for k in d})
print("size | " + " | ".join(systems) + "   (busbw GB/s, median [best] of runs)")
for b in sizes:
    base = st.median(d[("gloo-tcp", b)])
    cells = []
    for s in systems:
        v = d[(s, b)]
        cells.append(f"{st.median(v):.2f} [{max(v):.2f}] {st.median(v)/base:.2f}x")
    print(f"{b>>10}K | " + " | ".join(cells))
