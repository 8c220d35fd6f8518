"""The UCX transport (its issue): hvd over UCX against hvd's own paths, raw Gloo and raw UCX."""

from .common import (SERIES_LABEL, UCX_PERFTEST, best_peer, coll_series, fmt_bytes, fmt_us, ratio,
                     table)
from .latency import latency_recs, raw_latency
from .many_hosts import mh_rate, mh_time


UCX_SHM_GOAL = 0.9  # hvd over UCX's shared memory ÷ the core's shared-memory path
UCX_TCP_GOAL = 1.0  # hvd over UCX's tcp ÷ hvd over Gloo's TCP (every size), ÷ raw Gloo's best
UCX_GLOO_MIN = 64 << 10  # ... from this size up
# (what, hvd over UCX's series, ucx_perftest's) of the latency line
UCX_LATENCY = (("tcp", "hvd-ucx-tcp", "ucx_perftest-tcp"),
               ("shared memory", "hvd-ucx-shm", "ucx_perftest-shm"))


def is_gloo(key):
    return key.startswith("gloo")


def allreduce_ratios(recs, key, ref, min_bytes=0):
    """{ranks: [(bytes, ratio)]}: series key's allreduce busbw ÷ ref's at every size ≥ min_bytes,
    2 and 4 ranks; ref is a series, or a test on peer series (their fastest at each size)."""
    out = {}
    for n in (2, 4):
        s = coll_series(recs, "allreduce", n)
        for b in sorted(s.get(key, {})):
            if b < min_bytes:
                continue
            if callable(ref):
                bp = best_peer(s, b, allow=ref)
                other = bp[1] if bp else None
            else:
                other = s.get(ref, {}).get(b)
            r = ratio(s[key][b], other)
            if r is not None:
                out.setdefault(n, []).append((b, r))
    return out


def ratios_text(what, by_ranks):
    """"what, 2 ranks: 4 B 1.10×, 64 KiB 0.95×; what, 4 ranks: ..."."""
    return "; ".join(f"{what}, {n} ranks: " + ", ".join(f"{fmt_bytes(b)} {r:.2f}×" for b, r in rs)
                     for n, rs in sorted(by_ranks.items()))


def ratios_verdict(what, worst, goal):
    return f"{what}: {'met' if worst >= goal else 'missed'} (worst {worst:.2f}×)"


def worst_ratio(by_ranks):
    return min(r for rs in by_ranks.values() for _, r in rs)


def target_ucx_shm(recs):
    """Ranks of one host over UCX: hvd over UCX as shipped (the core's shared-memory path for
    the collectives, UCX for the point-to-point left) against hvd's own shared-memory path
    (hvd over Gloo as shipped), the target; beside it, for information, every byte over UCX's
    shared memory (HVD_SHM=0: the core's point-to-point algorithms over UCX's sysv/posix),
    against that path and against every byte over UCX's tcp."""
    by = allreduce_ratios(recs, "hvd-ucx", "hvd-gloo")
    if not by:
        return None
    what = f"{SERIES_LABEL['hvd-ucx']} ÷ {SERIES_LABEL['hvd-gloo']}"
    info = [(f"{SERIES_LABEL['hvd-ucx-shm']} ÷ {SERIES_LABEL[ref]}",
             allreduce_ratios(recs, "hvd-ucx-shm", ref)) for ref in ("hvd-gloo", "hvd-ucx-tcp")]
    info = [(w, b) for w, b in info if b]
    text = ratios_text(what, by)
    if info:
        text += "; for information (point-to-point over UCX alone, no target): " + "; ".join(
            ratios_text(w, b) for w, b in info)
    return (f"UCX, shared memory: hvd over UCX as shipped ≥ {UCX_SHM_GOAL}× hvd's own "
            "shared-memory path (hvd over Gloo as shipped), allreduce busbw at every size, 2 and "
            "4 ranks", text, ratios_verdict(what, worst_ratio(by), UCX_SHM_GOAL))


