"""hvd.Adasum through hvd.tensorflow / hvd.keras on N ranks: allreduce and
grouped_allreduce of tf tensors and DistributedGradientTape(op=hvd.Adasum)
against the float64 reference of adasum_ops, the same bits on every rank;
the TensorFlow and Keras DistributedOptimizer refuse Adasum with
NotImplementedError."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from adasum_ops import close, ref_adasum, same_on_every_rank, value  # noqa: E402

CHECKS = ["tf_allreduce", "tf_grouped", "gradient_tape", "optimizers_refuse"]


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

    def optimizers_refuse():
        for make in (lambda: hk.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hk.Adasum),
                     lambda: htf.DistributedOptimizer(
                         tf.compat.v1.train.GradientDescentOptimizer(0.1), op=htf.Adasum)):
            try:
                make()
            except NotImplementedError as e:
                assert "Adasum" in str(e), str(e)
            else:
                raise AssertionError("DistributedOptimizer(op=Adasum) did not raise")

    fns = {"tf_allreduce": tf_allreduce, "tf_grouped": tf_grouped,
           "gradient_tape": gradient_tape, "optimizers_refuse": optimizers_refuse}
    run_checks([(n, fns[n]) for n in CHECKS], rank)
    htf.shutdown()


if __name__ == "__main__":
    main()
