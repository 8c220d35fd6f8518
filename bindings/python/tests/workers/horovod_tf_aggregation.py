"""A Horovod TensorFlow script's use of hvd.tensorflow.DistributedOptimizer
around a tf.compat.v1.train.Optimizer with backward_passes_per_step = n > 1,
on 2 ranks (run by test_horovod_tf_aggregation.py under hvdrun): in a TF1
graph (Session.run of minimize's train op), eagerly and inside tf.function.

The loss is sum(w * x) (plus sum(u * x) for a second variable), so the
gradient of a pass is its input x, known here for every rank and pass: the
reference after n passes is one step of the wrapped optimizer with the
reduced (Average: the ranks' mean; Sum: their sum) sum of the n inputs,
divided by n with average_aggregated_gradients; between those passes the
variables do not move (and a Momentum slot stays as it was), while a
global_step advances every pass. Inputs, learning rates and momentum are
small dyadic numbers and the variables float64, so every comparison is
exact (np.array_equal)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

CHECKS = ["graph_average", "graph_sum_averaged_momentum", "graph_collections",
          "graph_sparse", "eager_average", "function_average_aggregated",
          "local_variable", "arguments"]

SHAPE = (3, 2)


def data(r, k, shape=SHAPE):
    """Rank r's input (= gradient) at pass k: dyadic float64."""
    i = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    return (r + 1) * (k + 1) + i * 0.25 - (k % 3) * 0.5


