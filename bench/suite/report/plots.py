"""The PNG plots: busbw per collective, fusion, latency and end to end."""

import os

from .collectives import stream_ref
from .common import SERIES_LABEL, busbw, coll_series, fmt_bytes, ordered
from .e2e import e2e_rows
from .fusion import fusion_rows


# hvd's own series: thick lines, one colour per transport.
STYLES = {"hvd-gloo": dict(color="C3", lw=2.5, marker="o"),
          "hvd-gloo-tcp": dict(color="C3", lw=1.5, ls="--", marker="o"),
          "hvd-ucx": dict(color="C2", lw=2.5, marker="^"),
          "hvd-ucx-shm": dict(color="C2", lw=1.5, ls=":", marker="^"),
          "hvd-ucx-tcp": dict(color="C2", lw=1.5, ls="--", marker="^"),
          "hvd-mpi": dict(color="C1", lw=2.5, marker="s"),
          "hvd-mpi-p2p": dict(color="C1", lw=1.5, ls="--", marker="s")}


def plots(recs, out):
    """Draws every plot the results allow; the names of the files made."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["(matplotlib is not installed: no plots)"]
    return (busbw_plots(plt, recs, out) + fusion_plot(plt, recs, out) + latency_plot(plt, recs, out)
            + e2e_plot(plt, recs, out))


def save(plt, fig, out, name):
    """Writes the figure to out/name and closes it; [name]."""
    fig.tight_layout()
    fig.savefig(os.path.join(out, name), dpi=110)
    plt.close(fig)
    return [name]


def log_bars(ax, labels, vals, hvd, xlabel, title):
    """Horizontal bars on a log scale, one per label, hvd's red and the peers' blue."""
    ax.barh(range(len(labels)), vals, color=["C3" if h else "C0" for h in hvd])
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_title(title)


def busbw_plots(plt, recs, out):
    """busbw_<op>.png: bus bandwidth against size, one panel per rank count."""
    made = []
    _, ceiling = stream_ref(recs)
    for op in ("allreduce", "allgather", "broadcast"):
        ranks = sorted({r["ranks"] for r in recs if r.get("kind") == "coll" and r["op"] == op})
        if not ranks:
            continue
        fig, axes = plt.subplots(1, len(ranks), figsize=(6.5 * len(ranks), 4.8), squeeze=False)
        for ax, n in zip(axes[0], ranks):
            s = coll_series(recs, op, n)
            for i, k in enumerate(ordered(s)):
                xs = sorted(s[k])
                ys = [busbw(s[k][b]) for b in xs]
                st = STYLES.get(k, dict(lw=1.2, marker=".", ls="--" if "nommap" in k else "-"))
                ax.plot(xs, ys, label=SERIES_LABEL.get(k, k), **st)
            if op == "allreduce" and ceiling and n == 2:
                ax.axhline(ceiling, color="k", ls=":", lw=1,
                           label=f"memory reference ≈ {ceiling:.0f} GB/s")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ticks = [4 << (4 * i) for i in range(8)]
            ax.set_xticks(ticks)
            ax.set_xticklabels([fmt_bytes(t).replace(" ", "") for t in ticks], fontsize=8)
            ax.set_xlabel("message size")
            ax.set_ylabel("bus bandwidth (GB/s)")
            ax.set_title(f"{op}, {n} ranks, float32")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7, loc="lower right")
        made += save(plt, fig, out, f"busbw_{op}.png")
    return made


def fusion_plot(plt, recs, out):
    """fusion.png: the step time of every system, one panel per tensor count."""
    made = []
    specs = sorted({r["tensors"] for r in recs if r.get("kind") == "fusion"})
    if specs:
        fig, axes = plt.subplots(1, len(specs), figsize=(6.5 * len(specs), 4.2), squeeze=False)
        for ax, nt in zip(axes[0], specs):
            rows = fusion_rows(recs, nt)
            keys = sorted(rows, key=lambda k: rows[k]["time_us"])
            vals = [rows[k]["time_us"] / 1000 for k in keys]
            tb = next(iter(rows.values()))["tensor_bytes"]
            log_bars(ax, keys, vals, [k.startswith("hvd") for k in keys], "step time (ms, log)",
                     f"Tensor Fusion: {nt} × {fmt_bytes(tb)}, 2 ranks")
            for i, v in enumerate(vals):
                ax.text(v, i, f" {v:.2f}", va="center", fontsize=7)
            ax.invert_yaxis()
        made += save(plt, fig, out, "fusion.png")
    return made


def latency_plot(plt, recs, out):
    """latency.png: the 4-byte step of every system."""
    made = []
    lat = [r for r in recs if r.get("kind") == "latency" and r.get("tensor_bytes", 4) == 4]
    if lat:
        fig, ax = plt.subplots(figsize=(7.5, 4))
        labels = [f"{r['system']}:{r['variant']}" + (f" @{r['cycle_time_ms']}ms" if "cycle_time_ms" in r else "")
                  for r in lat]
        log_bars(ax, labels, [r["time_us"] for r in lat], [r["system"].startswith("hvd") for r in lat],
                 "median step time (µs, log)",
                 "One 4-byte allreduce per step, 2 ranks (ucx_perftest: one-way 4 B)")
        ax.invert_yaxis()
        made += save(plt, fig, out, "latency.png")
    return made


def e2e_plot(plt, recs, out):
    """e2e.png: samples/s of every model's training step."""
    made = []
    by = e2e_rows(recs)
    if by:
        fig, axes = plt.subplots(1, len(by), figsize=(5 * len(by), 3.8), squeeze=False)
        order = ["single", "hvd", "ddp", "horovod"]
        names = {"single": "1 process", "hvd": "hvd 2p", "ddp": "DDP 2p", "horovod": "Horovod 2p"}
        for ax, (model, d) in zip(axes[0], sorted(by.items())):
            ks = [k for k in order if k in d]
            vals = [d[k]["samples_per_s"] for k in ks]
            ax.bar(range(len(ks)), vals, color=["C3" if k == "hvd" else "C0" for k in ks])
            ax.set_xticks(range(len(ks)))
            ax.set_xticklabels([names[k] for k in ks])
            ax.set_ylabel("samples/s")
            p = next(iter(d.values()))
            ax.set_title(f"{model}: {p['params'] / 1e6:.2f} M params, {p['tensors']} tensors")
            for i, v in enumerate(vals):
                ax.text(i, v, f"{v:.0f}", ha="center", va="bottom", fontsize=8)
        made += save(plt, fig, out, "e2e.png")
    return made
