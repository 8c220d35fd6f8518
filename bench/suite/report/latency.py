"""Small-tensor latency: one 4-byte allreduce per step, and its target."""

from .common import LATENCY_BASE, SERIES_LABEL, UCX_PERFTEST, fmt_bytes, fmt_us, spread, table


def latency_recs(recs):
    """The 2-rank latency records: hvd's and its peers' 4-byte steps, ucx_perftest's one-way
    latencies (4 bytes and more)."""
    return [r for r in recs if r.get("kind") == "latency" and r["ranks"] == 2]


def raw_latency(lat):
    """{raw system: its fastest 4-byte record} (raw Gloo: its faster variant)."""
    raw = {}
    for r in lat:
        key = r["system"]
        if key not in ("gloo", "mpi", "torch") + UCX_PERFTEST or r.get("tensor_bytes", 4) != 4:
            continue
        if key not in raw or r["time_us"] < raw[key]["time_us"]:
            raw[key] = r
    return raw


def latency_table(recs):
    lat = latency_recs(recs)
    raw = raw_latency(lat)
    rows = []
    verdicts = []
    for r in sorted(lat, key=lambda r: (r["system"], r.get("tensor_bytes", 4),
                                        -float(r.get("cycle_time_ms", 0) or 0))):
        cyc = r.get("cycle_time_ms")
        base = raw.get(LATENCY_BASE.get(r["system"]))
        over = r["time_us"] - base["time_us"] if base else None
        limited = r["system"].startswith("hvd") and LATENCY_BASE.get(r["system"]) not in UCX_PERFTEST
        limit = float(cyc) * 1000 + 50 if cyc is not None and limited else None
        ok = None if over is None or limit is None else over <= limit
        if ok is not None:
            verdicts.append((r["system"], cyc, over, limit, ok))
        label = SERIES_LABEL.get(r["system"], r["system"])
        if r["system"] == "gloo":
            label = SERIES_LABEL.get("gloo:" + r["variant"], label)
        elif r["system"] in UCX_PERFTEST:
            label += f", {fmt_bytes(r['tensor_bytes'])}"
        rows.append([label, "–" if cyc is None else f"{cyc} ms", fmt_us(r["time_us"]) + spread(r, fmt_us),
                     "–" if over is None else f"{over:+.0f} µs",
                     "–" if limit is None else f"{limit:.0f} µs",
                     "–" if ok is None else ("yes" if ok else "no")])
    return rows, verdicts


def target_latency(recs, horovod_ok):
    _, verdicts = latency_table(recs)
    if not verdicts:
        return None
    parts = [f"{SERIES_LABEL[s]} @ {c} ms: {o:+.0f} µs (limit {l:.0f}, {'ok' if v else 'over'})"
             for s, c, o, l, v in verdicts]
    ok = all(v[4] for v in verdicts)
    hv = [r for r in recs if r.get("kind") == "latency" and r["system"] == "horovod"]
    if hv:
        hl = [r for r in recs if r.get("kind") == "latency" and r["system"].startswith("hvd")]
        for h in hv:
            mine = [r for r in hl if float(r.get("cycle_time_ms", 1)) == float(h.get("cycle_time_ms", 1))]
            if mine:
                m = min(mine, key=lambda r: r["time_us"])
                parts.append(f"vs Horovod @ {h.get('cycle_time_ms')} ms: hvd {fmt_us(m['time_us'])}, "
                             f"Horovod {fmt_us(h['time_us'])}")
                ok = ok and m["time_us"] < h["time_us"]
    elif not horovod_ok:
        parts.append("Horovod comparison not possible (Horovod did not build)")
    return ("Small-tensor latency: hvd's added overhead per step ≤ cycle time + 50 µs; faster "
            "than Horovod's steady state", "; ".join(parts), "met" if ok else "missed")


def latency_section(recs, made):
    """The 4-byte step of every system, its overhead and limit."""
    L = []
    rows, _ = latency_table(recs)
    if rows:
        L.append("## Small-tensor latency\n")
        L.append("One 4-byte allreduce per step, back to back (a training loop's steady state: "
                 "the response cache hits), 2 ranks, median step of the slower rank. Overhead = "
                 "hvd's step − the raw transport's (raw Gloo's faster variant for hvd over Gloo, "
                 "raw MPI for hvd over MPI); target: ≤ cycle time + 50 µs. Raw UCX: "
                 "`ucx_perftest -t tag_lat` (a tag-matching ping-pong between two processes of "
                 "this host; its median over the last 2,048 iterations, one way = half the round "
                 "trip, as it prints it) over tcp and over UCX's shared memory; hvd over UCX's "
                 "overhead is its step − ucx_perftest's 4-byte latency on the same UCX "
                 "transport, shown without a limit (a one-way latency, not an allreduce).\n")
        L.append(table(["system", "cycle time", "step", "overhead", "limit", "within"], rows))
        L.append("")
        if "latency.png" in made:
            L.append("![latency](latency.png)\n")
    return L
