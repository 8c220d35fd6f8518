"""hvd.tensorflow.elastic and hvd.keras.elastic against a fake default
context (elastic_helpers.py): TensorFlowKerasState / KerasState /
TensorFlowState commit, restore and sync (TensorFlowState eagerly and through
a tf.compat.v1 Session), run() turning TensorFlow's errors for a changed
membership into a reset, and the Keras callbacks during model.fit. One real
job: TensorFlowState(session=...) synced on 2 ranks under hvdrun."""

import importlib
import os

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed")

import harness  # noqa: E402
import hvd  # noqa: E402
import hvd.elastic as E  # noqa: E402
import hvd.keras as hvdk  # noqa: E402
import hvd.tensorflow as hvdtf  # noqa: E402
import keras  # noqa: E402
from elastic_helpers import FakeBackend, changed, fake, names  # noqa: E402,F401


def test_modules_are_horovods():
    assert importlib.import_module("hvd.tensorflow.elastic") is hvdtf.elastic
    assert importlib.import_module("hvd.keras.elastic") is hvdk.elastic
    tfk_elastic = importlib.import_module("hvd.tensorflow.keras.elastic")
    for name in tfk_elastic.__all__:
        assert getattr(tfk_elastic, name) is getattr(hvdk.elastic, name), name
    for name in ("run", "TensorFlowKerasState", "TensorFlowState", "State", "ObjectState"):
        assert callable(getattr(hvdtf.elastic, name)), name
    for name in ("run", "KerasState", "CommitStateCallback", "UpdateBatchStateCallback",
                 "UpdateEpochStateCallback"):
        assert callable(getattr(hvdk.elastic, name)), name
    assert hvdk.elastic.ObjectState is E.ObjectState


def make_model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="mse")
    return model


def values(model):
    opt_vars = model.optimizer.variables
    return [v.numpy().copy() for v in list(model.variables) + list(opt_vars)]


def fit_once(model, seed):
    rng = np.random.default_rng(seed)
    model.fit(rng.normal(size=(8, 3)), rng.normal(size=(8, 2)), batch_size=4, epochs=1,
              verbose=0)


def assert_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@pytest.fixture
def world():
    hvdtf.init()
    yield
    while hvdtf.is_initialized():
        hvdtf.shutdown()


def test_keras_state_commit_and_restore(fake):
    model = make_model()
    state = hvdk.elastic.KerasState(model, epoch=0)
    assert model.optimizer.built  # built by the state: its variables are saved too
    fit_once(model, 1)
    state.epoch = 1
    state.commit()
    committed = values(model)
    fit_once(model, 2)
    state.epoch = 2
    assert not all(np.array_equal(x, y) for x, y in zip(committed, values(model)))
    state.restore()
    assert_equal(committed, values(model))
    assert state.epoch == 1


def test_tensorflow_keras_state_sync_takes_rank0s_variables(fake, monkeypatch):
    model = make_model()
    root = make_model()
    fit_once(root, 3)
    state = hvdtf.elastic.TensorFlowKerasState(model, epoch=0)
    calls = []

    def bcast(variables, root_rank=0, name=None, **kw):
        calls.append(name)
        ref = list(root.variables) if name == "elastic.model" else list(root.optimizer.variables)
        assert len(ref) == len(variables)
        for v, r in zip(variables, ref):
            v.assign(r)

    monkeypatch.setattr(hvdtf.elastic, "_broadcast_variables", bcast)  # where the state calls it
    fake.r = 1
    fake.root_objects["elastic.object_state"] = {"epoch": 3}
    state.sync()
    assert calls == ["elastic.model", "elastic.optimizer"]
    assert_equal(values(root), values(model))
    assert state.epoch == 3
    fit_once(model, 4)
    state.restore()  # the synced values are the saved ones
    assert_equal(values(root), values(model))


def test_tensorflow_state(fake, world):
    v = tf.Variable([1.0, 2.0])
    state = hvdtf.elastic.TensorFlowState([v], step=0)
    v.assign([5.0, 6.0])
    state.step = 1
    state.commit()
    v.assign([0.0, 0.0])
    state.restore()
    assert v.numpy().tolist() == [5.0, 6.0] and state.step == 1
    state.sync()  # a world of one through the fake: broadcast_variables is hvd's own
    with pytest.raises(TypeError, match="tf.compat.v1.Session"):
        hvdtf.elastic.TensorFlowState([v], session=object())
    with pytest.raises(ValueError, match="variables"):
        hvdtf.elastic.TensorFlowState()


def v1_graph():
    """A tf.compat.v1 graph with two initialized variables, a step changing
    both, and its Session."""
    g = tf.Graph()
    with g.as_default():
        a = tf.compat.v1.get_variable("a", initializer=np.array([0.25, -1.5, 3.0], np.float32))
        b = tf.compat.v1.get_variable("b", initializer=np.int64(7))
        step = tf.group(a.assign(a * 3.0 + 0.1), b.assign_add(5))
        sess = tf.compat.v1.Session(graph=g)
        sess.run(tf.compat.v1.global_variables_initializer())
    return g, sess, a, b, step


