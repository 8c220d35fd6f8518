"""hvd.tensorflow.elastic and hvd.keras.elastic against a fake default
context (elastic_fake.py): TensorFlowKerasState / KerasState / TensorFlowState
commit, restore and sync, run() turning TensorFlow's errors for a changed
membership into a reset, and the Keras callbacks during model.fit."""

import importlib

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed")

import hvd  # noqa: E402
import hvd.elastic as E  # noqa: E402
import hvd.keras as hvdk  # noqa: E402
import hvd.tensorflow as hvdtf  # noqa: E402
import keras  # noqa: E402
from elastic_helpers import FakeBackend, changed, fake, names  # noqa: E402,F401


def test_modules_are_horovods():
    assert importlib.import_module("hvd.tensorflow.elastic") is hvdtf.elastic
    assert importlib.import_module("hvd.keras.elastic") is hvdk.elastic
    assert importlib.import_module("hvd.tensorflow.keras.elastic") is hvdk.elastic
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

    monkeypatch.setattr(hvdtf, "broadcast_variables", bcast)
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
    with pytest.raises(NotImplementedError, match="session"):
        hvdtf.elastic.TensorFlowState([v], session=object())
    with pytest.raises(ValueError, match="variables"):
        hvdtf.elastic.TensorFlowState()


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
