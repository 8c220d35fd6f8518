"""Horovod's PyTorch MNIST example (examples/python/horovod_pytorch_mnist.py:
the script as Horovod ships it, apart from the import line and synthetic
data) at 2 ranks under hvdrun, shortened: it finishes, every rank logs its
training, and the test loss (averaged over ranks by the script) falls."""

import os
import re
import subprocess
import sys

import pytest

import harness

pytest.importorskip("torch", reason="torch is not installed (requirements-test.txt)")

EXAMPLE = os.path.join(harness.REPO, "examples", "python", "horovod_pytorch_mnist.py")


def test_horovod_pytorch_mnist_two_ranks(tmp_path, hvdrun):
    cmd = [hvdrun, "-np", "2", sys.executable, EXAMPLE, "--synthetic", "--epochs", "3",
           "--synthetic-samples", "3000"]
    p = subprocess.run(cmd, cwd=str(tmp_path), env=harness.child_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=300)
    out = p.stdout.decode("utf-8", "replace")
    assert p.returncode == 0, out[-6000:]
    # 1500 samples per rank, batch 64: 24 batches, logged at 0, 10 and 20, by both ranks
    train = re.findall(r"Train Epoch: (\d) \[(\d+)/1500 \(\d+%\)\]\tLoss: (\d+\.\d+)", out)
    assert sorted((int(e), int(s)) for e, s, _ in train) == sorted(
        (e, s) for e in (1, 2, 3) for s in (0, 640, 1280) for _ in range(2)), out[-6000:]
    tests = [(float(a), float(b)) for a, b in
             re.findall(r"Test set: Average loss: (\d+\.\d+), Accuracy: (\d+\.\d+)%", out)]
    assert len(tests) == 3, out[-6000:]  # one per epoch, printed by rank 0 only
    losses = [t[0] for t in tests]
    assert losses[-1] < losses[0] * 0.5 and tests[-1][1] > 80.0, tests


def test_horovod_pytorch_mnist_synthetic_from_env(tmp_path, hvdrun):
    # HVD_EXAMPLE_SYNTHETIC=1 in place of the flag; one short epoch on one rank
    env = harness.child_env({"HVD_EXAMPLE_SYNTHETIC": "1"})
    p = subprocess.run([sys.executable, EXAMPLE, "--epochs", "1", "--synthetic-samples", "600"],
                       cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=300)
    out = p.stdout.decode("utf-8", "replace")
    assert p.returncode == 0, out[-6000:]
    assert re.search(r"Test set: Average loss: \d+\.\d+, Accuracy: \d+\.\d+%", out), out[-6000:]
    assert not os.path.exists(tmp_path / "data"), "nothing was downloaded"
