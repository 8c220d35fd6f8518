"""Horovod TensorFlow / Keras scripts' use of hvd.tensorflow.grouped_allgather,
grouped_reducescatter (eagerly and inside tf.function), hvd.keras.load_model,
callbacks.BestModelCheckpoint and SyncBatchNormalization (against
BatchNormalization on the concatenated batch, within 1e-4), on 2 ranks (run by
test_horovod_tf_extras.py under hvdrun).

Collective results are integers (or halves) and compared exactly. That the
members of a group are named f"{name}.{i}" is checked by the other rank
submitting the members one by one under those names: the collectives only
complete if the names match. The Keras checks compare optimizer state
exactly and the weights after one step with the averaged gradient within
1e-6 (float32 rounding of the update)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

CHECKS = ["grouped_allgather_eager", "grouped_allgather_graph", "grouped_allgather_names",
          "grouped_reducescatter_eager", "grouped_reducescatter_graph",
          "grouped_reducescatter_names", "grouped_reducescatter_fp16", "grouped_empty",
          "keras_grouped_names", "load_model_keras_optimizer", "load_model_hvd_optimizer",
          "load_model_trains_distributed", "best_model_checkpoint",
          "best_model_checkpoint_filepath_later", "is_homogeneous", "process_set_included_op",
          "tensorflow_keras_module", "broadcast_inplace_eager", "broadcast_inplace_graph",
          "broadcast_inplace_session", "objects_with_session", "average_helpers",
          "compressor_base", "keras_argument_order",
          "sync_batch_norm_eager", "sync_batch_norm_graph"]


def main():
    import tensorflow as tf
    import keras
    import hvd.keras as hvdk
    import hvd.tensorflow as hvd
    from common import run_checks

    hvd.init()
    n, r = hvd.size(), hvd.rank()
    out_dir = os.environ["HVD_TEST_OUT"]
    checks = {}

    def check(fn):
        checks[fn.__name__] = fn
        return fn

    def eq(got, want, what=""):
        got = np.asarray(got)
        assert got.dtype == want.dtype and got.shape == want.shape, \
            f"{what}: {got.dtype} {got.shape} vs {want.dtype} {want.shape}"
        assert np.array_equal(got, want), f"{what}:\n got {got}\nwant {want}"

    # -- grouped allgather ------------------------------------------------------------
    def gather_inputs(k):
        # rank k: k + 1 rows of float32, 2 rows of int32
        return [np.arange((k + 1) * 3, dtype=np.float32).reshape(k + 1, 3) + 10 * k,
                np.full((2, 2), k + 1, dtype=np.int32)]

    def gather_want():
        per = [gather_inputs(k) for k in range(n)]
        return [np.concatenate([p[i] for p in per]) for i in range(2)]

    @check
    def grouped_allgather_eager():
        outs = hvd.grouped_allgather([tf.constant(x) for x in gather_inputs(r)], name="tg.ag")
        assert isinstance(outs, list) and len(outs) == 2, outs
        for i, (o, w) in enumerate(zip(outs, gather_want())):
            assert isinstance(o, tf.Tensor)
            eq(o.numpy(), w, f"member {i}")

    @check
    def grouped_allgather_graph():
        @tf.function
        def fn(a, b):
            return hvd.grouped_allgather([a, b], name="tg.ag.graph")

        for step in range(2):  # the traced graph runs twice under the same names
            outs = fn(*[tf.constant(x) for x in gather_inputs(r)])
            for i, (o, w) in enumerate(zip(outs, gather_want())):
                eq(o.numpy(), w, f"step {step} member {i}")
                assert o.shape.as_list() == list(w.shape)

    @check
    def grouped_allgather_names():
        # one rank submits the group (eagerly, then in a tf.function), the
        # other its members one by one by name
        xs = [tf.constant(x) for x in gather_inputs(r)]
        graph = tf.function(lambda a, b: hvd.grouped_allgather([a, b], name="tg.ag.names.g"))
        for grouped_rank, name, fn in ((0, "tg.ag.names", None), (1, "tg.ag.names.g", graph)):
            if r != grouped_rank:
                outs = [hvd.allgather(x, name=f"{name}.{i}") for i, x in enumerate(xs)]
            elif fn is None:
                outs = hvd.grouped_allgather(xs, name=name)
            else:
                outs = fn(*xs)
            for i, (o, w) in enumerate(zip(outs, gather_want())):
                eq(o.numpy(), w, f"{name} member {i}")

    # -- grouped reducescatter --------------------------------------------------------
    def scatter_inputs(k):
        return [np.arange(4 * 3, dtype=np.float32).reshape(4, 3) * (k + 1),
                np.arange(2 * n, dtype=np.int32).reshape(2 * n, 1) + k]

    def scatter_want(op_average=False, pre=1.0, post=1.0):
        per = [scatter_inputs(k) for k in range(n)]
        out = []
        for i in range(2):
            total = sum(p[i] for p in per)
            if i == 0:
                total = (total * np.float32(pre)) * np.float32(post)
                if op_average:
                    total = total / np.float32(n)
            rows = total.shape[0] // n
            out.append(total[r * rows:(r + 1) * rows].astype(per[0][i].dtype))
        return out

    @check
    def grouped_reducescatter_eager():
        xs = [tf.constant(x) for x in scatter_inputs(r)]
        outs = hvd.grouped_reducescatter(xs, op=hvd.Sum, name="tg.rs")
        for i, (o, w) in enumerate(zip(outs, scatter_want())):
            eq(o.numpy(), w, f"Sum member {i}")
        outs = hvd.grouped_reducescatter(xs[:1], name="tg.rs.avg")  # default op: Average
        eq(outs[0].numpy(), scatter_want(op_average=True)[0], "Average")
        outs = hvd.grouped_reducescatter(xs[:1], op=hvd.Sum, prescale_factor=2.0,
                                         postscale_factor=0.5, name="tg.rs.scaled")
        eq(outs[0].numpy(), scatter_want(pre=2.0, post=0.5)[0], "scaled")

    @check
    def grouped_reducescatter_graph():
        @tf.function
        def fn(a, b):
            return hvd.grouped_reducescatter([a, b], op=hvd.Sum, name="tg.rs.graph")

        for step in range(2):
            outs = fn(*[tf.constant(x) for x in scatter_inputs(r)])
            for i, (o, w) in enumerate(zip(outs, scatter_want())):
                eq(o.numpy(), w, f"step {step} member {i}")

    @check
    def grouped_reducescatter_names():
        xs = [tf.constant(x) for x in scatter_inputs(r)]
        graph = tf.function(lambda a, b: hvd.grouped_reducescatter([a, b], op=hvd.Sum,
                                                                   name="tg.rs.names.g"))
        for grouped_rank, name, fn in ((0, "tg.rs.names", None), (1, "tg.rs.names.g", graph)):
            if r != grouped_rank:
                outs = [hvd.reducescatter(x, op=hvd.Sum, name=f"{name}.{i}")
                        for i, x in enumerate(xs)]
            elif fn is None:
                outs = hvd.grouped_reducescatter(xs, op=hvd.Sum, name=name)
            else:
                outs = fn(*xs)
            for i, (o, w) in enumerate(zip(outs, scatter_want())):
                eq(o.numpy(), w, f"{name} member {i}")

    @check
    def grouped_reducescatter_fp16():
        x = tf.constant(scatter_inputs(r)[0])
        outs = hvd.grouped_reducescatter([x], op=hvd.Sum, compression=hvd.Compression.fp16,
                                         name="tg.rs.fp16")
        assert outs[0].dtype == tf.float32
        eq(outs[0].numpy(), scatter_want()[0], "fp16 compressed Sum")

    @check
    def grouped_empty():
        for fn in (hvd.grouped_allgather, hvd.grouped_reducescatter):
            try:
                fn([])
            except ValueError as e:
                assert "at least one tensor" in str(e), str(e)
            else:
                raise AssertionError(f"{fn.__name__}([]) was accepted")

    @check
    def keras_grouped_names():
        assert hvdk.grouped_allgather is hvd.grouped_allgather
        assert hvdk.grouped_reducescatter is hvd.grouped_reducescatter

    # -- load_model ---------------------------------------------------------------------
    def value_loss(y_true, y_pred):
        # the loss is the prediction: for a bias-free linear layer the
        # gradient is the batch mean of x, whatever the weights
        return y_pred

    def trained_model(optimizer):
        model = keras.Sequential([keras.Input((3,)),
                                  keras.layers.Dense(1, use_bias=False, name="w",
                                                     kernel_initializer="ones")])
        model.compile(optimizer=optimizer, loss="mse", jit_compile=False)
        rng = np.random.default_rng(5)
        model.fit(rng.normal(size=(8, 3)).astype(np.float32),
                  rng.normal(size=(8, 1)).astype(np.float32), batch_size=4, epochs=1,
                  verbose=0)
        return model

    def save_and_load(tag, distributed):
        # Every rank builds and trains the same model (a distributed
        # optimizer's collectives, and Keras' automatic optimizer names, must
        # be the same on every rank); rank 0 saves it.
        path = os.path.join(out_dir, f"{tag}.keras")
        opt = keras.optimizers.Adam(0.01)
        if distributed:
            opt = hvdk.DistributedOptimizer(opt)
        model = trained_model(opt)
        state = None
        if r == 0:
            model.save(path)
            state = [v.numpy().tolist() for v in model.optimizer.variables]
        state = hvd.broadcast_object(state, 0, name=f"{tag}.state")
        hvd.barrier()
        loaded = hvdk.load_model(path)
        opt = loaded.optimizer
        assert isinstance(opt, keras.optimizers.Adam), type(opt)
        assert isinstance(opt, hvdk._DistributedOptimizerMixin), type(opt).__mro__
        assert int(opt.iterations.numpy()) == 2, int(opt.iterations.numpy())
        got = [v.numpy().tolist() for v in opt.variables]
        assert got == state, f"optimizer state:\n got {got}\nwant {state}"
        return loaded

    @check
    def load_model_keras_optimizer():
        save_and_load("plain", distributed=False)

    @check
    def load_model_hvd_optimizer():
        save_and_load("distributed", distributed=True)

    @check
    def load_model_trains_distributed():
        path = os.path.join(out_dir, "sgd.keras")
        model = keras.Sequential([keras.Input((3,)),
                                  keras.layers.Dense(1, use_bias=False, name="w",
                                                     kernel_initializer="ones")])
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss=value_loss, jit_compile=False)
        if r == 0:
            model.save(path)
        hvd.barrier()
        model = hvdk.load_model(path, custom_objects={"value_loss": value_loss})
        xs = [np.arange(6, dtype=np.float32).reshape(2, 3) * (k + 1) for k in range(n)]
        before = model.get_weights()[0]
        model.fit(xs[r], np.zeros((2, 1), np.float32), batch_size=2, epochs=1, verbose=0)
        after = model.get_weights()[0]
        grad = np.mean([x.mean(axis=0) for x in xs], axis=0).reshape(3, 1)
        want = before - np.float32(0.5) * grad
        assert np.allclose(after, want, rtol=0, atol=1e-6), (after, want)
        every = hvd.allgather_object(after.tolist(), name="sgd.weights")
        assert all(e == every[0] for e in every), every

    # -- BestModelCheckpoint ------------------------------------------------------------
    class Inject(keras.callbacks.Callback):
        """Puts a fixed value of 'score' into the epoch logs (before the checkpoint)."""

        def __init__(self, values):
            super().__init__()
            self.values = values

        def on_epoch_end(self, epoch, logs=None):
            logs["score"] = self.values[epoch]

    def fit_with(cb, epochs):
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(optimizer=hvdk.DistributedOptimizer(keras.optimizers.SGD(0.01)),
                      loss="mse", jit_compile=False)
        x = np.ones((4, 3), np.float32)
        model.fit(x, np.zeros((4, 1), np.float32), batch_size=2, epochs=epochs, verbose=0,
                  callbacks=[Inject([3.0, 1.0, 2.0, 0.5, 4.0]), cb])

    def saved(prefix):
        return sorted(f for f in os.listdir(out_dir) if f.startswith(prefix))

    @check
    def best_model_checkpoint():
        cb = hvdk.callbacks.BestModelCheckpoint(
            monitor="score", mode="min",
            filepath=os.path.join(out_dir, f"best-r{r}-{{epoch}}.keras"))
        assert cb.save_best_only and not cb.save_weights_only
        fit_with(cb, 5)
        hvd.barrier()
        # improvements at epochs 1, 2 and 4 (3.0, 1.0, 0.5), saved by rank 0 only
        assert saved("best-r0-") == ["best-r0-1.keras", "best-r0-2.keras", "best-r0-4.keras"], \
            saved("best-r0-")
        assert saved("best-r1-") == [], saved("best-r1-")
        loaded = hvdk.load_model(os.path.join(out_dir, "best-r0-4.keras"))
        assert isinstance(loaded.optimizer, hvdk._DistributedOptimizerMixin)

    @check
    def best_model_checkpoint_filepath_later():
        cb = hvdk.callbacks.BestModelCheckpoint(monitor="score", mode="max")
        assert cb.filepath is None
        try:
            fit_with(cb, 1)
        except ValueError as e:
            assert "filepath" in str(e), str(e)
        else:
            raise AssertionError("training with no filepath was accepted")
        cb.filepath = os.path.join(out_dir, f"later-r{r}.keras")
        fit_with(cb, 5)
        hvd.barrier()
        assert saved("later-r") == ["later-r0.keras"], saved("later-r")

    @check
    def is_homogeneous():
        assert hvd.is_homogeneous() is True and hvdk.is_homogeneous() is True

    @check
    def process_set_included_op():
        got = hvd.process_set_included_op()
        assert got.dtype == tf.int32 and int(got) == 1, got
        assert int(tf.function(lambda: hvd.process_set_included_op(0))()) == 1
        try:
            hvd.process_set_included_op(1)
        except ValueError as e:
            assert "no process set with id 1 is registered" in str(e), str(e)
        else:
            raise AssertionError("process set id 1 was accepted")

    @check
    def tensorflow_keras_module():
        # Horovod's `import horovod.tensorflow.keras as hvd` with the import line changed
        import importlib
        # (hvd here is hvd.tensorflow): a package of its own with hvd.keras's API.
        hk = importlib.import_module("hvd.tensorflow.keras")
        assert hvd.keras is hk, (hk, getattr(hvd, "keras", None))
        for name in hvdk.__all__:
            assert getattr(hk, name) is getattr(hvdk, name), name
        cb = importlib.import_module("hvd.tensorflow.keras.callbacks")
        assert cb is hk.callbacks and cb.BestModelCheckpoint is hvdk.BestModelCheckpoint
        assert hk.load_model is hvdk.load_model
        try:
            importlib.import_module("hvd.tensorflow.no_such_module")
        except ImportError:
            pass
        else:
            raise AssertionError("hvd.tensorflow.no_such_module was imported")

    # -- broadcast_, objects, helpers ---------------------------------------------------
    def start(k):
        return [np.arange(3, dtype=np.float32) + 10 * k, np.int64(100 + k)]

    @check
    def broadcast_inplace_eager():
        vs = [tf.Variable(x) for x in start(r)]
        outs = hvd.broadcast_(vs, n - 1, name="bi.eager")
        assert isinstance(outs, list) and len(outs) == 2, outs
        for v, o, w in zip(vs, outs, start(n - 1)):
            eq(v.numpy(), np.asarray(w), "variable")
            eq(o.numpy(), np.asarray(w), "returned value")
        assert hvd.broadcast_([], 0) == []

    @check
    def broadcast_inplace_graph():
        vs = [tf.Variable(x) for x in start(r)]

        @tf.function
        def fn():
            return hvd.broadcast_(vs, 0, name="bi.graph")

        for step in range(2):  # the traced graph broadcasts again: rank 0's new values
            want = start(0)
            if step:
                vs[0].assign(start(r)[0] * 2)
                want[0] = want[0] * 2
            outs = fn()
            for v, o, w in zip(vs, outs, want):
                eq(v.numpy(), np.asarray(w), f"step {step} variable")
                eq(o.numpy(), np.asarray(w), f"step {step} returned value")

    @check
    def broadcast_inplace_session():
        with tf.Graph().as_default():
            vs = [tf.compat.v1.get_variable(f"v{i}", initializer=x)
                  for i, x in enumerate(start(r))]
            outs = hvd.broadcast_(vs, 0, name="bi.session")
            assert all(isinstance(o, tf.Tensor) for o in outs), outs
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                got = sess.run(outs)  # running the values runs the broadcast
                now = sess.run(vs)
        for g, v, w in zip(got, now, start(0)):
            eq(g, np.asarray(w), "returned value")
            eq(v, np.asarray(w), "variable")

    @check
    def objects_with_session():
        with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
            got = hvd.broadcast_object({"from": r}, 1, sess, name="obj.bcast")
            every = hvd.allgather_object(("r", r), sess, name="obj.gather")
            fn = hvd.broadcast_object_fn(root_rank=0, session=sess, name="obj.fn")
            from_fn = fn([r] * (r + 1))
        assert got == {"from": 1}, got
        assert every == [("r", k) for k in range(n)], every
        assert from_fn == [0], from_fn
        assert hvd.broadcast_object(r * 10, root_rank=n - 1) == (n - 1) * 10  # eagerly too
        assert hvdk.broadcast_object is hvd.broadcast_object

    @check
    def average_helpers():
        import warnings
        f = hvd.handle_average_backwards_compatibility
        assert f(None, None) == hvd.Average and f(hvd.Sum, None) == hvd.Sum
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert f(None, True) == hvd.Average and f(None, False) == hvd.Sum
        assert [x.category for x in w] == [DeprecationWarning] * 2, w
        try:
            f(hvd.Sum, True)
        except ValueError as e:
            assert "supersedes average" in str(e), e
        else:
            raise AssertionError("op and average together did not raise")
        powers = [k for k in range(-2, 20) if hvd.check_num_rank_power_of_2(k)]
        assert powers == [1, 2, 4, 8, 16], powers
        from hvd import _ops
        assert f is _ops.handle_average_backwards_compatibility  # one helper, shared with torch

    @check
    def compressor_base():
        # Horovod's base class: hvd's compressors derive from it, a script's own
        # compressor subclasses it and serves allreduce.
        import hvd.tensorflow.compression as comp
        assert comp.Compressor is hvd.Compressor
        for c in (hvd.Compression.none, hvd.Compression.fp16, comp.NoneCompressor,
                  comp.FP16Compressor):
            assert issubclass(c, hvd.Compressor), c
        for call in (lambda: hvd.Compressor.compress(tf.constant(1.0)),
                     lambda: hvd.Compressor.decompress(tf.constant(1.0), None)):
            try:
                call()
            except NotImplementedError:
                pass
            else:
                raise AssertionError("the base class compressed")

        class Halve(hvd.Compressor):  # travels halved, as float32
            @staticmethod
            def compress(tensor):
                return tf.cast(tensor, tf.float32) / 2, tensor.dtype

            @staticmethod
            def decompress(tensor, ctx):
                return tf.cast(tensor * 2, ctx)

        x = np.arange(4, dtype=np.float64) + 10 * r
        total = sum(np.arange(4, dtype=np.float64) + 10 * k for k in range(n))
        got = hvd.allreduce(tf.constant(x), op=hvd.Sum, compression=Halve, name="comp.halve")
        eq(got.numpy(), total, "sum through a Compressor subclass")

    @check
    def keras_argument_order():
        x = np.arange(4, dtype=np.float64) + 10 * r  # a value, not a tensor
        total = sum(np.arange(4, dtype=np.float64) + 10 * k for k in range(n))
        # rank 0 names the op through hvd.keras' 2nd argument, the other ranks through
        # hvd.tensorflow's keyword: the collective completes only if the names agree
        if r == 0:
            avg = hvdk.allreduce(x, "ka.avg")
            summed = hvdk.allreduce(x, "ka.sum", None, 0.5, 4.0, hvd.Sum)
            block = hvdk.reducescatter(np.stack([x, x]), "ka.rs", hvd.Sum)
        else:
            avg = hvd.allreduce(tf.constant(x), name="ka.avg")
            summed = hvd.allreduce(tf.constant(x), op=hvd.Sum, prescale_factor=0.5,
                                   postscale_factor=4.0, name="ka.sum")
            block = hvd.reducescatter(tf.constant(np.stack([x, x])), op=hvd.Sum, name="ka.rs")
        eq(avg.numpy(), total / n, "average")
        eq(summed.numpy(), total * 2.0, "scaled sum")
        rows = np.stack([total, total])
        per, extra = divmod(2, n)
        lo = r * per + min(r, extra)
        eq(block.numpy(), rows[lo:lo + per + (1 if r < extra else 0)], "reducescatter block")

    # -- SyncBatchNormalization -------------------------------------------------------
    # Rank k holds 3 + 2k rows; the layer's outputs, input gradients, moving
    # statistics and (summed over ranks) parameter gradients must equal plain
    # BatchNormalization's on the concatenated batch, within 1e-4 (float32;
    # the global variance is E[x^2] - E[x]^2 as Horovod computes it).
    def sync_bn_case(graph):
        C = 4
        rows = [3 + 2 * k for k in range(n)]
        rng = np.random.RandomState(7)
        xs = [(rng.standard_normal((rows[k], C)) * (k + 1) + k).astype(np.float32) for k in range(n)]
        ws = [rng.standard_normal((rows[k], C)).astype(np.float32) for k in range(n)]
        layer = hvd.SyncBatchNormalization(momentum=0.5)
        assert isinstance(layer, keras.layers.BatchNormalization)
        assert hvdk.SyncBatchNormalization is hvd.SyncBatchNormalization
        ref = keras.layers.BatchNormalization(momentum=0.5)
        w = tf.constant(ws[r])

        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = layer(x, training=True)
                loss = tf.reduce_sum(y * w)
            return (y,) + tuple(tape.gradient(loss, [x, layer.gamma, layer.beta]))

        if graph:
            step = tf.function(step)
        y, gx, gg, gb = step(tf.constant(xs[r]))
        big_x, big_w = tf.constant(np.concatenate(xs)), tf.constant(np.concatenate(ws))
        with tf.GradientTape() as tape:
            tape.watch(big_x)
            big_y = ref(big_x, training=True)
            loss = tf.reduce_sum(big_y * big_w)
        want_gx, want_gg, want_gb = tape.gradient(loss, [big_x, ref.gamma, ref.beta])
        lo = sum(rows[:r])
        hi = lo + rows[r]

        def close(got, want, what):
            got, want = np.asarray(got), np.asarray(want)
            assert np.allclose(got, want, rtol=1e-4, atol=1e-4), f"{what}:\n got {got}\nwant {want}"

        close(y, big_y[lo:hi], "outputs")
        close(gx, want_gx[lo:hi], "input gradient")
        tag = "graph" if graph else "eager"
        close(hvd.allreduce(gg, op=hvd.Sum, name=f"sbn.gg.{tag}"), want_gg, "gamma gradient")
        close(hvd.allreduce(gb, op=hvd.Sum, name=f"sbn.gb.{tag}"), want_gb, "beta gradient")
        close(layer.moving_mean, ref.moving_mean, "moving mean")
        close(layer.moving_variance, ref.moving_variance, "moving variance")
        # Inference uses the moving statistics alone: no collective.
        close(layer(tf.constant(xs[r]), training=False), ref(tf.constant(xs[r]), training=False),
              "inference")

    @check
    def sync_batch_norm_eager():
        sync_bn_case(False)

    @check
    def sync_batch_norm_graph():
        sync_bn_case(True)

    assert list(checks) == CHECKS, list(checks)
    run_checks(list(checks.items()), r)
    hvd.shutdown()


if __name__ == "__main__":
    main()
