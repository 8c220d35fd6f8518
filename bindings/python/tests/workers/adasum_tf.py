"""hvd.Adasum through hvd.tensorflow / hvd.keras on N ranks: allreduce and
grouped_allreduce of tf tensors and DistributedGradientTape(op=hvd.Adasum)
against the float64 reference of adasum_ops, the same bits on every rank.

DistributedOptimizer(op=hvd.Adasum) combines the parameter update: each rank
steps with its own gradients, then var = old + adasum(new - old). Checked
against a reference built from every rank's own step (a plain copy of the
optimizer on a copy of the variables, the deltas allgathered and combined by
ref_adasum in float64), two steps in a row (the wrapped optimizer's state
stays local): Keras Adam eagerly and inside tf.function, Keras SGD through
model.fit, tf.compat.v1 Momentum in a TF1 graph (Session.run) and
GradientDescent eagerly. Tolerance: adasum_ops.TOL (float32: 1e-5 of the
largest magnitude); the variables hold the same bits on every rank."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from adasum_ops import close, ref_adasum, same_on_every_rank, value  # noqa: E402

CHECKS = ["tf_allreduce", "tf_grouped", "gradient_tape", "keras_optimizer_eager",
          "keras_optimizer_function", "keras_fit", "tf1_graph_optimizer",
          "tf1_eager_optimizer", "optimizer_arguments"]


def main():
    import tensorflow as tf
    import keras
    import hvd
    import hvd.keras as hk
    import hvd.tensorflow as htf
    from common import run_checks

    htf.init()
    size, rank = htf.size(), htf.rank()

    def tf_allreduce():
        assert htf.Adasum == hk.Adasum == hvd.Adasum
        xs = [value(r, (3, 4), seed=21).astype(np.float32) for r in range(size)]
        got = htf.allreduce(tf.constant(xs[rank]), op=htf.Adasum, name="tfada").numpy()
        close(got, ref_adasum([x.astype(np.float64) for x in xs]), xs, "float32")
        same_on_every_rank(hvd, got, "tfada.bits")

    def tf_grouped():
        a = [value(r, (5,), seed=22) for r in range(size)]
        b = [value(r, (2, 2), seed=23) * (r + 1) for r in range(size)]
        ga, gb = htf.grouped_allreduce([tf.constant(a[rank]), tf.constant(b[rank])],
                                       op=htf.Adasum, name="tfada.group")
        close(ga.numpy(), ref_adasum(a), a, "float64")
        close(gb.numpy(), ref_adasum(b), b, "float64")

    def gradient_tape():
        w = tf.Variable(np.arange(6, dtype=np.float64).reshape(3, 2) / 5.0)
        x = tf.constant(value(rank, (4, 3), seed=24))
        with tf.GradientTape() as plain:
            loss = tf.reduce_sum(tf.tanh(x @ w))
        local = plain.gradient(loss, w).numpy()
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(tf.tanh(x @ w))
        tape = htf.DistributedGradientTape(t, op=htf.Adasum)
        got = tape.gradient(loss, [w])[0].numpy()
        every = hvd.allgather(local[np.newaxis], name="tfada.local").reshape(size, 3, 2)
        close(got, ref_adasum(list(every)), list(every), "float64")

    def data(step, shape=(4, 3), seed=30):
        return value(rank, shape, seed=seed + step).astype(np.float32)

    w0 = (np.arange(6, dtype=np.float32).reshape(3, 2) - 2.5) / 4.0

    def loss_of(x, w):
        return tf.reduce_sum(tf.tanh(x @ w) ** 2)

    def expect_adasum_step(name, before, after, local_after):
        """after == before + adasum over ranks of (local_after - before)."""
        delta = (np.asarray(local_after, np.float64) - np.asarray(before, np.float64))
        every = hvd.allgather(delta[np.newaxis], name=f"{name}.deltas")
        deltas = [every[r] for r in range(size)]
        want = np.asarray(before, np.float64).ravel() + ref_adasum(deltas)
        close(np.asarray(after), want, deltas + [np.asarray(before, np.float64)], "float32")
        same_on_every_rank(hvd, np.asarray(after), f"{name}.bits")
        if size > 1:  # not what averaging the gradients would give
            avg = np.asarray(before, np.float64).ravel() + sum(deltas).ravel() / size
            assert np.max(np.abs(want - avg)) > 1e-4, "inputs do not tell Adasum from Average"

    def keras_steps(name, wrap_step):
        w = keras.Variable(w0, name="w")
        opt = hk.DistributedOptimizer(keras.optimizers.Adam(0.05), op=hk.Adasum,
                                      name=name)
        twin = keras.Variable(w0, name="twin")  # this rank's own step, for the reference
        plain = keras.optimizers.Adam(0.05)

        def grads(var, x):
            with tf.GradientTape() as t:
                loss = loss_of(x, var)
            return t.gradient(loss, [var])

        step = wrap_step(lambda x: opt.apply_gradients(zip(grads(w, x), [w])))
        for i in range(2):
            x = tf.constant(data(i))
            before = w.numpy().copy()
            twin.assign(before)
            plain.apply_gradients(zip(grads(twin, x), [twin]))
            step(x)
            expect_adasum_step(f"{name}.{i}", before, w.numpy(), twin.numpy())

    def keras_optimizer_eager():
        keras_steps("kada.eager", lambda fn: fn)

    def keras_optimizer_function():
        keras_steps("kada.fn", lambda fn: tf.function(fn, jit_compile=False))

    def keras_fit():
        keras.utils.set_random_seed(5)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, use_bias=False)])
        model.layers[0].kernel.assign(w0)
        model.compile(optimizer=hk.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                                        op=hk.Adasum, name="kada.fit"),
                      loss="mse", jit_compile=False)
        x, y = data(0, (8, 3)), data(1, (8, 2))
        twin = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, use_bias=False)])
        twin.layers[0].kernel.assign(w0)
        twin.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=False)
        twin.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        expect_adasum_step("kada.fit", w0, model.layers[0].kernel.numpy(),
                           twin.layers[0].kernel.numpy())

    def tf1_graph_optimizer():
        lr, mom = 0.1, 0.9
        g = tf.Graph()
        with g.as_default():
            x = tf.compat.v1.placeholder(tf.float32, (4, 3))
            w = tf.compat.v1.Variable(w0, name="w")
            loss = loss_of(x, w)
            grad = tf.gradients(loss, [w])[0]
            opt = htf.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(lr, mom),
                                           op=htf.Adasum, name="tf1ada")
            assert type(opt).__name__ == "_DistributedAdasumOptimizer", type(opt)
            train = opt.minimize(loss, var_list=[w])
            init = tf.compat.v1.global_variables_initializer()
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(init)
            accum = np.zeros_like(w0, dtype=np.float64)
            for i in range(2):
                feed = {x: data(i)}
                before, local_grad = sess.run([w, grad], feed)
                accum = mom * accum + local_grad  # MomentumOptimizer's own rule
                sess.run(train, feed)
                expect_adasum_step(f"tf1ada.{i}", before, sess.run(w), before - lr * accum)

    def tf1_eager_optimizer():
        lr = 0.2
        w = tf.Variable(w0)
        opt = htf.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(lr),
                                       op=htf.Adasum)
        for i in range(2):
            x = tf.constant(data(i))
            before = w.numpy().copy()
            with tf.GradientTape() as t:
                loss = loss_of(x, w)
            local_grad = t.gradient(loss, w).numpy()
            opt.apply_gradients([(tf.constant(local_grad), w)])
            expect_adasum_step(f"tf1eager.{i}", before, w.numpy(), before - lr * local_grad)

    def optimizer_arguments():
        for make in (lambda: hk.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hk.Adasum,
                                                     backward_passes_per_step=2,
                                                     average_aggregated_gradients=True),
                     lambda: htf.DistributedOptimizer(
                         tf.compat.v1.train.GradientDescentOptimizer(0.1), op=htf.Adasum,
                         gradient_predivide_factor=2.0)):
            try:
                make()
            except ValueError:
                pass
            else:
                raise AssertionError("a bad argument with op=Adasum did not raise")

    fns = {"tf_allreduce": tf_allreduce, "tf_grouped": tf_grouped,
           "gradient_tape": gradient_tape, "keras_optimizer_eager": keras_optimizer_eager,
           "keras_optimizer_function": keras_optimizer_function, "keras_fit": keras_fit,
           "tf1_graph_optimizer": tf1_graph_optimizer,
           "tf1_eager_optimizer": tf1_eager_optimizer,
           "optimizer_arguments": optimizer_arguments}
    run_checks([(n, fns[n]) for n in CHECKS], rank)
    htf.shutdown()


if __name__ == "__main__":
    main()
