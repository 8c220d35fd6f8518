"""The canonical reduction order through the whole library (docs/reproducibility.md):
jobs of 3 to 6 ranks with random settings (fusion threshold, cycle time, autotune,
allreduce algorithm, shared memory on or off) over gloo, mpi and ucx, each running
workers/reproducible.py: random allreduce (SUM, AVERAGE, scaled), grouped allreduce
and reducescatter of float16/bfloat16/float32/float64, 1 element to 4 MiB, submitted
in a different order on every rank, compared bit for bit with the rank-ordered fold
computed in numpy. HVD_REPRO_SEED draws other configurations (the default is fixed,
so a run is repeatable); HVD_REPRO_JOBS runs more of them."""

import os
import random
import shutil

import pytest

import harness

WORKER = os.path.join(harness.WORKERS, "reproducible.py")
SEED = int(os.environ.get("HVD_REPRO_SEED", "42"))
# The transports the jobs cycle through: every one at least once per run.
TRANSPORTS = ("gloo", "gloo", "mpi", "gloo", "ucx", "gloo")


def _plugin(name):
    return os.path.isfile(os.path.join(harness.library_dir(), f"libhvd_transport_{name}.so"))


def draw(k):
    """Job k's configuration, from SEED alone."""
    g = random.Random(SEED * 1000 + k)
    transport = TRANSPORTS[k % len(TRANSPORTS)]
    env = {"HVD_FUSION_THRESHOLD": str(g.choice([0, 4 << 10, 64 << 10, 1 << 20, 3 << 20,
                                                 64 << 20])),
           "HVD_CYCLE_TIME": str(g.choice([0.5, 1, 2, 5])),
           "HVD_SHM": g.choice(["0", "0", "1"])}
    algorithm = g.choice(["auto", "auto", "ring", "direct"])
    if env["HVD_SHM"] == "1" and g.random() < 0.5:
        algorithm = "shm"
    env["HVD_ALGORITHM_ALLREDUCE"] = algorithm
    env["HVD_ALGORITHM_REDUCESCATTER"] = "shm" if algorithm == "shm" else "auto"
    if g.random() < 0.3:
        env["HVD_AUTOTUNE"] = "1"
        env["HVD_AUTOTUNE_WARMUP_SAMPLES"] = "1"
        env["HVD_AUTOTUNE_STEPS_PER_SAMPLE"] = "1"
    if transport == "ucx":
        env["HVD_TRANSPORT"] = "ucx"
    if transport == "mpi":
        env["HVD_MPI_SHM"] = env["HVD_SHM"]
    return {"ranks": g.randint(3, 6), "transport": transport, "env": env,
            "seed": g.randrange(1 << 30)}


def _jobs():
    n = int(os.environ.get("HVD_REPRO_JOBS", len(TRANSPORTS)))
    return [pytest.param(k, id=f"job{k}-{TRANSPORTS[k % len(TRANSPORTS)]}") for k in range(n)]


@pytest.mark.parametrize("k", _jobs())
def test_reductions_equal_rank_ordered_fold(k, tmp_path):
    cfg = draw(k)
    if cfg["transport"] in ("mpi", "ucx") and not _plugin(cfg["transport"]):
        pytest.skip(f"the {cfg['transport']} transport plugin is not built")
    if cfg["transport"] == "mpi":
        reason = harness.mpi_reason()
        if reason is not None or shutil.which("mpirun") is None:
            pytest.skip(reason or "no mpirun")
        job = harness.run_mpirun(cfg["ranks"], WORKER, args=(cfg["seed"],), tmp_path=tmp_path,
                                 env=cfg["env"], timeout=240)
    else:
        job = harness.run_job(cfg["ranks"], WORKER, args=(cfg["seed"],), launcher="hvdrun",
                              tmp_path=tmp_path, env=cfg["env"], timeout=240)
    what = f"configuration {cfg}"
    assert job.ok(), what + "\n" + job.describe()
    assert set(job.results) == set(range(cfg["ranks"])), what + "\n" + job.describe()
    failed = []
    for r in range(cfg["ranks"]):
        for name, err in job.results[r]["checks"].items():
            if err is not None:
                failed.append(f"rank {r} {name}: {err.strip().splitlines()[-1]}")
    assert not failed, what + "\n" + "\n".join(failed[:12])



@pytest.mark.parametrize("hosts,per_host", [(2, 2), (2, 3), (3, 2)])
def test_hierarchical_layouts_with_reproducible(hosts, per_host, tmp_path):
    """HVD_REPRODUCIBLE=1 on hosts x ranks simulated on this machine (HVD_HOST_ID per
    rank): the hierarchical collectives are on, and every bit is the fold's."""
    env = {"HVD_REPRODUCIBLE": "1", "HVD_TEST_LAYOUT": f"{hosts},{per_host}",
           "HVD_LOG_LEVEL": "info", "HVD_FUSION_THRESHOLD": str(1 << 20)}
    n = hosts * per_host
    job = harness.run_job(n, WORKER, args=(SEED + 100 * hosts + per_host,), launcher="hvdrun",
                          tmp_path=tmp_path, env=env, timeout=240)
    assert job.ok(), job.describe()
    assert "hierarchical collectives: " in job.output, job.describe()
    failed = [f"rank {r} {k}: {e.strip().splitlines()[-1]}" for r in range(n)
              for k, e in job.results[r]["checks"].items() if e is not None]
    assert not failed, f"{hosts} x {per_host}\n" + "\n".join(failed[:12])


EXAMPLE = os.path.normpath(os.path.join(harness.WORKERS, "..", "..", "..", "..", "examples",
                                        "python", "train_torch.py"))
# The example at 3 ranks, trained three times: one host's shared memory with every
# gradient fused (64 MiB threshold), TCP with 8 KiB batches, TCP with autotune
# changing the threshold and cycle time as it goes. 3 ranks make the fused batch
# (55 KB of gradients) take the ring and the small tensors the direct allreduce.
TRAININGS = {
    "shm-fused": {"HVD_FUSION_THRESHOLD": str(64 << 20)},
    "tcp-8k": {"HVD_SHM": "0", "HVD_FUSION_THRESHOLD": str(8 << 10)},
    "tcp-autotune": {"HVD_SHM": "0", "HVD_AUTOTUNE": "1", "HVD_AUTOTUNE_WARMUP_SAMPLES": "1",
                     "HVD_AUTOTUNE_STEPS_PER_SAMPLE": "2"},
}


def test_torch_example_trains_bit_identical_weights(tmp_path, hvdrun):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    import subprocess
    import sys
    weights = {}
    for name, extra in TRAININGS.items():
        ckpt = tmp_path / name
        # Importing torch on a loaded machine can outlast hvdrun's default start timeout.
        p = subprocess.run([hvdrun, "-np", "3", "--start-timeout", "240", sys.executable,
                            EXAMPLE, "--epochs", "1",
                            "--no-cuda", "--checkpoint-dir", str(ckpt)],
                           env=harness.child_env(extra), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=300)
        out = p.stdout.decode("utf-8", "replace")
        assert p.returncode == 0, f"{name}:\n{out[-4000:]}"
        weights[name] = torch.load(ckpt / "checkpoint.pt", map_location="cpu")["model"]
    first, ref = next(iter(weights.items()))
    for name, w in weights.items():
        differ = [k for k in ref if not torch.equal(ref[k].view(-1).view(torch.int32),
                                                   w[k].view(-1).view(torch.int32))]
        assert not differ, f"{name} trained other bits than {first} in {differ}"