def test_tensorflow_state_with_a_session(fake, world):
    g, sess, a, b, step = v1_graph()
    with sess:
        state = hvdtf.elastic.TensorFlowState(session=sess, epoch=0)
        assert state.variables == [a, b]  # the graph's global variables
        n_ops = len(g.get_operations())
        sess.run(step)
        state.epoch = 1
        state.commit()
        committed = sess.run([a, b])
        for _ in range(3):  # restore assigns the committed values, bit for bit
            sess.run(step)
            sess.run(step)
            state.epoch = 2
            assert sess.run(b) != committed[1]
            state.restore()
            got = sess.run([a, b])
            np.testing.assert_array_equal(got[0], committed[0])
            assert got[0].dtype == np.float32 and got[1] == committed[1] == 12
            assert state.epoch == 1
        assert len(g.get_operations()) == n_ops  # the assign ops were built once
        # sync on a world of one: rank 0's (its own) values, kept as the new commit
        sess.run(step)
        synced = sess.run([a, b])
        state.sync()
        sess.run(step)
        state.restore()
        np.testing.assert_array_equal(sess.run(a), synced[0])
        assert sess.run(b) == synced[1] == 17
        assert len(g.get_operations()) == n_ops


def test_tensorflow_state_with_a_session_takes_listed_variables(fake, world):
    g, sess, a, b, step = v1_graph()
    with sess:
        state = hvdtf.elastic.TensorFlowState([a], session=sess)
        sess.run(step)
        state.restore()  # a only: b keeps its step
        np.testing.assert_array_equal(sess.run(a), np.array([0.25, -1.5, 3.0], np.float32))
        assert sess.run(b) == 12


def test_tensorflow_state_in_a_graph_needs_its_session(fake, world):
    g, sess, a, b, step = v1_graph()
    with sess, g.as_default():
        with pytest.raises(ValueError, match="session=sess"):
            hvdtf.elastic.TensorFlowState([a])
        g.finalize()
        with pytest.raises(RuntimeError, match="finalized"):
            hvdtf.elastic.TensorFlowState(session=sess)
    other = tf.Graph()
    with other.as_default():
        c = tf.compat.v1.get_variable("c", initializer=1.0)
    with pytest.raises(ValueError, match="not in the session's graph"):
        hvdtf.elastic.TensorFlowState([c], session=tf.compat.v1.Session(graph=tf.Graph()))


def test_tensorflow_state_with_a_session_on_two_ranks(hvdrun, tmp_path):
    """sync, restore and run() through a Session, 2 ranks (workers/tf_elastic_session.py)."""
    job = harness.run_job(2, os.path.join(harness.WORKERS, "tf_elastic_session.py"),
                          tmp_path=tmp_path, timeout=240)
    for check in ("sync", "restore_after_sync", "run_syncs_then_trains", "no_new_ops"):
        harness.assert_check(job, 2, check)
    assert job.ok(), job.describe()


def test_run_resets_on_tensorflow_errors_for_a_changed_membership(fake):
    fake.resets = [(0, 2)]
    state = E.ObjectState(step=0)
    rounds = []

    @hvdtf.elastic.run
    def train(state):
        rounds.append(state.step)
        state.step = 5
        if len(rounds) == 1:  # as hvd's graph kernel fails: TensorFlow's class, hvd's text
            raise tf.errors.AbortedError(None, None, "allreduce 'g': the elastic job lost a "
                                         "peer [HVD_ERR_MEMBERSHIP_CHANGED]")
        return "ok"

    assert train(state) == "ok" and rounds == [0, 0]
    assert len(names(fake.log, "reset")) == 1


def test_run_lets_other_tensorflow_errors_through(fake):
    state = E.ObjectState(step=0)

    @hvdk.elastic.run
    def train(state):
        raise tf.errors.AbortedError(None, None, "something else [HVD_ERR_ABORTED]")

    with pytest.raises(tf.errors.AbortedError, match="something else"):
        train(state)
    assert names(fake.log, "reset") == []


class CountingState(hvdk.elastic.KerasState):
    def __init__(self, *a, **kw):
        self.commits = []
        super().__init__(*a, **kw)

    def commit(self):
        self.commits.append((self.epoch, self.batch))
        super().commit()


def test_keras_callbacks_during_fit(fake, world):
    model = make_model()
    state = CountingState(model, batch=0, epoch=0)
    x, y = np.ones((12, 3)), np.zeros((12, 2))
    cbs = [hvdk.elastic.UpdateBatchStateCallback(state),
           hvdk.elastic.UpdateEpochStateCallback(state),
           hvdk.elastic.CommitStateCallback(state, batches_per_commit=2)]
    model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=cbs)
    # 3 batches an epoch, a commit every 2 batches (counted across epochs)
    # and at each epoch's end, after the other callbacks moved the state on
    assert state.commits == [(0, 1), (1, 0), (1, 0), (1, 2), (2, 0)]
    assert state.epoch == 2 and state.batch == 0
    # a second fit (after a reset) counts epochs on from the state's
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=cbs)
    assert state.epoch == 3
