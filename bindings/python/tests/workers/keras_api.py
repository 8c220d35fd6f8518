"""hvd.keras as Horovod scripts use it, on N ranks: DistributedOptimizer's
backward_passes_per_step / average_aggregated_gradients / sparse_as_dense /
gradient_predivide_factor, PartialDistributedOptimizer,
BroadcastGlobalVariablesCallback(local_variables=), the callbacks module and
the learning-rate callbacks. Checks compare with values computed here from
every rank's data (allgather_object), so they hold exactly."""

import os
import sys
import warnings

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
    LR = 0.5

    def value_loss(y_true, y_pred):
        # The per-sample loss is the prediction itself: for a bias-free
        # linear layer the gradient is the batch mean of x, whatever the
        # weights, so every update can be computed exactly.
        return y_pred

    def rank_data(steps, batch=2, dim=3, seed=0):
        return np.random.default_rng(seed + 10 * rank).normal(
            size=(steps * batch, dim)).astype(np.float32)

    def batch_means(x, batch=2):
        return x.reshape(-1, batch, x.shape[1]).mean(axis=1)  # [steps, dim]

    def linear(name="w", init="zeros", dim=3):
        return keras.layers.Dense(1, use_bias=False, kernel_initializer=init, name=name)

    class Recorder(keras.callbacks.Callback):
        def __init__(self, fn):
            super().__init__()
            self.fn, self.seen = fn, []

        def on_train_batch_end(self, batch, logs=None):
            self.seen.append(self.fn(self.model))

    def backward_passes(average, run_eagerly):
        steps, n = 6, 3
        x = rank_data(steps)
        model = keras.Sequential([keras.Input((3,)), linear()])
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(LR), backward_passes_per_step=n,
                                       average_aggregated_gradients=average)
        model.compile(optimizer=opt, loss=value_loss, jit_compile=False,
                      run_eagerly=run_eagerly)
        rec = Recorder(lambda m: m.get_weights()[0][:, 0].copy())
        model.fit(x, np.zeros((len(x), 1), np.float32), batch_size=2, epochs=1, shuffle=False,
                  verbose=0, callbacks=[rec])
        means = np.array(hvd.allgather_object(batch_means(x).tolist(),
                                              name=f"bpps.{average}.{run_eagerly}"))
        w = np.zeros(3)
        for s in range(steps):
            if (s + 1) % n == 0:
                g = means[:, s + 1 - n:s + 1].sum(axis=1).mean(axis=0)  # sum of n, avg ranks
                w = w - LR * (g / n if average else g)
            np.testing.assert_allclose(rec.seen[s], w, rtol=1e-5, atol=1e-6,
                                       err_msg=f"step {s}")
        assert int(opt.iterations.numpy()) == steps, int(opt.iterations.numpy())
        for v in opt.variables:
            if "hvd_accum" in v.path:
                np.testing.assert_array_equal(np.asarray(v), 0)  # reset after the last update

    def sparse_as_dense():
        calls = []
        from hvd.tensorflow import _gradients as grads  # where the optimizer calls it
        orig = grads._sparse_allreduce

        def counting(*a):
            calls.append(a[2])
            return orig(*a)

        grads._sparse_allreduce = counting
        try:
            x = np.array([[1, 2], [3, 4], [1, 5], [6, 7]], np.int32) + rank
            y = np.ones((4, 1), np.float32) * (rank + 1)
            results = {}
            for sad in (False, True):
                keras.utils.set_random_seed(1)  # the same initial weights everywhere
                model = keras.Sequential([keras.Input((2,), dtype="int32"),
                                          keras.layers.Embedding(12, 3), keras.layers.Flatten(),
                                          keras.layers.Dense(1)])
                opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), sparse_as_dense=sad)
                model.compile(optimizer=opt, loss="mse", jit_compile=False)
                model.fit(x, y, batch_size=2, epochs=2, verbose=0, shuffle=False)
                results[sad] = [w.tolist() for w in model.get_weights()]
                if not sad:
                    assert calls, "the embedding's IndexedSlices gradient was not allgathered"
                    calls.clear()
                else:
                    assert not calls, calls
            for a, b in zip(results[False], results[True]):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
            out["sparse_weights"] = results[False]
        finally:
            grads._sparse_allreduce = orig

    def predivide():
        x = rank_data(4, seed=5)
        got = {}
        for factor in (1.0, float(size)):
            model = keras.Sequential([keras.Input((3,)), linear()])
            opt = hvd.DistributedOptimizer(keras.optimizers.SGD(LR),
                                           gradient_predivide_factor=factor)
            model.compile(optimizer=opt, loss=value_loss, jit_compile=False)
            model.fit(x, np.zeros((len(x), 1), np.float32), batch_size=2, epochs=1,
                      shuffle=False, verbose=0)
            got[factor] = model.get_weights()[0][:, 0]
        means = np.array(hvd.allgather_object(batch_means(x).tolist(), name="predivide"))
        exp = -LR * means.sum(axis=1).mean(axis=0)
        for factor, w in got.items():
            np.testing.assert_allclose(w, exp, rtol=1e-5, atol=1e-6, err_msg=str(factor))
        try:
            hvd.DistributedOptimizer(keras.optimizers.SGD(LR), op=hvd.Sum,
                                     gradient_predivide_factor=2.0)
            raise AssertionError("predivide with op=Sum was accepted")
        except ValueError:
            pass

    def partial_optimizer():
        x = rank_data(4, seed=9)
        inp = keras.Input((3,))
        shared = linear("shared")
        local = linear("local", init=keras.initializers.Constant(float(rank)))
        model = keras.Model(inp, keras.layers.Add()([shared(inp), local(inp)]))
        opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(LR), local_layers=[local])
        model.compile(optimizer=opt, loss=value_loss, jit_compile=False)
        model.fit(x, np.zeros((len(x), 1), np.float32), batch_size=2, epochs=1, shuffle=False,
                  verbose=0, callbacks=[
                      hvd.callbacks.BroadcastGlobalVariablesCallback(
                          0, local_variables=[local.kernel])])
        means = np.array(hvd.allgather_object(batch_means(x).tolist(), name="partial"))
        np.testing.assert_allclose(shared.kernel.numpy()[:, 0],
                                   -LR * means.sum(axis=1).mean(axis=0), rtol=1e-5, atol=1e-6)
        # Local: not broadcast (starts at rank), updated with its own gradient / size.
        np.testing.assert_allclose(local.kernel.numpy()[:, 0],
                                   rank - LR * means[rank].sum(axis=0) / size, rtol=1e-5,
                                   atol=1e-6)
        out["partial_shared"] = shared.kernel.numpy().tolist()
        out["partial_local"] = local.kernel.numpy().tolist()

    def callbacks_module():
        import importlib
        cb = importlib.import_module("hvd.keras.callbacks")
        from hvd.keras.callbacks import (BroadcastGlobalVariablesCallback,
                                         LearningRateScheduleCallback,
                                         LearningRateWarmupCallback, MetricAverageCallback)
        assert cb is hvd.callbacks
        assert BroadcastGlobalVariablesCallback is hvd.BroadcastGlobalVariablesCallback
        assert MetricAverageCallback is hvd.MetricAverageCallback
        assert LearningRateScheduleCallback is hvd.LearningRateScheduleCallback
        assert LearningRateWarmupCallback is hvd.LearningRateWarmupCallback

    def fit_recording_lr(callbacks, epochs, steps=4, opt=None):
        x = rank_data(steps, seed=3)
        model = keras.Sequential([keras.Input((3,)), linear()])
        model.compile(optimizer=opt or keras.optimizers.SGD(0.2), loss=value_loss,
                      jit_compile=False)
        seen = []

        class AtBatch(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                seen.append(float(np.asarray(self.model.optimizer.learning_rate)))

        hist = model.fit(x, np.zeros((len(x), 1), np.float32), batch_size=2, epochs=epochs,
                         shuffle=False, verbose=0, callbacks=callbacks + [AtBatch()])
        return np.array(seen).reshape(epochs, -1), hist

    def lr_schedule():
        seen, hist = fit_recording_lr([hvd.callbacks.LearningRateScheduleCallback(
            0.1, 0.5, start_epoch=1, end_epoch=3, momentum_correction=False)], epochs=4)
        np.testing.assert_allclose(seen[:, 0], [0.2, 0.1, 0.05, 0.05], rtol=1e-6)
        np.testing.assert_allclose(hist.history["lr"], [0.2, 0.1, 0.05, 0.05], rtol=1e-6)
        # A function of the fractional epoch, batch by batch.
        seen, _ = fit_recording_lr([hvd.callbacks.LearningRateScheduleCallback(
            1.0, lambda e: 0.1 * (e + 1), staircase=False, momentum_correction=False)],
            epochs=2)
        steps = seen.shape[1]
        exp = [[0.1 * (e + b / steps + 1) for b in range(steps)] for e in range(2)]
        np.testing.assert_allclose(seen, exp, rtol=1e-6)

    def lr_warmup():
        seen, hist = fit_recording_lr([hvd.callbacks.LearningRateWarmupCallback(
            0.4, warmup_epochs=2, momentum_correction=False)], epochs=3)
        steps = seen.shape[1]
        exp = [[0.4 / size * ((e + b / steps + 1 / steps) * (size - 1) / 2 + 1)
                for b in range(steps)] for e in range(2)] + [[0.4] * steps]
        np.testing.assert_allclose(seen, exp, rtol=1e-6)
        np.testing.assert_allclose(hist.history["lr"][-1], 0.4, rtol=1e-6)
        # momentum_correction on Keras 3's SGD (a Python float): skipped, once, with a warning
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fit_recording_lr([hvd.callbacks.LearningRateWarmupCallback(0.4, warmup_epochs=1)],
                             epochs=1, opt=keras.optimizers.SGD(0.2, momentum=0.9))
        msgs = [str(m.message) for m in w if issubclass(m.category, RuntimeWarning)]
        assert len([m for m in msgs if "momentum_correction is skipped" in m]) == 1, msgs

    def deferred_broadcast():
        # No Input: Keras builds the model while tracing the first step, so
        # the callback broadcasts after the first batch (as Horovod does).
        keras.utils.set_random_seed(50 + rank)
        model = keras.Sequential([keras.layers.Dense(4), keras.layers.Dense(1)])
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.0))  # no updates
        model.compile(optimizer=opt, loss="mse", jit_compile=False)
        x = np.ones((4, 3), np.float32)
        model.fit(x, np.zeros((4, 1), np.float32), batch_size=2, epochs=1, verbose=0,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
        mine = [w.tolist() for w in model.get_weights()]
        every = hvd.allgather_object(mine, name="deferred")
        assert all(e == every[0] for e in every), "weights differ after the broadcast"

    checks = [("backward_passes_sum", lambda: backward_passes(False, False)),
              ("backward_passes_average", lambda: backward_passes(True, False)),
              ("backward_passes_eager", lambda: backward_passes(True, True)),
              ("sparse_as_dense", sparse_as_dense),
              ("predivide", predivide),
              ("partial_optimizer", partial_optimizer),
              ("callbacks_module", callbacks_module),
              ("lr_schedule", lr_schedule),
              ("lr_warmup", lr_warmup),
              ("deferred_broadcast", deferred_broadcast)]
    out["checks"] = run_checks(checks, rank)
    write(rank, out)
    hvd.shutdown()


if __name__ == "__main__":
    main()
