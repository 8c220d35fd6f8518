"""Keras fit on N ranks with DistributedOptimizer and the hvd callbacks, plus
DistributedGradientTape and the TF ops. Records weights and metrics."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402


def main():
    import tensorflow as tf
    import keras
    import hvd.keras as hvd
    import hvd.tensorflow as htf
    from common import run_checks, write

    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    out = {}

    def tf_ops():
        x = tf.constant([[1.0, 2.0]]) * (rank + 1)
        s = htf.allreduce(x, op=hvd.Sum, name="tf.sum")
        np.testing.assert_allclose(s.numpy(), np.array([[1.0, 2.0]]) * sum(range(1, size + 1)))
        g = htf.allgather(tf.fill([rank + 1, 2], rank), name="tf.ag")
        assert g.shape[0] == size * (size + 1) // 2
        b = htf.broadcast(tf.constant([rank, rank], tf.int64), size - 1, name="tf.bc")
        assert b.numpy().tolist() == [size - 1] * 2

        @tf.function
        def graph_sum(t):
            return htf.allreduce(t, op=hvd.Sum, name="tf.graph")
        assert graph_sum(tf.ones([3])).numpy().tolist() == [float(size)] * 3
        assert graph_sum(tf.ones([3])).numpy().tolist() == [float(size)] * 3  # reuse

    def gradient_tape():
        v = tf.Variable([1.0, 2.0])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * v) * float(rank + 1)
        grads = htf.DistributedGradientTape(tape).gradient(loss, [v])
        exp = np.array([2.0, 4.0]) * np.mean([r + 1 for r in range(size)])
        np.testing.assert_allclose(grads[0].numpy(), exp, rtol=1e-6)

    def fit():
        rng = np.random.default_rng(0)
        x = rng.normal(size=(64 * size, 8)).astype("float32")
        y = (x[:, 0] + x[:, 1] > 0).astype("int32")
        xs, ys = x[rank::size], y[rank::size]  # this rank's shard
        keras.utils.set_random_seed(rank)  # different initial weights on purpose
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"),
                                  keras.layers.Dense(2, activation="softmax")])
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05 * size, momentum=0.5))
        model.compile(optimizer=opt, loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"], jit_compile=False)
        local = []

        class Record(keras.callbacks.Callback):  # logs before averaging
            def on_epoch_end(self, epoch, logs=None):
                local.append({k: float(v) for k, v in logs.items()})

        hist = model.fit(xs, ys, batch_size=16, epochs=3, verbose=0, shuffle=False, callbacks=[
            hvd.callbacks.BroadcastGlobalVariablesCallback(0),
            Record(),
            hvd.callbacks.MetricAverageCallback(),
            hvd.callbacks.LearningRateWarmupCallback(0.05 * size, warmup_epochs=2),
        ])
        out["weights"] = [w.tolist() for w in model.get_weights()]
        out["history"] = {k: [float(v) for v in vs] for k, vs in hist.history.items()}
        out["local"] = local

    results = run_checks([("tf_ops", tf_ops), ("gradient_tape", gradient_tape), ("fit", fit)],
                         rank)
    out["checks"] = results
    write(rank, out)
    hvd.shutdown()


if __name__ == "__main__":
    main()
