"""Horovod's Keras MNIST example (examples/python/horovod_keras_mnist.py: the
script as Horovod ships it, apart from the import line, synthetic data and
what Keras 3 refuses) at 2 ranks under hvdrun, shortened, with a sanity
check: it learns, every rank ends with the same weights, the warmup and the
rank-0 checkpoints happen."""

import os
import re
import subprocess
import sys

import pytest

import harness

pytest.importorskip("tensorflow", reason="tensorflow-cpu is not installed (requirements-test.txt)")

from hvd import _tf_kernels  # noqa: E402

EXAMPLE = os.path.join(harness.REPO, "examples", "python", "horovod_keras_mnist.py")


def test_horovod_keras_mnist_two_ranks(tmp_path, hvdrun):
    assert _tf_kernels.load() is not None, _tf_kernels.error()  # built before the ranks start
    cmd = [hvdrun, "-np", "2", sys.executable, EXAMPLE, "--epochs", "3", "--steps", "40",
           "--batch-size", "64", "--samples", "4096"]
    p = subprocess.run(cmd, cwd=str(tmp_path), env=harness.child_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=420)
    out = p.stdout.decode("utf-8", "replace")
    assert p.returncode == 0, out[-6000:]
    m = re.search(r"final: loss (\d+\.\d+) accuracy (\d+\.\d+)", out)
    assert m, out[-6000:]
    loss, acc = float(m.group(1)), float(m.group(2))
    assert acc > 0.9 and loss < 0.5, (loss, acc)
    sums = dict(re.findall(r"rank (\d) weights checksum (\S+)", out))
    assert set(sums) == {"0", "1"} and sums["0"] == sums["1"], sums
    # LearningRateWarmupCallback(initial_lr=0.001 * size, warmup_epochs=3, verbose=1)
    assert "Epoch 3: finished gradual learning rate warmup to 0.002." in out, out[-6000:]
    # ModelCheckpoint on rank 0 only, one file per epoch.
    assert sorted(f for f in os.listdir(tmp_path) if f.startswith("checkpoint-")) == \
        [f"checkpoint-{e}.keras" for e in (1, 2, 3)]
