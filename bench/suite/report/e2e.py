"""End to end: training steps of a PyTorch model, and its target."""


def e2e_rows(recs):
    by = {}
    for r in recs:
        if r.get("kind") == "e2e":
            by.setdefault(r["model"], {})[r["system"]] = r
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