def target_ucx_tcp(recs):
    """hvd with every byte over UCX's tcp against hvd over Gloo's TCP at every size, and
    against raw Gloo's best algorithm (TCP) from 64 KiB up."""
    label = SERIES_LABEL["hvd-ucx-tcp"]
    pairs = [(f"{label} ÷ {SERIES_LABEL['hvd-gloo-tcp']}",
              allreduce_ratios(recs, "hvd-ucx-tcp", "hvd-gloo-tcp")),
             (f"{label} ÷ raw Gloo's best (≥ {fmt_bytes(UCX_GLOO_MIN)})",
              allreduce_ratios(recs, "hvd-ucx-tcp", is_gloo, UCX_GLOO_MIN))]
    pairs = [(what, by) for what, by in pairs if by]
    if not pairs:
        return None
    return (f"UCX over TCP (`HVD_SHM=0 UCX_TLS=tcp,self`) ≥ {UCX_TCP_GOAL}× hvd over Gloo's TCP "
            f"at every size and ≥ {UCX_TCP_GOAL}× raw Gloo's best algorithm (ring, ring-chunked, "
            f"gloo::allreduce) at ≥ {fmt_bytes(UCX_GLOO_MIN)}, allreduce busbw, 2 and 4 ranks",
            "; ".join(ratios_text(what, by) for what, by in pairs),
            "; ".join(ratios_verdict(what, worst_ratio(by), UCX_TCP_GOAL) for what, by in pairs))


def ucx_latency_line(lat, raw, what, hvd, peer):
    """(text, [hvd's overheads in µs]) of one UCX transport: ucx_perftest's one-way latencies,
    hvd over it per cycle time with its step − ucx_perftest's 4-byte latency."""
    mine = sorted((r for r in lat if r["system"] == hvd),
                  key=lambda r: -float(r.get("cycle_time_ms", 0) or 0))
    pt = sorted((r for r in lat if r["system"] == peer), key=lambda r: r["tensor_bytes"])
    base = raw.get(peer)
    steps, overs = [], []
    for r in mine:
        over = r["time_us"] - base["time_us"] if base else None
        steps.append(f"@ {r.get('cycle_time_ms')} ms {fmt_us(r['time_us'])}"
                     + ("" if over is None else f" ({over:+.0f} µs)"))
        if over is not None:
            overs.append(over)
    raw_txt = (", ".join(f"{fmt_bytes(r['tensor_bytes'])} {fmt_us(r['time_us'])}" for r in pt)
               + " one way" if pt else "not run")
    return (f"{what}: ucx_perftest {raw_txt}; {SERIES_LABEL[hvd]} 4-byte step "
            + (", ".join(steps) or "not run"), overs)


def target_ucx_latency(recs, meta):
    """hvd over UCX's 4-byte step beside raw ucx_perftest's one-way latency on the same UCX
    transport, in the same run; hvd's overhead stated, no target ratio."""
    lat = latency_recs(recs)
    raw = raw_latency(lat)
    parts, status = [], []
    for what, hvd, peer in UCX_LATENCY:
        if not any(r["system"] in (hvd, peer) for r in lat):
            continue
        txt, overs = ucx_latency_line(lat, raw, what, hvd, peer)
        parts.append(txt)
        if overs:
            span = f"{min(overs):+.0f}" + (f" to {max(overs):+.0f}" if len(overs) > 1 else "")
            status.append(f"over {what} hvd adds {span} µs")
    if not parts:
        return None
    if not any(r["system"] in UCX_PERFTEST for r in lat):
        skipped = any(x.startswith("raw UCX") for x in meta.get("skipped", []))
        status.append("ucx_perftest not run" + (" (see \"Not measured\")" if skipped else ""))
    return ("UCX, small-operation latency: hvd over UCX's 4-byte allreduce step beside raw "
            "`ucx_perftest -t tag_lat` on the same UCX transport, same run (overhead = hvd's "
            "step − ucx_perftest's one-way 4-byte latency)", "; ".join(parts),
            "reported, no target ratio" + (": " + "; ".join(status) if status else ""))


