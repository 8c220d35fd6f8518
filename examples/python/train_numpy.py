"""Data-parallel softmax regression in plain numpy (hand-written gradients) on
scikit-learn's bundled digits data set.

    python train_numpy.py
    hvdrun -np 2 python train_numpy.py
    hvdrun -np 2 python train_numpy.py --timeline-steps 5 --timeline tl.json

Every rank computes the gradient on its shard; hvd.allreduce averages it, so
every rank applies the same update to the same weights.

--timeline-steps N records N training steps (from the second one on, past the
first step's negotiation) with hvd.start_timeline / hvd.stop_timeline into
--timeline (a Chrome trace: chrome://tracing or ui.perfetto.dev). Rank 0
writes it; once stopped, rank 0 reads it back, checks that it is complete
JSON holding the recorded gradient allreduces, and prints a summary line.
"""

import argparse
import json

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import _hvd_path  # noqa: F401
import hvd


def check_timeline(path, steps):
    """Reads the trace rank 0 wrote: complete JSON, a list of Chrome trace
    events, one row per tensor (a thread_name metadata event). Returns (number
    of events, {gradient row: ALLREDUCE spans}); raises ValueError unless
    every gradient row holds exactly one ALLREDUCE per recorded step."""
    with open(path) as f:
        events = json.load(f)  # a truncated file raises here
    if not isinstance(events, list) or not all(isinstance(e, dict) and "ph" in e
                                               for e in events):
        raise ValueError(f"{path}: not a list of Chrome trace events")
    rows = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
            if e["ph"] == "M" and e.get("name") == "thread_name"}
    spans = {name: 0 for name in rows.values()}
    for e in events:
        if e["ph"] == "X" and e["name"] == "ALLREDUCE":
            spans[rows[(e["pid"], e["tid"])]] += 1
    grads = {name: n for name, n in sorted(spans.items()) if name.startswith("grad.")}
    if sorted(grads) != ["grad.0", "grad.1"] or set(grads.values()) != {steps}:
        raise ValueError(f"{path}: expected rows grad.0 and grad.1 with {steps} ALLREDUCE "
                         f"spans each (one per recorded step), found {spans}")
    return len(events), grads


def main(epochs=30, batch=32, lr=0.5, timeline=None, timeline_steps=0):
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    d = load_digits()
    x = d.data / 16.0
    y = d.target
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    n = len(x_tr) // size * size  # equal shards: the same number of steps everywhere
    xs, ys = x_tr[rank:n:size], y_tr[rank:n:size]

    rng = np.random.default_rng(rank)
    w = rng.normal(scale=0.01, size=(64, 10))  # different per rank: broadcast fixes it
    b = np.zeros(10)
    hvd.broadcast_(w, root_rank=0, name="w")
    hvd.broadcast_(b, root_rank=0, name="b")

    step = 0
    for epoch in range(epochs):
        order = rng.permutation(len(xs))
        for i in range(len(xs) // batch):
            if timeline_steps and step == 1:  # every rank calls it, at the same step
                hvd.start_timeline(timeline)
            if timeline_steps and step == 1 + timeline_steps:
                hvd.stop_timeline()  # returns once the file is closed
                if rank == 0:
                    n, grads = check_timeline(timeline, timeline_steps)
                    print(f"timeline: {timeline}: {n} events, {timeline_steps} steps recorded, "
                          f"ALLREDUCE spans per gradient row {grads}", flush=True)
            step += 1
            idx = order[i * batch:(i + 1) * batch]
            logits = xs[idx] @ w + b
            p = np.exp(logits - logits.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            p[np.arange(len(idx)), ys[idx]] -= 1.0  # d(cross-entropy)/d(logits)
            gw = xs[idx].T @ p / len(idx)
            gb = p.mean(0)
            gw, gb = hvd.grouped_allreduce([gw, gb], op=hvd.Average, name="grad")
            w -= lr * size ** 0.5 * gw  # a milder lr scaling than linear for plain SGD
            b -= lr * size ** 0.5 * gb
    correct = np.sum((x_te[rank::size] @ w + b).argmax(1) == y_te[rank::size])
    total = hvd.allreduce(np.array([correct, len(y_te[rank::size])]), op=hvd.Sum, name="acc")
    if rank == 0:
        print(f"test accuracy: {total[0] / total[1]:.4f} ({size} rank(s))", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--timeline-steps", type=int, default=0,
                    help="record this many training steps into --timeline")
    ap.add_argument("--timeline", default="timeline.json",
                    help="the timeline file (written by rank 0)")
    args = ap.parse_args()
    main(epochs=args.epochs, timeline=args.timeline, timeline_steps=args.timeline_steps)
