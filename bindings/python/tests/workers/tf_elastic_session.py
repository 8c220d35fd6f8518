"""hvd.tensorflow.elastic.TensorFlowState(session=...) on 2 ranks under
hvdrun: a tf.compat.v1 graph whose variables start different on each rank.
sync() gives every rank rank 0's values (and rank 0's object attributes),
restore() goes back to the synced or committed values, neither adds ops to
the graph, and hvd.elastic.run() syncs before training steps that allreduce
in the session, so both ranks end with the same, exactly known weights."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

STEPS = 3
LR = 0.5


def main():
    import tensorflow as tf
    import hvd.tensorflow as hvd
    from common import Checks, run_checks

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    checks = Checks()
    add = checks.add

    g = tf.Graph()
    with g.as_default():
        w = tf.compat.v1.get_variable("w", initializer=np.full([3], 10.0 * rank + 1.0))
        c = tf.compat.v1.get_variable("c", initializer=np.int32(rank + 5))
        x = tf.constant(np.arange(3.0) + rank)
        step = w.assign_sub(LR * hvd.allreduce(x, name="grad"))  # the ranks' mean of x
        sess = tf.compat.v1.Session(graph=g)
        sess.run(tf.compat.v1.global_variables_initializer())
    state = hvd.elastic.TensorFlowState(session=sess, epoch=rank)
    n_ops = len(g.get_operations())
    mean_x = np.mean([np.arange(3.0) + r for r in range(size)], axis=0)

    def values():
        wv, cv = sess.run([w, c])
        return wv.tolist(), int(cv)

    @add("sync")
    def _():
        assert values() == ([10.0 * rank + 1.0] * 3, rank + 5), values()
        state.sync()
        assert values() == ([1.0] * 3, 5), values()
        assert state.epoch == 0, state.epoch

    @add("restore_after_sync")
    def _():
        sess.run(step)
        assert values()[0] == (1.0 - LR * mean_x).tolist(), values()
        state.restore()  # the synced values are the saved ones
        assert values() == ([1.0] * 3, 5), values()

    @add("run_syncs_then_trains")
    def _():
        if rank == 1:  # diverged: run() must sync it before training
            sess.run(w.initializer)  # back to rank 1's own start
            state.epoch = 7

        @hvd.elastic.run
        def train(state):
            for _ in range(STEPS):
                sess.run(step)
                state.epoch += 1
                state.commit()
            return values()

        got = train(state)
        want = np.ones(3)
        for _ in range(STEPS):
            want = want - LR * mean_x
        assert got == (want.tolist(), 5), (got, want)
        assert state.epoch == STEPS, state.epoch
        sess.run(step)
        state.restore()  # the last commit
        assert values() == (want.tolist(), 5), values()

    @add("no_new_ops")
    def _():
        assert len(g.get_operations()) == n_ops, (len(g.get_operations()), n_ops)

    run_checks(checks, rank)
    hvd.barrier()
    sess.close()
    hvd.shutdown()


if __name__ == "__main__":
    main()
