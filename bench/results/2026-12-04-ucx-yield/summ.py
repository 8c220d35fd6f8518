import json, statistics, collections, sys
recs=[json.loads(l, object_pairs_hook=lambda p: {**{k:v for k,v in reversed(p)}}) for l in open(sys.argv[1] if len(sys.argv) > 1 else "output.jsonl")]
d=collections.defaultdict(list)
for r in recs: d[(r["layout"],r["hier"],r["bytes"],r["variant"])].append(r["time_us"])
variants=["sleep","yield","spin","mpi"]
print("| layout | hier | size | " + " | ".join(variants) + " | yield ÷ sleep |")
print("|---|--:|--:|" + "--:|"*len(variants) + "--:|")
for layout in ("2x2","4x1"):
  for hier in (0,1):
    for b in (4,65536,1<<20,16<<20):
      med={v: statistics.median(d[(layout,hier,b,v)]) for v in variants if d[(layout,hier,b,v)]}
      cells=[f"{med[v]:.0f}" if v in med else "-" for v in variants]
      ratio = med["sleep"]/med["yield"] if "sleep" in med and "yield" in med else 0
      print(f"| {layout} | {hier} | {b} | " + " | ".join(cells) + f" | {ratio:.2f}× |")