def target_ucx_cluster(recs):
    """Simulated cluster (--parts cluster): hvd over UCX against hvd over Gloo, both as shipped
    (the core's shared memory within a host, each plugin's tcp across hosts), same link, layout
    and HVD_HIERARCHICAL, allreduce at every size; and against raw Gloo's best from 64 KiB up.
    The worst ratio of each setting."""
    best = {}
    for r in recs:
        if r.get("kind") == "cluster_coll" and r["op"] == "allreduce":
            k = (r["rate"], r["layout"], r["system"], r.get("hier", -1), r["bytes"])
            if k not in best or mh_time(r) < mh_time(best[k]):
                best[k] = r
    worst = {}  # (rate, layout, hier, reference) -> (ratio, bytes)
    for (rate, lay, system, hier, b), r in best.items():
        if system != "hvd-ucx" or mh_time(r) <= 0:
            continue
        refs = [("hvd-gloo", best.get((rate, lay, "hvd-gloo", hier, b)))]
        if b >= UCX_GLOO_MIN:
            refs.append(("gloo", best.get((rate, lay, "gloo", -1, b))))
        for ref, rr in refs:
            x = mh_time(rr) / mh_time(r) if rr else None
            k = (rate, lay, hier, ref)
            if x is not None and (k not in worst or x < worst[k][0]):
                worst[k] = (x, b)
    if not worst:
        return None
    names = {"hvd-gloo": SERIES_LABEL["hvd-gloo"], "gloo": "raw Gloo's best"}
    by_setting, by_ref = {}, {}
    for (rate, lay, hier, ref), (x, b) in worst.items():
        by_setting.setdefault(f"{mh_rate(rate)} {lay} {'hier' if hier else 'flat'}", []).append(
            f"÷ {names[ref]} {x:.2f}× (at {fmt_bytes(b)})")
        by_ref[ref] = min(x, by_ref.get(ref, x))
    return (f"UCX on the simulated cluster (tcp across hosts): hvd over UCX ≥ {UCX_TCP_GOAL}× hvd "
            f"over Gloo (both as shipped) at every size and ≥ {UCX_TCP_GOAL}× raw Gloo's best at "
            f"≥ {fmt_bytes(UCX_GLOO_MIN)}, allreduce, each link, layout and hierarchy setting",
            "worst ratio of each setting: " + "; ".join(f"{k}: {', '.join(v)}"
                                                       for k, v in by_setting.items()),
            "; ".join(ratios_verdict(f"÷ {names[ref]}", x, UCX_TCP_GOAL) for ref, x in by_ref.items()))


def ucx_targets_section(recs, meta):
    rows = [t for t in (target_ucx_shm(recs), target_ucx_tcp(recs), target_ucx_latency(recs, meta),
                        target_ucx_cluster(recs)) if t]
    if not rows:
        return []
    lanes = [f"{SERIES_LABEL.get(k, k)}: {v}" for k, v in (meta.get("ucx_lanes") or {}).items()]
    lanes += [f"{SERIES_LABEL[k]}: {r['lanes']}" for k, r in raw_latency(latency_recs(recs)).items()
              if k in UCX_PERFTEST and "lanes" in r]
    intro = ("hvd over its UCX plugin: as shipped (hvd (ucx): the core's shared memory between ranks "
             "of a host), with every byte over UCX (`HVD_SHM=0`: on one host UCX's shared memory) "
             "and over UCX's tcp alone (`HVD_SHM=0 UCX_TLS=tcp,self`). Ratios: hvd over UCX's busbw "
             "÷ the reference's at each size (≥ 1: UCX faster).")
    if lanes:
        intro += (" Connected over (the plugin's debug line from a 2-rank probe; ucx_perftest: UCX's "
                  "own log): " + "; ".join(lanes) + ".")
    return ["## Targets (UCX transport)\n", intro + "\n",
            table(["target", "measured", "status"], [list(t) for t in rows], ["---", "---", "---"]),
            ""]