def main():
    import tensorflow as tf
    import hvd.tensorflow as hvd
    from common import run_checks

    hvd.init()
    n, r = hvd.size(), hvd.rank()
    assert n == 2, "the references assume 2 ranks"
    w0 = np.arange(6, dtype=np.float64).reshape(SHAPE) - 2.5
    checks = {}

    def check(fn):
        checks[fn.__name__] = fn
        return fn

    def eq(got, want, what=""):
        got = np.asarray(got)
        assert got.dtype == want.dtype and got.shape == want.shape, \
            f"{what}: {got.dtype} {got.shape} vs {want.dtype} {want.shape}"
        assert np.array_equal(got, want), f"{what}:\n got {got.tolist()}\nwant {want.tolist()}"

    def reduced(passes, op="average", shape=SHAPE):
        """The ranks' reduction of each rank's sum of its inputs of `passes`."""
        sums = [sum(data(k, p, shape) for p in passes) for k in range(n)]
        total = sum(sums)
        return total / n if op == "average" else total

    # -- TF1 graph ------------------------------------------------------------------------
    def graph_run(opt_factory, passes, extra=None):
        """Builds minimize(sum(w * x), global_step) in a TF1 graph and runs
        `passes` passes; returns per pass (w, global_step, extra values)."""
        g = tf.Graph()
        with g.as_default():
            x = tf.compat.v1.placeholder(tf.float64, SHAPE)
            w = tf.compat.v1.Variable(w0, name="w")
            gs = tf.compat.v1.train.get_or_create_global_step()
            opt = opt_factory()
            train = opt.minimize(tf.reduce_sum(w * x), global_step=gs, var_list=[w])
            more = extra(opt, w) if extra else []
            init = [tf.compat.v1.global_variables_initializer(),
                    tf.compat.v1.local_variables_initializer()]
        out = []
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(init)
            for k in range(passes):
                sess.run(train, {x: data(r, k)})
                out.append(sess.run([w, gs] + more))
        return out

    @check
    def graph_average():
        lr, bpps = 0.5, 3
        out = graph_run(lambda: hvd.DistributedOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(lr), backward_passes_per_step=bpps,
            name="agg.graph"), 7)
        w = w0.copy()
        for k, (got_w, got_gs) in enumerate(out):
            if k % bpps == bpps - 1:  # a reduction and one step
                w = w - lr * reduced(range(k - bpps + 1, k + 1))
            eq(got_w, w, f"w after pass {k}")
            assert got_gs == k + 1, f"global_step {got_gs} after pass {k}"
        assert not np.array_equal(out[2][0], w0) and np.array_equal(out[1][0], w0)

    @check
    def graph_sum_averaged_momentum():
        lr, mom, bpps = 0.5, 0.5, 2
        out = graph_run(lambda: hvd.DistributedOptimizer(
            tf.compat.v1.train.MomentumOptimizer(lr, mom), backward_passes_per_step=bpps,
            op=hvd.Sum, average_aggregated_gradients=True, name="agg.mom"), 6,
            extra=lambda opt, w: [opt.get_slot(w, "momentum")])
        w, accum = w0.copy(), np.zeros(SHAPE)
        for k, (got_w, got_gs, got_slot) in enumerate(out):
            if k % bpps == bpps - 1:
                grad = reduced(range(k - bpps + 1, k + 1), op="sum") / bpps
                accum = mom * accum + grad  # MomentumOptimizer's rule, only on applied steps
                w = w - lr * accum
            eq(got_w, w, f"w after pass {k}")
            eq(got_slot, accum, f"momentum slot after pass {k}")
            assert got_gs == k + 1, f"global_step {got_gs} after pass {k}"

    @check
    def graph_collections():
        g = tf.Graph()
        with g.as_default():
            w = tf.compat.v1.Variable(w0, name="w")
            x = tf.constant(data(r, 0))
            opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5),
                                           backward_passes_per_step=2, name="agg.coll")
            gv = opt.compute_gradients(tf.reduce_sum(w * x), var_list=[w])
            assert [v for _, v in gv] == [w]
            local = tf.compat.v1.local_variables()
            # Horovod's: the counter and the accumulator are local, not global or trainable
            assert len(local) == 2, local
            assert tf.compat.v1.global_variables() == [w], tf.compat.v1.global_variables()
            assert tf.compat.v1.trainable_variables() == [w]
            init = [tf.compat.v1.global_variables_initializer(),
                    tf.compat.v1.local_variables_initializer()]
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(init)
            # compute_gradients alone: this pass's own gradient, then the
            # reduction of both passes' sums (the accumulators then cleared)
            eq(sess.run(gv[0][0]), data(r, 0), "pass 1 returns its own gradient")
            eq(sess.run(gv[0][0]), reduced([0, 0]), "pass 2 returns the reduced sum")
            eq(sess.run(gv[0][0]), data(r, 0), "pass 3: accumulators were cleared")
            eq(sess.run(gv[0][0]), reduced([0, 0]), "pass 4")

    @check
    def graph_sparse():
        rows = np.arange(8, dtype=np.float64).reshape(4, 2)

        def run(sparse_as_dense):
            g = tf.Graph()
            with g.as_default():
                e = tf.compat.v1.Variable(rows, name="e")
                loss = tf.reduce_sum(tf.gather(e, [r, 2]) * (r + 1.0))  # IndexedSlices
                opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                               backward_passes_per_step=2,
                                               sparse_as_dense=sparse_as_dense, name="agg.sp")
                train = opt.minimize(loss, var_list=[e])
                init = [tf.compat.v1.global_variables_initializer(),
                        tf.compat.v1.local_variables_initializer()]
            with tf.compat.v1.Session(graph=g) as sess:
                sess.run(init)
                out = []
                for _ in range(2):
                    sess.run(train)
                    out.append(sess.run(e))
                return out

        try:
            run(False)
        except ValueError as e:
            assert "sparse_as_dense" in str(e), e
        else:
            raise AssertionError("IndexedSlices with backward_passes_per_step > 1 were accepted")
        got = run(True)
        eq(got[0], rows, "no step after pass 1")
        # dense gradient of rank k: (k + 1) on rows k and 2; two passes, mean over ranks
        g = np.zeros((4, 2))
        for k in range(n):
            g[k] += 2 * (k + 1) / n
            g[2] += 2 * (k + 1) / n
        eq(got[1], rows - g, "one step with the averaged sum after pass 2")

    # -- eagerly and in tf.function -------------------------------------------------------------
    @check
    def eager_average():
        lr, bpps = 0.25, 2
        w = tf.Variable(w0)
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(lr),
                                       backward_passes_per_step=bpps, name="agg.eager")
        ref = w0.copy()
        for k in range(5):
            x = tf.constant(data(r, k))
            opt.minimize(lambda: tf.reduce_sum(w * x), var_list=[w])
            if k % bpps == bpps - 1:
                ref = ref - lr * reduced(range(k - bpps + 1, k + 1))
            eq(w.numpy(), ref, f"w after pass {k}")

    @check
    def function_average_aggregated():
        lr, bpps = 0.5, 3
        w = tf.Variable(w0)
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(lr),
                                       backward_passes_per_step=bpps,
                                       average_aggregated_gradients=True, name="agg.fn")

        @tf.function
        def step(x):
            opt.minimize(lambda: tf.reduce_sum(w * x), var_list=[w])

        ref = w0.copy()
        for k in range(6):
            step(tf.constant(data(r, k)))
            if k % bpps == bpps - 1:
                ref = ref - lr * reduced(range(k - bpps + 1, k + 1)) / bpps
            eq(w.numpy(), ref, f"w after pass {k}")

    # -- register_local_var, arguments ----------------------------------------------------------
    @check
    def local_variable():
        lr = 0.5
        for bpps in (1, 2):
            w, u = tf.Variable(w0), tf.Variable(w0 * 2)
            opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(lr),
                                           backward_passes_per_step=bpps,
                                           name=f"agg.local{bpps}")
            opt.register_local_var(u)
            rw, ru = w0.copy(), w0 * 2
            for k in range(2 * bpps):
                x = tf.constant(data(r, k))
                opt.minimize(lambda: tf.reduce_sum(w * x) + tf.reduce_sum(u * x * 2),
                             var_list=[w, u])
                if k % bpps == bpps - 1:
                    passes = range(k - bpps + 1, k + 1)
                    rw = rw - lr * reduced(passes)
                    # u's gradient stays this rank's own, divided by size
                    ru = ru - lr * sum(2 * data(r, p) for p in passes) / n
                eq(w.numpy(), rw, f"bpps {bpps}: w after pass {k}")
                eq(u.numpy(), ru, f"bpps {bpps}: local u after pass {k}")

    @check
    def arguments():
        sgd = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        for kwargs in (dict(backward_passes_per_step=0), dict(backward_passes_per_step=1.5),
                       dict(backward_passes_per_step=2, op=hvd.Adasum),
                       dict(op=hvd.Adasum, average_aggregated_gradients=True)):
            try:
                hvd.DistributedOptimizer(sgd, **kwargs)
            except ValueError:
                pass
            else:
                raise AssertionError(f"{kwargs} was accepted")

    assert list(checks) == CHECKS, list(checks)
    run_checks(list(checks.items()), r)
    hvd.shutdown()


if __name__ == "__main__":
    main()
