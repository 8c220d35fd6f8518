"""What Horovod TensorFlow scripts rely on beyond the API's names, on 2 ranks
(run by test_horovod_dropin_tf.py under hvdrun):

  indexed_slices_function, indexed_slices_graph  allreduce and
      grouped_allreduce (also mixed with dense tensors) of tf.IndexedSlices
      made without dense_shape, in tf.function and in a TensorFlow 1 graph:
      values and indices allgathered (values divided by 2 for Average);
  indexed_slices_scale  prescale/postscale with IndexedSlices raise
      NotImplementedError;
  grouped_allgather_gradient_graph  the gradient of grouped_allgather in a
      TensorFlow 1 graph;
  sync_batch_norm_fused  SyncBatchNormalization(fused=False);
  local_variables_keras3  PartialDistributedGradientTape and
      BroadcastGlobalVariablesCallback with local Keras 3 variables;
  executing_eagerly_alias  hvd._executing_eagerly().

Every rank's values are integers (or halves) and compared exactly.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

CHECKS = ["indexed_slices_function", "indexed_slices_graph", "indexed_slices_scale",
          "grouped_allgather_gradient_graph", "sync_batch_norm_fused", "local_variables_keras3",
          "executing_eagerly_alias"]


def make_checks(tf, keras, hvd, hvdk, r):
    checks = {}

    def check(fn):
        checks[fn.__name__] = fn
        return fn

    # rank k holds rows [k+1, 10(k+1)] at indices [k, k + 2]
    def values(k):
        return np.array([[k + 1.0, 10.0 * (k + 1)], [2.0 * (k + 1), 20.0 * (k + 1)]], np.float32)

    def indices(k):
        return np.array([k, k + 2], np.int64)

    all_values = np.concatenate([values(0), values(1)])
    all_indices = np.concatenate([indices(0), indices(1)])
    dense = np.full((3,), 2.0 * (r + 1), np.float32)

    def expect_slices(got, what, scale=1.0):
        np.testing.assert_array_equal(np.asarray(got.indices), all_indices, what)
        np.testing.assert_array_equal(np.asarray(got.values), all_values * scale, what)

    def reduce_all(v, i, d, tag):
        s = tf.IndexedSlices(v, i)  # no dense_shape
        out = [hvd.allreduce(s, op=hvd.Sum, name=f"{tag}.sum"),
               hvd.allreduce(s, name=f"{tag}.avg")]
        grouped = hvd.grouped_allreduce([tf.IndexedSlices(v, i), d], op=hvd.Average,
                                        name=f"{tag}.mixed")
        return out + list(grouped)

    def expect_all(got, what):
        expect_slices(got[0], f"{what}: Sum")
        expect_slices(got[1], f"{what}: Average", 0.5)
        expect_slices(got[2], f"{what}: grouped, slices", 0.5)
        np.testing.assert_array_equal(np.asarray(got[3]), np.full((3,), 3.0, np.float32), what)

    @check
    def indexed_slices_function():
        fn = tf.function(lambda v, i, d: reduce_all(v, i, d, "slices.fn"))
        expect_all(fn(tf.constant(values(r)), tf.constant(indices(r)), tf.constant(dense)),
                   "tf.function")

    @check
    def indexed_slices_graph():
        with tf.Graph().as_default():
            out = reduce_all(tf.constant(values(r)), tf.constant(indices(r)),
                             tf.constant(dense), "slices.graph")
            with tf.compat.v1.Session() as sess:
                got = sess.run([(o.values, o.indices) if isinstance(o, tf.IndexedSlices) else o
                                for o in out])
        got = [tf.IndexedSlices(*g) if isinstance(g, tuple) else g for g in got]
        expect_all(got, "graph")

    @check
    def indexed_slices_scale():
        s = tf.IndexedSlices(tf.constant(values(r)), tf.constant(indices(r)))
        for kw in ({"prescale_factor": 2.0}, {"postscale_factor": 0.5}):
            for call in (lambda: hvd.allreduce(s, op=hvd.Sum, **kw),
                         lambda: hvd.grouped_allreduce([s, tf.constant(dense)], op=hvd.Sum,
                                                       **kw)):
                try:
                    call()
                except NotImplementedError:
                    continue
                raise AssertionError(f"no NotImplementedError for IndexedSlices with {kw}")

    @check
    def grouped_allgather_gradient_graph():
        with tf.Graph().as_default():
            xs = [tf.constant(np.full((r + 1, 2), 1.0 + r, np.float32)),
                  tf.constant(np.full((2,), 3.0, np.float32))]
            ys = hvd.grouped_allgather(xs, name="gag.graph")
            # one backward per output, all run in one step (as Horovod's test does)
            grads = [tf.gradients(y, x, grad_ys=tf.ones_like(y) * float(k + 1))[0]
                     for k, (y, x) in enumerate(zip(ys, xs))]
            with tf.compat.v1.Session() as sess:
                got = sess.run(grads)
        # d / d y_k = k + 1 everywhere, the same on both ranks: this rank's rows of
        # its average are k + 1
        np.testing.assert_array_equal(got[0], np.full((r + 1, 2), 1.0, np.float32))
        np.testing.assert_array_equal(got[1], np.full((2,), 2.0, np.float32))

    @check
    def sync_batch_norm_fused():
        layer = hvd.SyncBatchNormalization(fused=False, axis=-1)
        x = tf.constant(np.arange(8, dtype=np.float32).reshape(4, 2) + 4 * r)
        y = layer(x, training=True)
        assert tuple(y.shape) == (4, 2), y.shape

    @check
    def local_variables_keras3():
        keras.utils.set_random_seed(7)
        local = keras.layers.Dense(1, name="local")
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2, name="shared"),
                                  local])
        x = tf.constant(np.ones((1, 2), np.float32) * (r + 1))
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x))
        tape = hvd.PartialDistributedGradientTape(tape, local_layers=[local])
        grads = tape.gradient(loss, model.trainable_weights)
        assert all(g is not None for g in grads)
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=False)
        before = [np.array(v) for v in local.trainable_weights]
        for v in local.trainable_weights:
            v.assign(v + float(r))  # differs on rank 1
        cb = hvdk.callbacks.BroadcastGlobalVariablesCallback(
            0, local_variables=local.trainable_weights)
        model.fit(np.ones((2, 2), np.float32), np.ones((2, 1), np.float32), epochs=1,
                  batch_size=2, verbose=0, callbacks=[cb])
        assert before is not None

    @check
    def executing_eagerly_alias():
        assert hvd._executing_eagerly() is True
        with tf.Graph().as_default():
            assert hvd._executing_eagerly() is False
        seen = []
        tf.function(lambda: seen.append(hvd._executing_eagerly()) or tf.constant(0))()
        assert seen == [False], seen

    assert list(checks) == CHECKS, list(checks)
    return list(checks.items())


def main():
    import tensorflow as tf
    import keras
    import hvd.keras as hvdk
    import hvd.tensorflow as hvd
    from common import run_checks
    hvd.init()
    run_checks(make_checks(tf, keras, hvd, hvdk, hvd.rank()), hvd.rank())
    hvd.shutdown()


if __name__ == "__main__":
    main()
