"""An elastic Keras job with real processes (hvdrun --min-np/--max-np
--host-discovery-script): 3 workers train with hvd.keras.elastic (KerasState,
the commit/batch/epoch callbacks, DistributedOptimizer: its allreduce runs in
hvd's TensorFlow kernels inside Keras' compiled step); the worker of rank 1 is
killed (SIGKILL) in the first epoch. The survivors' kernels fail with
TensorFlow's error for HVD_ERR_MEMBERSHIP_CHANGED, hvd.keras.elastic.run
restores the last commit, resets, syncs, and fit goes on with 2 workers: both
end with the same weights, every epoch done once."""

import glob
import json
import os
import subprocess
import sys

import pytest

import harness

pytest.importorskip("tensorflow", reason="TensorFlow is not installed")

from elastic_helpers import DISCOVER, JOB_TIMEOUT, elastic_missing  # noqa: E402

_REASON = elastic_missing()

pytestmark = pytest.mark.skipif(_REASON is not None, reason=str(_REASON))

KERAS_JOB = """
import json, os, signal
import numpy as np
import keras
import hvd.keras as hvd

hvd.init()
out = os.environ["HVD_TEST_OUT"]
open(os.path.join(out, "pid-%d" % os.getpid()), "w").close()
keras.utils.set_random_seed(100 + hvd.rank())  # rank 0's weights win at the first sync
rng = np.random.default_rng(0)
x = rng.normal(size=(96, 4)).astype("float32")
y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")).astype("float32")
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.5)),
              loss="mse")
state = hvd.elastic.KerasState(model, batch=0, epoch=0)
sizes = []
state.register_reset_callbacks([lambda: sizes.append(hvd.size())])
EPOCHS = 4


class Die(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if state.epoch == 1 and batch == 2 and hvd.rank() == 1 \\
                and hvd.elastic.membership().epoch == 0:
            os.kill(os.getpid(), signal.SIGKILL)


@hvd.elastic.run
def train(state):
    n = hvd.size()
    r = hvd.rank()
    model.fit(x[r::n], y[r::n], batch_size=4, epochs=EPOCHS - state.epoch, verbose=0,
              callbacks=[Die(), hvd.elastic.CommitStateCallback(state, batches_per_commit=2),
                         hvd.elastic.UpdateBatchStateCallback(state),
                         hvd.elastic.UpdateEpochStateCallback(state)])


train(state)
res = {"rank": hvd.rank(), "size": hvd.size(), "sizes": sizes, "epoch": state.epoch,
       "weights": [w.tolist() for w in model.get_weights()]}
with open(os.path.join(out, "result-%d.json" % os.getpid()), "w") as f:
    json.dump(res, f)
hvd.shutdown()
"""


def test_keras_worker_killed_survivors_finish(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("127.0.0.1:1\n127.0.0.2:1\n127.0.0.3:1\n")
    script = harness.write_script(tmp_path, KERAS_JOB, name="keras_job.py")
    env = harness.child_env({"HVD_HOSTS_FILE": str(hosts), "HVD_TEST_OUT": str(out)})
    cmd = [harness.find_hvdrun(), "-np", "3", "--min-np", "2", "--max-np", "3",
           "--host-discovery-script", DISCOVER, "--elastic-timeout", "60", "--",
           sys.executable, script]
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=JOB_TIMEOUT)
    text = p.stdout.decode("utf-8", "replace")
    results = []
    for path in glob.glob(os.path.join(str(out), "result-*.json")):
        with open(path) as f:
            results.append(json.load(f))
    assert p.returncode == 0, text[-8000:]
    assert len(results) == 2, text[-8000:]
    assert sorted(r["rank"] for r in results) == [0, 1]
    for r in results:
        assert r["size"] == 2 and r["sizes"] == [2] and r["epoch"] == 4, r
    assert results[0]["weights"] == results[1]["weights"]
    w = results[0]["weights"][0]
    # trained: the weights approach the generating ones (1, -2, 0.5, 3)
    for got, want in zip([row[0] for row in w], [1.0, -2.0, 0.5, 3.0]):
        assert abs(got - want) < 0.05, w
