"""Data-parallel softmax regression in plain numpy (hand-written gradients) on
scikit-learn's bundled digits data set.

    python train_numpy.py
    hvdrun -np 2 python train_numpy.py

Every rank computes the gradient on its shard; hvd.allreduce averages it, so
every rank applies the same update to the same weights.
"""

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import _hvd_path  # noqa: F401
import hvd


def main(epochs=30, batch=32, lr=0.5):
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

    for epoch in range(epochs):
        order = rng.permutation(len(xs))
        for i in range(len(xs) // batch):
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
    main()
