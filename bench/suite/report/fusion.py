"""Tensor fusion: N tensors submitted at once, and its targets."""

from .common import fmt_bytes, fmt_ratio, fmt_us, ratio, spread, table


def fusion_rows(recs, tensors):
    out = {}
    for r in recs:
        if r.get("kind") == "fusion" and r["tensors"] == tensors and r["ranks"] == 2:
            key = f"{r['system']}:{r['variant']}"
            if r["system"].startswith("hvd") or r["system"] == "horovod":
                key += f"@{float(r.get('cycle_time_ms', 1)):g}ms"
            out[key] = r
    return out


def target_fusion(recs):
    rows = {k: v for k, v in fusion_rows(recs, 200).items() if ":grouped" not in k}
    others = {k: v for k, v in rows.items() if k.startswith("hvd-") and not k.endswith("@1ms")}
    hvd = {k: v for k, v in rows.items() if k.startswith("hvd-") and k.endswith("@1ms")}
    sep = {k: v for k, v in rows.items() if k.startswith("gloo:separate")}
    hf = rows.get("mpi:handfused")
    if not hvd:
        return None
    hk = min(hvd, key=lambda k: hvd[k]["time_us"])
    h = hvd[hk]["time_us"]
    parts, ok = [], True
    if sep:
        sk = min(sep, key=lambda k: sep[k]["time_us"])
        sp = sep[sk]["time_us"] / h
        ga = rows.get("gloo:separate-allreduce")
        parts.append(f"hvd best ({hk.split(':')[0]} @ 1 ms) {fmt_us(h)} vs fastest separate raw Gloo "
                     f"({sk.split(':')[1]}) {fmt_us(sep[sk]['time_us'])}: {sp:.1f}× faster"
                     + (f" ({ga['time_us'] / h:.1f}× vs gloo::allreduce per call)" if ga else ""))
        ok = ok and sp >= 5
    if hf:
        rr = h / hf["time_us"]
        parts.append(f"vs hand-fused MPI {fmt_us(hf['time_us'])}: {rr:.2f}× its time")
        ok = ok and rr <= 1.2
    for k in sorted(hvd):
        if k != hk:
            t = hvd[k]["time_us"]
            extra = []
            if sep:
                extra.append(f"{sep[sk]['time_us'] / t:.1f}× vs {sk.split(':')[1]}")
            if rows.get("gloo:separate-allreduce"):
                extra.append(f"{rows['gloo:separate-allreduce']['time_us'] / t:.1f}× vs "
                             "gloo::allreduce per call")
            parts.append(f"{k.split(':')[0]} {fmt_us(t)}" + (f" ({', '.join(extra)})" if extra else ""))
    if others:
        parts.append("with other cycle times: " + ", ".join(
            f"{k.split(':')[0]} @ {k.split('@')[1]} {fmt_us(v['time_us'])}"
            + (f" ({v['time_us'] / hf['time_us']:.2f}× hand-fused MPI)" if hf else "")
            for k, v in sorted(others.items())))
    return ("Fusion: 200 × 16 KiB ≥ 5× faster than 200 separate raw Gloo calls, within 1.2× of "
            "hand-fused MPI (default cycle time 1 ms)", "; ".join(parts), "met" if ok else "missed")


def target_per_tensor(recs):
    """Issue 21's per-tensor cost: the 1,000 x 4 KiB step (4,000 KiB in five times the tensors
    of 200 x 16 KiB's 3,200 KiB) at most 1.5x the 200 x 16 KiB step, each hvd series at the
    default cycle time; the grouped submission (one call for all tensors) beside it."""
    small, big = fusion_rows(recs, 1000), fusion_rows(recs, 200)
    parts, ok, seen = [], True, False
    for k in sorted(big):
        if not (k.startswith("hvd-") and k.endswith("@1ms")) or k not in small:
            continue
        seen = True
        ratio = small[k]["time_us"] / big[k]["time_us"]
        name = k.split("@")[0].replace(":fused", "").replace(":", " ")
        parts.append(f"{name}: {fmt_us(small[k]['time_us'])} ÷ {fmt_us(big[k]['time_us'])} = "
                     f"{ratio:.2f}×")
        if ":grouped" not in k:
            ok = ok and ratio <= 1.5
        else:
            ref = big.get(k.replace(":grouped", ":fused"))
            if ref:
                parts[-1] += (f" (÷ the separate submits' 200 × 16 KiB {fmt_us(ref['time_us'])}: "
                              f"{small[k]['time_us'] / ref['time_us']:.2f}×)")
    if not seen:
        return None
    return ("Per-tensor cost: 1,000 × 4 KiB step (4,000 KiB) ≤ 1.5× the 200 × 16 KiB step "
            "(3,200 KiB), 2 ranks, one submit per tensor; one grouped submit shown beside",
            "; ".join(parts),
            "met" if ok else "missed")


def fusion_section(recs, made):
    """One table per tensor count: hvd's fused step against the peers'."""
    L = []
    fus = [r for r in recs if r.get("kind") == "fusion"]
    if fus:
        L.append("## Tensor Fusion\n")
        L.append("N tensors submitted at once, 2 ranks, in place, float32 SUM. hvd: every tensor "
                 "submitted with hvd_allreduce_async, then all waited for (the core fuses them). "
                 "Peers: one blocking call per tensor (`separate`), or packed by hand into one "
                 "buffer, one allreduce, unpacked (`handfused`, copies included). Median step; where the "
                 "job ran several times, the median run and the range over the runs.\n")
        for nt in sorted({r["tensors"] for r in fus}):
            rows = fusion_rows(recs, nt)
            sep = [v for k, v in rows.items() if k.startswith("gloo:separate")]
            sep_best = min(sep, key=lambda r: r["time_us"]) if sep else None
            hf = rows.get("mpi:handfused")
            tb = next(iter(rows.values()))["tensor_bytes"]
            L.append(f"### {nt} × {fmt_bytes(tb)} ({fmt_bytes(nt * tb)} in all)\n")
            trs = []
            for k in sorted(rows, key=lambda k: rows[k]["time_us"]):
                r = rows[k]
                trs.append([k, fmt_us(r["time_us"]) + spread(r, fmt_us), fmt_us(r["time_us"] / nt),
                            fmt_ratio(sep_best["time_us"] / r["time_us"]) if sep_best else "–",
                            fmt_ratio(r["time_us"] / hf["time_us"]) if hf else "–"])
            L.append(table(["system:variant", "step", "per tensor",
                            "speed-up vs fastest separate raw Gloo", "time ÷ hand-fused MPI"], trs))
            L.append("")
        if "fusion.png" in made:
            L.append("![fusion](fusion.png)\n")
    return L
