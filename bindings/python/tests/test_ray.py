"""hvd.ray on a local Ray cluster (started and stopped here, 2 CPUs' worth):
Horovod's RayExecutor at 2 ranks (the main example to the usual accuracy, the
same weights on both ranks), execute/execute_single, a raising worker, a
killed actor with and without elastic bounds, and the Ray Train backend."""

import importlib.util
import os
import sys
import tempfile
import time

import pytest

if importlib.util.find_spec("ray") is None:
    pytest.skip("Ray is not installed (pip install 'hvd[ray]')", allow_module_level=True)

import ray_cluster  # noqa: E402

EXAMPLE = os.path.join(ray_cluster.REPO, "examples", "ray", "train_torch_ray.py")


def _example():
    spec = importlib.util.spec_from_file_location("train_torch_ray", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules["train_torch_ray"] = mod
    import ray

    ray.cloudpickle.register_pickle_by_value(mod)  # the workers need not import it
    return mod


@pytest.fixture(scope="module")
def cluster():
    import hvd

    env = {"HVD_LIBRARY_PATH": os.path.dirname(hvd.library_path()),
           "PYTHONPATH": os.pathsep.join(p for p in (ray_cluster.PYTHON_DIR,
                                                     os.environ.get("PYTHONPATH")) if p)}
    c = ray_cluster.Cluster(num_cpus=2, env=env)
    try:
        ray = c.connect(runtime_env={"env_vars": env})
        # This file's functions travel by value: the workers need not import it.
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        yield c
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        left = c.stop()
        assert not left, f"processes of the Ray cluster still there after it stopped: {left}"


def _executor(**kwargs):
    from hvd.ray import RayExecutor

    ex = RayExecutor(RayExecutor.create_settings(timeout_s=60), **kwargs)
    ex.start()
    return ex


def _allreduce_sum():
    import numpy as np

    import hvd

    hvd.init()
    out = hvd.allreduce(np.array([hvd.rank() + 1.0]), op=hvd.Sum, name="sum")
    info = (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(),
            hvd.cross_size(), float(out[0]))
    hvd.shutdown()
    return info


def test_executor_trains_the_main_example(cluster):
    """2 ranks, one node: local ranks 0 and 1, the example's usual accuracy,
    identical weights; then a worker that raises (its exception type reaches
    run(), with its rank, node and traceback) and the job usable again."""
    executor = _executor(num_workers=2, cpus_per_worker=1)
    try:
        _train_and_raise(executor)
    finally:
        executor.shutdown()


def _train_and_raise(executor):
    ex = _example()
    results = executor.run(ex.train, kwargs={"epochs": 6})
    assert [r[:2] for r in results] == [(0, 2), (1, 2)]
    assert results[0][2] > 0.7, results
    assert results[0][2] == results[1][2]
    assert results[0][3] == results[1][3], "the ranks' weights differ"
    assert executor.run(_allreduce_sum) == [(0, 2, 0, 2, 0, 1, 3.0), (1, 2, 1, 2, 0, 1, 3.0)]
    assert [w["rank"] for w in executor.workers()] == [0, 1]

    t0 = time.monotonic()
    with pytest.raises(KeyError, match="no such feature at rank 1") as info:
        executor.run(_raise_on_rank_1)
    assert time.monotonic() - t0 < 30  # not a timeout: the other rank fails at once
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "rank 1 (Ray actor pid" in notes and "on node" in notes, notes
    assert "_raise_on_rank_1" in notes and "KeyError" in notes, notes
    assert [r[-1] for r in executor.run(_allreduce_sum)] == [3.0, 3.0]


class _Holder:
    def __init__(self, value):
        self.value = value
        self.pid = os.getpid()


def test_execute_and_execute_single(cluster):
    from hvd.ray import RayExecutor

    ex = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=2)
    ex.start(executable_cls=_Holder, executable_args=(7,),
             extra_env_vars={"HVD_RAY_TEST": "yes"})
    try:
        got = ex.execute(lambda h: (h.value, h.pid, os.environ["HVD_RAY_TEST"],
                                    os.environ["HVD_RANK"]))
        assert [g[0] for g in got] == [7, 7] and got[0][1] != got[1][1]
        assert [g[2:] for g in got] == [("yes", "0"), ("yes", "1")]
        assert ex.execute_single(lambda h: (os.environ["HVD_RANK"], h.pid)) == ("0", got[0][1])
        refs = ex.run_remote(lambda a, b: a + b + int(os.environ["HVD_RANK"]), args=(1,),
                             kwargs={"b": 2})
        import ray

        assert ray.get(refs) == [3, 4]
    finally:
        ex.shutdown()


