"""Data-parallel Keras (TensorFlow backend) training on scikit-learn's bundled
digits data set (nothing is downloaded).

    python train_keras.py
    hvdrun -np 2 python train_keras.py
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import _hvd_path  # noqa: F401,E402
import hvd.keras as hvd  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--checkpoint-dir", default="checkpoints")
    args = ap.parse_args()

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    keras.utils.set_random_seed(rank)

    d = load_digits()
    x = (d.images / 16.0).astype("float32")[..., None]
    x_tr, x_te, y_tr, y_te = train_test_split(x, d.target, test_size=0.25, random_state=0,
                                              stratify=d.target)
    n = len(x_tr) // size * size
    xs, ys = x_tr[rank:n:size], y_tr[rank:n:size]

    model = keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(args.lr * size, momentum=0.9))
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                  jit_compile=False)  # hvd ops cannot be XLA-compiled
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),  # same start everywhere
        hvd.callbacks.MetricAverageCallback(),  # logs = averages over ranks
        hvd.callbacks.LearningRateWarmupCallback(args.lr * size, warmup_epochs=2),
    ]
    if rank == 0:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        callbacks.append(keras.callbacks.ModelCheckpoint(
            os.path.join(args.checkpoint_dir, "model.keras")))
    model.fit(xs, ys, batch_size=args.batch_size, epochs=args.epochs, callbacks=callbacks,
              verbose=1 if rank == 0 else 0)
    _, acc = model.evaluate(x_te[rank::size], y_te[rank::size], verbose=0)
    acc = hvd.allreduce(np.array(acc * len(y_te[rank::size])), op=hvd.Sum, name="acc")
    if rank == 0:
        print(f"test accuracy: {float(acc) / len(y_te):.4f} ({size} rank(s))", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
