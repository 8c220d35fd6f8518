"""process_set= on hvd.keras's callbacks and broadcast_global_variables and
on hvd.tensorflow's broadcast_global_variables / BroadcastGlobalVariablesHook,
on 4 ranks in two sets, `left` = [0, 1] and `right` = [2, 3]. Every rank
starts from values of its own (rank + 1); each check shows that a set's
values come from its own root and stay within it (exact: small integers and
their averages), and that the two sets end up different."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CHECKS = ["broadcast_callback_fit", "metric_average", "lr_warmup", "keras_broadcast_global",
          "tf1_broadcast_global", "tf1_hook", "not_a_member"]
SIZE = 4


def main():
    import tensorflow as tf
    import keras
    import hvd.keras as hk
    import hvd.tensorflow as htf
    from common import run_checks

    left, right = hk.ProcessSet([0, 1]), hk.ProcessSet([2, 3])
    hk.init(process_sets=[left, right])
    size, rank = hk.size(), hk.rank()
    assert size == SIZE
    mine, other = (left, right) if rank < 2 else (right, left)

    def model_of(value):
        m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        m.layers[0].kernel.assign(np.full((3, 2), value, np.float32))
        m.layers[0].bias.assign(np.full((2,), -value, np.float32))
        return m

    def every_rank(x, name):
        return hk.allgather(np.asarray(x, np.float64)[np.newaxis], name=name).numpy()

    def stays_in_set(got, name):
        """got is the same on the set's ranks and differs from the other set's."""
        every = every_rank(got, name)
        for r in range(size):
            same = (r < 2) == (rank < 2)
            assert np.array_equal(every[r], every[rank]) == same, (r, every)

    def broadcast_callback_fit():
        root = mine.ranks[1]
        model = model_of(rank + 1.0)
        model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse", jit_compile=False)
        cb = hk.callbacks.BroadcastGlobalVariablesCallback(root, process_set=mine)
        x, y = np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32)
        model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[cb])
        assert cb.broadcast_done
        kernel, bias = (v.numpy() for v in model.layers[0].weights)
        assert np.array_equal(kernel, np.full((3, 2), root + 1.0)), kernel
        assert np.array_equal(bias, np.full((2,), -(root + 1.0))), bias
        stays_in_set(kernel, "bcb.kernel")

    def metric_average():
        cb = hk.callbacks.MetricAverageCallback(process_set=mine)
        logs = {"loss": float(rank), "acc": 10.0 * rank, "name": "text"}
        cb.on_epoch_end(0, logs)
        want = sum(mine.ranks) / 2.0
        assert logs == {"loss": want, "acc": 10.0 * want, "name": "text"}, logs
        stays_in_set([logs["loss"]], "mac.loss")

    def lr_warmup():
        model = model_of(1.0)
        model.compile(optimizer=keras.optimizers.SGD(1.0), loss="mse", jit_compile=False)
        lrs = []
        for ps, n in ((mine, 2), (hk.global_process_set, size)):
            cb = hk.callbacks.LearningRateWarmupCallback(
                initial_lr=0.8, warmup_epochs=2, steps_per_epoch=4, momentum_correction=False,
                process_set=ps)
            cb.set_model(model)
            cb.on_train_begin()
            cb.on_epoch_begin(0)
            cb.on_batch_begin(0)
            # Horovod's ramp one step ahead: 0.8 / n * (0.25 * (n - 1) / 2 + 1)
            want = 0.8 / n * (0.25 * (n - 1) / 2 + 1)
            got = float(keras.ops.convert_to_numpy(model.optimizer.learning_rate))
            assert abs(got - want) <= 1e-7 * want, (n, got, want)
            lrs.append(got)
        assert abs(lrs[0] - 0.45) < 1e-7 and abs(lrs[1] - 0.275) < 1e-7, lrs

    def keras_broadcast_global():
        root = mine.ranks[0]
        model = model_of(rank + 1.0)
        model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse", jit_compile=False)
        model.optimizer.build(model.trainable_variables)
        for v in model.optimizer.variables:  # optimizer state of this rank's own
            v.assign(tf.cast(tf.fill(v.shape, rank + 1), v.dtype))
        assert hk.broadcast_global_variables(model, root_rank=root, process_set=mine) is None
        kernel = model.layers[0].kernel.numpy()
        assert np.array_equal(kernel, np.full((3, 2), root + 1.0)), kernel
        for v in model.optimizer.variables:
            assert np.all(v.numpy() == root + 1), (v.name, v.numpy())
        stays_in_set(kernel, "kbgv.kernel")

    def tf1_graph(fn):
        g = tf.Graph()
        with g.as_default():
            a = tf.compat.v1.Variable(np.full((2, 2), rank + 1.0), name="a")
            b = tf.compat.v1.Variable(np.arange(3, dtype=np.int64) + 10 * rank, name="b")
            init = tf.compat.v1.global_variables_initializer()
            run = fn()
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(init)
            run(sess)
            return sess.run([a, b])

    def check_tf1(got, root, name):
        a, b = got
        assert np.array_equal(a, np.full((2, 2), root + 1.0)), a
        assert b.tolist() == [10 * root, 10 * root + 1, 10 * root + 2], b
        stays_in_set(a, name)

    def tf1_broadcast_global():
        root = mine.ranks[1]

        def build():
            op = htf.broadcast_global_variables(root, process_set=mine)
            return lambda sess: sess.run(op)

        check_tf1(tf1_graph(build), root, "tf1bgv")
        try:  # eagerly it refuses, as Horovod's does
            htf.broadcast_global_variables(root, process_set=mine)
        except RuntimeError as e:
            assert "eager" in str(e), str(e)
        else:
            raise AssertionError("broadcast_global_variables ran eagerly")

    def tf1_hook():
        root = mine.ranks[0]

        def build():
            hook = htf.BroadcastGlobalVariablesHook(root, process_set=mine)
            hook.begin()
            return lambda sess: hook.after_create_session(sess, None)

        check_tf1(tf1_graph(build), root, "tf1hook")

    def not_a_member():
        model = model_of(1.0)
        model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse", jit_compile=False)
        msg = f"rank {rank} is not in process set {other.ranks}"
        cbs = [hk.callbacks.BroadcastGlobalVariablesCallback(other.ranks[0], process_set=other),
               hk.callbacks.MetricAverageCallback(process_set=other)]
        calls = [lambda: cbs[0].set_model(model) or cbs[0].on_train_begin(),
                 lambda: cbs[1].on_epoch_end(0, {"loss": 1.0}),
                 lambda: hk.broadcast_global_variables(model, other.ranks[0],
                                                       process_set=other)]
        for call in calls:
            try:
                call()
            except ValueError as e:
                assert msg in str(e), str(e)
            else:
                raise AssertionError("a callback on a set without this rank did not raise")

    fns = {n: f for n, f in locals().items() if n in CHECKS}
    run_checks([(n, fns[n]) for n in CHECKS], rank)
    hk.barrier()
    hk.shutdown()


if __name__ == "__main__":
    main()