def _raise_on_rank_1():
    import numpy as np

    import hvd

    hvd.init()
    if hvd.rank() == 1:
        raise KeyError("no such feature at rank 1")
    hvd.allreduce(np.ones(4), name="after_the_error")


def _kill_rank_1(steps):
    import numpy as np

    import hvd

    hvd.init()
    for step in range(steps):
        if step == 3 and hvd.rank() == 1:
            os.kill(os.getpid(), 9)
        hvd.allreduce(np.ones(2), name=f"step{step}")
    return hvd.rank()


def test_killed_actor_without_elastic(cluster):
    from hvd.ray import WorkerLostError

    ex = _executor(num_workers=2)
    try:
        with pytest.raises(WorkerLostError) as info:
            ex.run(_kill_rank_1, args=(10,))
        assert info.value.rank == 1 and info.value.node_ip
        assert f"rank 1 (Ray actor pid {ex.workers()[1]['pid']})" in str(info.value)
        assert f"on node {info.value.node_ip}" in str(info.value)
        with pytest.raises(WorkerLostError, match="rank 1 .* is gone"):  # every later run
            ex.run(_allreduce_sum)
    finally:
        ex.shutdown()


def _elastic_train():
    import numpy as np

    import hvd

    hvd.init()
    state = hvd.elastic.ObjectState(step=0, total=0.0, sizes=[])

    @hvd.elastic.run
    def loop(state):
        while state.step < 20:
            if state.step == 10 and hvd.rank() == 1 and hvd.size() == 2:
                os.kill(os.getpid(), 9)
            s = hvd.allreduce(np.array([1.0]), op=hvd.Sum, name="count")
            state.total += float(s[0])
            state.sizes.append(hvd.size())
            state.step += 1
            state.commit()
        return state.total, state.sizes, hvd.rank(), hvd.size()

    return loop(state)


def test_killed_actor_with_elastic_bounds(cluster):
    """min_workers=1: the survivor goes back to its last commit (hvd.elastic's
    ObjectState) and finishes alone."""
    ex = _executor(min_workers=1, max_workers=2)
    try:
        [(total, sizes, rank, size)] = ex.run(_elastic_train)
        assert (rank, size) == (0, 1)
        assert sizes == [2] * 10 + [1] * 10 and total == 30.0
        assert [w["lost"] is not None for w in ex.workers()] == [False, True]
    finally:
        ex.shutdown()


def test_elastic_below_min_workers_names_the_lost_worker(cluster):
    from hvd.ray import WorkerLostError

    ex = _executor(min_workers=2, max_workers=2, elastic_timeout=2)
    try:
        with pytest.raises(Exception) as info:
            ex.run(_elastic_train)
        with pytest.raises(WorkerLostError, match="rank 1 .* on node"):
            ex.run(_allreduce_sum)
        assert "min_workers" in str(info.value) or "rank 1" in str(info.value), info.value
    finally:
        ex.shutdown()


def test_ray_train_backend(cluster):
    """DataParallelTrainer with HvdConfig: the example trains, every epoch is
    reported, rank 0's checkpoint is kept."""
    ex = _example()
    result = ex.run_ray_train(2, 3, tempfile.mkdtemp(prefix="hvd-ray-train-"))
    assert result.error is None
    assert result.metrics["epoch"] == 3
    with result.checkpoint.as_directory() as d:
        assert os.path.exists(os.path.join(d, "model.pt"))
