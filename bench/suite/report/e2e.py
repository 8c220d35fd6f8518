"""End to end: training steps of a PyTorch model, and its target."""

from .common import fmt_ratio, table


def e2e_rows(recs):
    """{row: {system: record}}: a row per model and process count of the data-parallel jobs
    ("resnet50, 1 process" where hvd and DDP ran alone too); the single-process baseline goes
    in the model's 2-process row."""
    by = {}
    for r in recs:
        if r.get("kind") == "e2e":
            one = r["system"] != "single" and r.get("ranks") == 1
            row = f"{r['model']}, 1 process" if one else r["model"]
            by.setdefault(row, {})[r["system"]] = r
    return by


def target_e2e(recs):
    by = e2e_rows(recs)
    parts, ok, any_ = [], True, False
    for model, d in sorted(by.items()):
        if "hvd" in d and "ddp" in d:
            any_ = True
            h, p = d["hvd"]["step_ms"], d["ddp"]["step_ms"]
            parts.append(f"{model}: hvd {h:.1f} ms vs DDP {p:.1f} ms per step ({p / h:.2f}× DDP's speed)")
            ok = ok and h <= p
    if not any_:
        return None
    return ("End to end: hvd 2-process step time ≤ DDP's", "; ".join(parts), "met" if ok else "missed")


def e2e_section(recs, made):
    """samples/s of the training steps: 1 process, hvd, DDP, Horovod."""
    L = []
    by = e2e_rows(recs)
    if by:
        L.append("## End to end\n")
        L.append("Training steps of a PyTorch model on random data, samples/s over all ranks "
                 "(step time in brackets, with its range over the repetitions); every process "
                 "uses cpu_count / local_size threads. The median repetition is shown.\n")
        order = ["single", "hvd", "ddp", "horovod"]
        names = {"single": "1 process, no framework", "hvd": "hvd", "ddp": "DDP (gloo)",
                 "horovod": "Horovod"}
        rows = []
        for model, d in sorted(by.items()):
            p = next(iter(d.values()))
            procs = "" if model.endswith("1 process") else ", 2 processes"
            row = [f"{model}{procs} ({p['params'] / 1e6:.2f} M params, {p['tensors']} tensors, "
                   f"batch {p['batch']}/rank)"]
            for k in order:
                row.append(f"{d[k]['samples_per_s']:.0f} ({d[k]['step_ms']:.1f} ms"
                           + (f", {d[k]['rep_lo']:.1f}–{d[k]['rep_hi']:.1f}" if "reps" in d[k] else "")
                           + ")" if k in d else "–")
            row.append(fmt_ratio(d["ddp"]["step_ms"] / d["hvd"]["step_ms"])
                       if "hvd" in d and "ddp" in d else "–")
            # hvd against the faster of the 2-process peers (the "best peer per row")
            peers = [k for k in ("ddp", "horovod") if k in d]
            if "hvd" in d and peers:
                best = min(peers, key=lambda k: d[k]["step_ms"])
                row.append(f"{fmt_ratio(d[best]['step_ms'] / d['hvd']['step_ms'])} ({names[best].split(',')[0]})")
            else:
                row.append("–")
            rows.append(row)
        L.append(table(["model"] + [names[k] for k in order]
                       + ["hvd speed ÷ DDP", "hvd speed ÷ best peer"], rows))
        L.append("")
        if "e2e.png" in made:
            L.append("![end to end](e2e.png)\n")
    return L
