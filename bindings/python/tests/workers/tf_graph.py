"""hvd.tensorflow in graphs, as Horovod scripts use it: many independent ops
in one tf.compat.v1 Session.run and in one tf.function, built in a different
order on each rank, on an inter-op pool of argv[1] threads; the TF1 helpers
(broadcast_global_variables, BroadcastGlobalVariablesHook,
DistributedOptimizer, *_op); broadcast_variables inside a tf.function.

Usage: tf_graph.py THREADS [CHECK ...] (all checks when none is named)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

THREADS = int(sys.argv[1])
ONLY = sys.argv[2:]
N_OPS = 12  # independent hvd ops per run: more than any pool used here


def main():
    import tensorflow as tf
    # Before TensorFlow starts its runtime: the pool tf.function runs on.
    tf.config.threading.set_inter_op_parallelism_threads(THREADS)
    import hvd.tensorflow as hvd
    from common import run_checks, write

    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    out = {"kernels": None}

    def session():
        cfg = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=THREADS,
                                       intra_op_parallelism_threads=1,
                                       use_per_session_threads=True)
        return tf.compat.v1.Session(config=cfg)

    def rank_order(n):
        # Rank 0 builds the ops in one order, rank 1 in reverse, others shuffled.
        order = list(range(n))
        if rank % 2 == 1:
            order.reverse()
        elif rank > 0:
            np.random.default_rng(rank).shuffle(order)
        return order

    def expected(i):
        """What op i gives on this rank."""
        vals = [np.arange(4) + 10 * i + r for r in range(size)]
        kind = i % 6
        if kind == 0:
            return sum(vals)
        if kind == 1:
            return vals[size - 1]
        if kind == 2:
            return np.concatenate([v.reshape(2, 2) for v in vals])
        if kind == 3:
            avg = np.mean(vals, axis=0)
            return [avg, avg * 2]
        if kind == 4:
            return np.concatenate([np.tile(v, size).reshape(size * 2, 2)[2 * rank:2 * rank + 2]
                                   for v in vals])
        return sum(vals).reshape(1, 4)

    def build_ops(prefix):
        """N_OPS independent ops of every kind, named so that each rank may
        build them in its own order: {i: tensor or list of tensors}."""
        ops = {}
        for i in rank_order(N_OPS):
            kind = i % 6
            nm = f"{prefix}.{i}"
            base = tf.constant(np.arange(4, dtype=np.float32) + 10 * i + rank)
            if kind == 0:
                ops[i] = hvd.allreduce(base, op=hvd.Sum, name=nm)
            elif kind == 1:
                ops[i] = hvd.broadcast(base, root_rank=size - 1, name=nm)
            elif kind == 2:
                ops[i] = hvd.allgather(tf.reshape(base, [2, 2]), name=nm)
            elif kind == 3:
                ops[i] = hvd.grouped_allreduce([base, base * 2], op=hvd.Average, name=nm)
            elif kind == 4:
                ops[i] = hvd.alltoall(tf.reshape(tf.tile(base, [size]), [size * 2, 2]), name=nm)
            else:
                ops[i] = hvd.reducescatter(tf.reshape(tf.tile(base, [size]), [size, 4]),
                                           op=hvd.Sum, name=nm)
        return ops

    def check_results(values):
        assert sorted(values) == list(range(N_OPS)), sorted(values)
        for i in range(N_OPS):
            exp, got = expected(i), values[i]
            if isinstance(exp, list):
                assert len(got) == len(exp), (i, got)
                for g, e in zip(got, exp):
                    np.testing.assert_allclose(g, e, rtol=1e-6, err_msg=f"op {i}")
            else:
                np.testing.assert_allclose(got, exp, rtol=1e-6, err_msg=f"op {i}")

    def session_many_ops():
        from hvd import _tf_kernels
        with tf.Graph().as_default():
            ops = build_ops("v1")
            # (the first graph op loaded the kernels, or failed to)
            out["kernels"] = _tf_kernels.error() or "loaded"
            with session() as sess:
                for _ in range(3):  # the same graph again: names are reused
                    check_results(sess.run(ops))

    def tf_function_many_ops():
        @tf.function
        def step():
            return build_ops("fn")

        for _ in range(2):
            check_results(tf.nest.map_structure(lambda t: t.numpy(), step()))

    def topology_ops():
        assert int(hvd.rank_op()) == rank and int(hvd.size_op()) == size
        assert int(hvd.local_rank_op()) == hvd.local_rank()
        assert int(hvd.local_size_op()) == hvd.local_size()

        @tf.function
        def f():
            return hvd.rank_op(), hvd.size_op(), hvd.local_rank_op(), hvd.local_size_op()

        assert [int(x) for x in f()] == [rank, size, hvd.local_rank(), hvd.local_size()]
        with tf.Graph().as_default():
            t = [hvd.rank_op(), hvd.size_op(), hvd.local_rank_op(), hvd.local_size_op()]
            assert all(x.shape.rank == 0 and x.dtype == tf.int32 for x in t)
            with session() as sess:
                assert sess.run(t) == [rank, size, hvd.local_rank(), hvd.local_size()]

    def broadcast_global_variables():
        try:
            hvd.broadcast_global_variables(0)
            raise AssertionError("eager broadcast_global_variables did not raise")
        except RuntimeError as e:
            assert "does not support eager execution" in str(e), e
        with tf.Graph().as_default():
            a = tf.compat.v1.get_variable("a", initializer=np.full([3], rank + 1.0, np.float32))
            b = tf.compat.v1.get_variable("b", initializer=np.arange(4, dtype=np.int64) * rank)
            bcast = hvd.broadcast_global_variables(size - 1)
            assert isinstance(bcast, tf.Operation), type(bcast)
            with session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                sess.run(bcast)
                va, vb = sess.run([a, b])
            np.testing.assert_array_equal(va, np.full([3], float(size)))
            np.testing.assert_array_equal(vb, np.arange(4) * (size - 1))

    def broadcast_hook():
        with tf.Graph().as_default():
            w = tf.compat.v1.get_variable("w", initializer=np.full([2], 10.0 * rank, np.float32))
            hooks = [hvd.BroadcastGlobalVariablesHook(0)]
            with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks) as sess:
                np.testing.assert_array_equal(sess.run(w), [0.0, 0.0])

    def v1_distributed_optimizer():
        with tf.Graph().as_default():
            w = tf.compat.v1.get_variable("w", initializer=np.zeros([3], np.float32))
            x = tf.constant(np.arange(3, dtype=np.float32) + rank)
            loss = tf.reduce_sum(w * x)  # gradient: x, this rank's
            opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5))
            train = opt.minimize(loss)
            with session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                for _ in range(3):
                    sess.run(train)
                got = sess.run(w)
        mean_x = np.mean([np.arange(3) + r for r in range(size)], axis=0)
        np.testing.assert_allclose(got, -0.5 * 3 * mean_x, rtol=1e-6)
        out["v1_weights"] = got.tolist()

    def broadcast_variables_in_tf_function():
        # Horovod's TF2 example: broadcast at the end of the first step,
        # inside the tf.function.
        import keras
        keras.utils.set_random_seed(100 + rank)  # different initial weights
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4),
                                  keras.layers.Dense(1)])
        opt = keras.optimizers.SGD(0.01, momentum=0.9)
        x = tf.constant(np.random.default_rng(rank).normal(size=(8, 3)).astype(np.float32))
        y = tf.reduce_sum(x, axis=1, keepdims=True)

        @tf.function
        def training_step(first_batch):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
            tape = hvd.DistributedGradientTape(tape)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            if first_batch:
                hvd.broadcast_variables(model.variables, root_rank=0)
                hvd.broadcast_variables(opt.variables, root_rank=0)
            return loss

        for step in range(4):
            training_step(step == 0)
        out["tf2_weights"] = [w.numpy().tolist() for w in model.weights]
        out["tf2_opt"] = [np.asarray(v).tolist() for v in opt.variables]

    def graph_errors():
        with tf.Graph().as_default():
            bad = hvd.allreduce(tf.ones([2 + rank]), name="v1_mismatch")
            bad_root = hvd.broadcast(tf.ones([2]), root_rank=size + 3, name="v1_root")
            good = hvd.allreduce(tf.constant([1.0 + rank]), op=hvd.Sum, name="v1_after")
            with session() as sess:
                try:
                    sess.run(bad)
                    raise AssertionError("no error for a shape mismatch")
                except tf.errors.FailedPreconditionError as e:
                    assert "HVD_ERR_MISMATCH" in e.message and "v1_mismatch" in e.message, e
                try:
                    sess.run(bad_root)
                    raise AssertionError("no error for a bad root")
                except tf.errors.InvalidArgumentError as e:
                    assert "HVD_ERR_INVALID_ARGUMENT" in e.message, e
                got = sess.run(good)
        assert got.tolist() == [float(sum(range(1, size + 1)))], got

    def local_grads(model, loss_fn):
        with tf.GradientTape() as tape:
            loss = loss_fn()
        return [g for g in tape.gradient(loss, model.trainable_variables)]

    def partial_tape():
        import keras
        keras.utils.set_random_seed(7 + rank)
        shared = keras.layers.Dense(2, name="shared")
        local = keras.layers.Dense(1, name="local")
        model = keras.Sequential([keras.Input((3,)), shared, local])
        x = tf.constant(np.random.default_rng(rank).normal(size=(5, 3)).astype(np.float32))

        def loss_fn():
            return tf.reduce_sum(model(x) ** 2)

        mine = [g.numpy() for g in local_grads(model, loss_fn)]
        every = hvd.allgather_object(mine, name="partial.local_grads")
        n_shared = len(shared.trainable_weights)
        for scale, make in ((True, lambda t: hvd.PartialDistributedGradientTape(t, local_layers=[local])),
                            (False, lambda t: hvd.PartialDistributedGradientTape(
                                t, local_layers=local, scale_local_gradients=False))):
            for graph in (False, True):
                def run():
                    with tf.GradientTape() as tape:
                        loss = loss_fn()
                    return make(tape).gradient(loss, model.trainable_variables)

                got = tf.function(run)() if graph else run()
                for k, g in enumerate(got):
                    if k < n_shared:
                        exp = np.mean([every[r][k] for r in range(size)], axis=0)
                    else:
                        exp = mine[k] / size if scale else mine[k]
                    np.testing.assert_allclose(g.numpy(), exp, rtol=1e-5, atol=1e-6,
                                               err_msg=f"grad {k} scale={scale} graph={graph}")
        # register_local_source on a plain DistributedGradientTape
        with tf.GradientTape() as tape:
            loss = loss_fn()
        dtape = hvd.DistributedGradientTape(tape)
        dtape.register_local_source(local.kernel)
        got = dtape.gradient(loss, model.trainable_variables)
        kernel_index = [id(v) for v in model.trainable_variables].index(id(local.kernel))
        np.testing.assert_allclose(got[kernel_index].numpy(), mine[kernel_index] / size,
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[0].numpy(), np.mean([e[0] for e in every], axis=0),
                                   rtol=1e-5, atol=1e-6)

    def sparse_tape():
        emb = tf.Variable(np.arange(30, dtype=np.float32).reshape(10, 3))
        ids = tf.constant([rank, rank + 2, 9 - rank, rank])

        def loss_fn():
            return tf.reduce_sum(tf.gather(emb, ids) * float(rank + 1))

        with tf.GradientTape() as tape:
            loss = loss_fn()
        mine = tf.convert_to_tensor(tape.gradient(loss, [emb])[0]).numpy()
        exp = np.mean(hvd.allgather_object(mine, name="sparse.local"), axis=0)
        for sparse_as_dense in (False, True):
            for graph in (False, True):
                def run():
                    with tf.GradientTape() as t:
                        loss = loss_fn()
                    t = hvd.DistributedGradientTape(t, sparse_as_dense=sparse_as_dense)
                    return t.gradient(loss, [emb])[0]

                g = tf.function(run)() if graph else run()
                assert isinstance(g, tf.IndexedSlices) != sparse_as_dense, type(g)
                np.testing.assert_allclose(tf.convert_to_tensor(g).numpy(), exp, rtol=1e-6)

    checks = [("session_many_ops", session_many_ops),
              ("tf_function_many_ops", tf_function_many_ops),
              ("topology_ops", topology_ops),
              ("broadcast_global_variables", broadcast_global_variables),
              ("broadcast_hook", broadcast_hook),
              ("v1_distributed_optimizer", v1_distributed_optimizer),
              ("broadcast_variables_in_tf_function", broadcast_variables_in_tf_function),
              ("graph_errors", graph_errors),
              ("partial_tape", partial_tape),
              ("sparse_tape", sparse_tape)]
    if ONLY:
        checks = [c for c in checks if c[0] in ONLY]
    out["checks"] = run_checks(checks, rank)
    write(rank, out)
    hvd.shutdown()


if __name__ == "__main__":
    main()
