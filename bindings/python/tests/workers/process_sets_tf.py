"""hvd.tensorflow and hvd.keras with process sets on 2 ranks: `even` = [0]
and `odd` = [1] (hvd.init(process_sets=...)) and `both` = [0, 1] (added
later: the ranks of the whole job, but a context and names of its own).
Each op with process_set= eagerly and inside tf.function (hvd's kernels),
exact for integers and within 1e-6 relative for float32; the same name in a
set and in the whole job at once; DistributedGradientTape and the Keras
DistributedOptimizer averaging within the set only; broadcast_variables;
size_op / process_set_included_op; a graph built on a set that is then
removed fails with FailedPreconditionError, not a crash."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
try:
    from common import Checks  # run as a script (this folder first on sys.path)
except ImportError:
    from workers.common import Checks  # imported by a test module

CHECKS = ["eager_ops", "graph_ops", "same_names_at_once", "gradient_tape", "keras_optimizer",
          "broadcast_variables", "topology_ops", "errors", "removed_set_in_graph"]
SIZE = 2


def check_names():
    return list(CHECKS)


def make_checks(hvd, hk, tf, keras, rank, even, odd, both):
    checks = Checks()
    add = checks.add

    mine = even if rank == 0 else odd
    other = odd if rank == 0 else even
    sets = [(mine, [rank]), (both, [0, 1]), (hvd.global_process_set, [0, 1])]

    def val(g, n=3):
        return np.arange(n, dtype=np.int64) + 10 * g + 1

    def ops(ps, ranks, tag):
        """Every op on ps; returns (what, got, want) triples."""
        i, n = ranks.index(rank), len(ranks)
        out = []
        x = tf.constant(val(rank))
        out.append(("sum", hvd.allreduce(x, op=hvd.Sum, name=f"{tag}.s", process_set=ps),
                    sum(val(g) for g in ranks)))
        out.append(("avg", hvd.allreduce(tf.cast(x, tf.float32), name=f"{tag}.a",
                                         process_set=ps),
                    (sum(val(g) for g in ranks) / n).astype(np.float32)))
        gr = hvd.grouped_allreduce([x, x * 2], op=hvd.Sum, name=f"{tag}.g", process_set=ps)
        out.append(("grouped", gr[1], 2 * sum(val(g) for g in ranks)))
        out.append(("gather", hvd.allgather(tf.fill([rank + 1], rank), name=f"{tag}.ag",
                                            process_set=ps),
                    np.concatenate([np.full(g + 1, g) for g in ranks]).astype(np.int32)))
        out.append(("bcast", hvd.broadcast(x, ranks[-1], name=f"{tag}.b", process_set=ps),
                    val(ranks[-1])))
        send = tf.constant(np.concatenate([np.full(j + 1, 100 * rank + j) for j in range(n)]))
        a2a, recv = hvd.alltoall(send, splits=[j + 1 for j in range(n)], name=f"{tag}.t",
                                 process_set=ps)
        out.append(("alltoall", a2a, np.concatenate([np.full(i + 1, 100 * g + i)
                                                     for g in ranks])))
        out.append(("recv", recv, np.full(n, i + 1, np.int64)))
        rs = hvd.reducescatter(tf.constant(np.stack([val(rank)] * n)), op=hvd.Sum,
                               name=f"{tag}.rs", process_set=ps)
        out.append(("reducescatter", rs, sum(val(g) for g in ranks)[None, :]))
        gag = hvd.grouped_allgather([tf.constant([rank])], name=f"{tag}.gag", process_set=ps)
        out.append(("grouped_allgather", gag[0], np.array(ranks, np.int32)))
        grs = hvd.grouped_reducescatter([tf.constant(np.stack([val(rank)] * n))], op=hvd.Sum,
                                        name=f"{tag}.grs", process_set=ps)
        out.append(("grouped_reducescatter", grs[0], sum(val(g) for g in ranks)[None, :]))
        return out

    def compare(results):
        for what, got, want in results:
            got = np.asarray(got)
            if got.dtype.kind == "f":
                np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=what)
            else:
                np.testing.assert_array_equal(got, want, err_msg=what)

    @add("eager_ops")
    def _():
        res = []
        for ps, ranks in sets:
            res += ops(ps, ranks, f"e{ps.process_set_id}")
        compare(res)

    @add("graph_ops")
    def _():
        res = []
        meta = {}
        for ps, ranks in sets:
            def body(ps=ps, ranks=ranks):
                triples = ops(ps, ranks, f"g{ps.process_set_id}")
                meta[ps.process_set_id] = [(w, want) for w, _, want in triples]
                return [t for _, t, _ in triples]

            outs = tf.function(body)()  # traced once: meta says what each output must be
            res += [(w, t, want) for (w, want), t in zip(meta[ps.process_set_id], outs)]
        compare(res)

    @add("same_names_at_once")
    def _():
        @tf.function
        def f():
            return [hvd.allreduce(tf.constant([float(rank + 1)]), op=hvd.Sum, name="x",
                                  process_set=ps) for ps, _ in sets]
        got = [t.numpy()[0] for t in f()]
        assert got == [float(rank + 1), 3.0, 3.0], got

    @add("gradient_tape")
    def _():
        res = []
        for ps, ranks in sets:
            v = tf.Variable([1.0, 2.0])
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(v * v) * float(rank + 1)
            g = hvd.DistributedGradientTape(tape, process_set=ps).gradient(loss, [v])[0]
            res.append((ranks, g))
        for ranks, g in res:
            want = np.array([2.0, 4.0]) * np.mean([r + 1 for r in ranks])
            np.testing.assert_allclose(g.numpy(), want, rtol=1e-6)

    @add("keras_optimizer")
    def _():
        weights = {}
        for key, ps in (("mine", mine), ("both", both)):
            keras.utils.set_random_seed(7)  # the same start everywhere
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
            opt = hk.DistributedOptimizer(keras.optimizers.SGD(0.1), process_set=ps)
            model.compile(optimizer=opt, loss="mse", jit_compile=False)
            rng = np.random.default_rng(rank)  # different data on every rank
            x = rng.normal(size=(8, 4)).astype("float32")
            model.fit(x, x.sum(1, keepdims=True), batch_size=8, epochs=2, verbose=0)
            w = np.concatenate([np.ravel(a) for a in model.get_weights()])
            weights[key] = hvd.allgather(tf.constant(w[None, :]), name=f"kw.{key}").numpy()
        mine_w, both_w = weights["mine"], weights["both"]
        np.testing.assert_array_equal(both_w[0], both_w[1])  # averaged within `both`
        assert not np.allclose(mine_w[0], mine_w[1]), "singleton sets trained alike"

    @add("broadcast_variables")
    def _():
        res = []
        for ps, ranks in sets:
            v = tf.Variable([float(rank), 1.0])
            hvd.broadcast_variables([v], root_rank=ranks[-1], process_set=ps)
            w = tf.Variable([float(rank), 2.0])

            @tf.function
            def in_graph(w=w, ps=ps, root=ranks[0]):
                hvd.broadcast_variables([w], root_rank=root, process_set=ps)

            in_graph()
            res.append((ranks, v.numpy(), w.numpy()))
        for ranks, v, w in res:
            np.testing.assert_array_equal(v, [float(ranks[-1]), 1.0])
            np.testing.assert_array_equal(w, [float(ranks[0]), 2.0])

    @add("topology_ops")
    def _():
        assert int(hvd.size_op()) == 2 and int(hvd.size_op(both.process_set_id)) == 2
        assert int(hvd.size_op(mine.process_set_id)) == 1
        assert int(hvd.process_set_included_op(mine.process_set_id)) == 1
        assert int(hvd.process_set_included_op(other.process_set_id)) == 0
        assert int(tf.function(lambda: hvd.process_set_included_op(both.process_set_id))()) == 1
        try:
            hvd.process_set_included_op(99)
        except ValueError as e:
            assert "no process set with id 99" in str(e), str(e)
        else:
            raise AssertionError("an unknown process set id did not raise")

    @add("errors")
    def _():
        msg = f"rank {rank} is not in process set {other.ranks}"
        for fn in (lambda: hvd.allreduce(tf.ones([2]), process_set=other),
                   lambda: tf.function(lambda: hvd.allgather(tf.ones([1]),
                                                             process_set=other))(),
                   lambda: hvd.DistributedGradientTape(tf.GradientTape(), process_set=other),
                   lambda: hk.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                                   process_set=other)):
            try:
                fn()
            except ValueError as e:
                assert msg in str(e), str(e)
            else:
                raise AssertionError("an op on a set without this rank did not raise")
        hvd.barrier()

    @add("removed_set_in_graph")
    def _():
        # `both` is removed after a graph on it was traced: running the graph
        # again fails on every rank, cleanly
        f = tf.function(lambda: hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="late",
                                              process_set=both))
        assert f().numpy().tolist() == [2.0, 2.0]
        assert hvd.remove_process_set(both) is True
        try:
            f()
        except tf.errors.FailedPreconditionError as e:
            assert "process set 3 is not registered on this rank" in str(e), str(e)
        else:
            raise AssertionError("a graph op on a removed set did not fail")
        try:
            hvd.allreduce(tf.ones([2]), process_set=both)
        except ValueError as e:
            assert "was removed" in str(e), str(e)
        else:
            raise AssertionError("an eager op on a removed set did not fail")

    assert [n for n, _ in checks] == CHECKS, "check list out of sync"
    return checks


def main():
    import tensorflow as tf
    import keras
    import hvd.keras as hk
    import hvd.tensorflow as hvd
    from common import run_checks

    even, odd = hvd.ProcessSet([0]), hvd.ProcessSet([1])
    hvd.init(process_sets=[even, odd])
    assert hvd.size() == SIZE
    both = hvd.add_process_set([0, 1])
    assert both.process_set_id == 3
    run_checks(make_checks(hvd, hk, tf, keras, hvd.rank(), even, odd, both), hvd.rank())
    hvd.barrier()  # a rank that shuts down stops the others' sets too
    hvd.shutdown()


if __name__ == "__main__":
    main()
