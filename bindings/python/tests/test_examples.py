"""The examples run alone and under hvdrun (shortened) and report accuracy."""

import json
import os
import subprocess
import sys

import pytest

import harness

EX = os.path.join(harness.REPO, "examples", "python")


def _run(cmd, tmp_path):
    p = subprocess.run(cmd, cwd=str(tmp_path), env=harness.child_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=300)
    return p.returncode, p.stdout.decode("utf-8", "replace")


@pytest.mark.parametrize("np_", [1, 2])
def test_train_numpy(tmp_path, hvdrun, np_):
    script = [sys.executable, os.path.join(EX, "train_numpy.py")]
    rc, out = _run(script if np_ == 1 else [hvdrun, "-np", str(np_), *script], tmp_path)
    assert rc == 0, out
    acc = float(out.split("test accuracy: ")[1].split()[0])
    assert acc > 0.9, out


@pytest.mark.parametrize("np_", [1, 2])
def test_train_numpy_timeline(tmp_path, hvdrun, np_):
    """--timeline-steps 4: hvd.start_timeline before step 1, hvd.stop_timeline
    before step 5. The file (rank 0's) is complete Chrome-trace JSON with
    exactly one ALLREDUCE span per recorded step on each gradient row."""
    script = [sys.executable, os.path.join(EX, "train_numpy.py"), "--epochs", "3",
              "--timeline-steps", "4", "--timeline", "tl.json"]
    rc, out = _run(script if np_ == 1 else [hvdrun, "-np", str(np_), *script], tmp_path)
    assert rc == 0, out
    assert "timeline: tl.json: " in out and "4 steps recorded" in out, out
    assert float(out.split("test accuracy: ")[1].split()[0]) > 0.85, out
    with open(tmp_path / "tl.json") as f:
        events = json.load(f)
    rows = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
            if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sorted(rows.values()) == ["grad.0", "grad.1"], rows
    spans = [rows[(e["pid"], e["tid"])] for e in events
             if e["ph"] == "X" and e["name"] == "ALLREDUCE"]
    assert sorted(spans) == ["grad.0"] * 4 + ["grad.1"] * 4, spans
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in events if e["ph"] == "X")


@pytest.mark.parametrize("np_", [1, 2])
def test_train_torch(tmp_path, hvdrun, np_):
    pytest.importorskip("torch", reason="torch is not installed")
    script = [sys.executable, os.path.join(EX, "train_torch.py"), "--epochs", "6"]
    rc, out = _run(script if np_ == 1 else [hvdrun, "-np", str(np_), *script], tmp_path)
    assert rc == 0, out
    assert float(out.split("test accuracy: ")[1].split()[0]) > 0.7, out
    assert os.path.exists(tmp_path / "checkpoints" / "checkpoint.pt")  # rank 0 only writes


def test_ensemble_process_sets(tmp_path, hvdrun):
    """Two groups of two ranks, each training its own model with gradients averaged only
    within the group (process sets), then the job's allgather of the groups' scores."""
    pytest.importorskip("torch", reason="torch is not installed")
    rc, out = _run([hvdrun, "-np", "4", sys.executable,
                    os.path.join(EX, "ensemble_process_sets.py"), "--epochs", "6"], tmp_path)
    assert rc == 0, out
    lines = [ln for ln in out.splitlines() if ln.startswith("group ")]
    assert len(lines) == 2 and "ranks [0, 1]" in lines[0] and "ranks [2, 3]" in lines[1], out
    for ln in lines:
        assert float(ln.rsplit(" ", 1)[1]) > 0.7, out
    assert float(out.split("ensemble of 2 models: validation accuracy ")[1].split()[0]) > 0.7, out


def test_ensemble_torch(tmp_path, hvdrun):
    pytest.importorskip("torch", reason="torch is not installed")
    rc, out = _run([hvdrun, "-np", "2", sys.executable, os.path.join(EX, "ensemble_torch.py")],
                   tmp_path)
    assert rc == 0 and "ensemble of 2" in out, out
