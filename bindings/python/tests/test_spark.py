"""hvd.spark.run on real executor JVMs (local-cluster[2,1,1024]).

Starting a Spark cluster costs tens of seconds, so these tests run from
spark/run_tests.sh, which sets HVD_TEST_SPARK=1 (and installs pyspark); in the
Python SDK's own suite they are skipped with that reason. One cluster serves the
whole module.

The cluster is started the way a user's would be: no PYTHONPATH and no
HVD_LIBRARY_PATH reach Spark or its executors (the fixture removes them from the
environment Spark's JVM inherits), so the executors import hvd only through what
hvd.spark.run ships. The functions below travel by value (cloudpickle), as a
script's own functions do.
"""

import os
import sys
import time

import pytest

if os.environ.get("HVD_TEST_SPARK") != "1":
    pytest.skip("Spark tests run from spark/run_tests.sh (HVD_TEST_SPARK=1)", allow_module_level=True)
pyspark = pytest.importorskip("pyspark")

import hvd  # noqa: E402
import hvd.spark  # noqa: E402
from hvd.spark import _expected_slots, _host, _time_s, _topology  # noqa: E402
from pyspark import cloudpickle  # noqa: E402

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(hvd.spark.__file__)))
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_topology_groups_tasks_by_host():
    addrs = ["h1:1", "h2:2", "h1:3", "[fe80::1]:4", "h2:5"]
    assert _host("[fe80::1]:4") == "fe80::1"
    assert _topology(2, addrs) == (1, 2, 0, 2)
    assert _topology(3, addrs) == (0, 1, 2, 3)


def test_expected_slots_from_the_settings():
    conf = {"spark.task.cpus": "1"}
    get = lambda k, d=None: conf.get(k, d)  # noqa: E731
    assert _expected_slots("local", get) == 1
    assert _expected_slots("local[3]", get) == 3
    assert _expected_slots("local[2, 4]", get) == 2
    assert _expected_slots("local[*]", get) == (os.cpu_count() or 1)
    assert _expected_slots("local-cluster[2,3,1024]", get) == 6
    assert _expected_slots("spark://h:7077", get) is None
    conf.update({"spark.executor.instances": "4", "spark.executor.cores": "3", "spark.task.cpus": "2"})
    assert _expected_slots("spark://h:7077", get) == 4
    assert _expected_slots("local-cluster[2,3,1024]", get) == 2
    conf["spark.dynamicAllocation.enabled"] = "true"
    assert _expected_slots("yarn", get) is None
    assert _time_s("120s") == 120 and _time_s("2min") == 120 and _time_s("500ms") == 0.5
    assert _time_s("7") == 7


@pytest.fixture(scope="module")
def sc():
    from pyspark.sql import SparkSession

    # Nothing tells Spark where hvd is: hvd.spark.run must ship it.
    saved = {k: os.environ.pop(k) for k in ("PYTHONPATH", "HVD_LIBRARY_PATH") if k in os.environ}
    builder = (SparkSession.builder.master("local-cluster[2,1,1024]")
               .appName("hvd-pyspark-tests")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.task.maxFailures", "1")
               .config("spark.pyspark.python", sys.executable)
               .config("spark.pyspark.driver.python", sys.executable))
    try:
        spark = builder.getOrCreate()
    finally:
        os.environ.update(saved)
    # No waiting for the executors here: hvd.spark.run waits for its slots.
    yield spark.sparkContext
    spark.stop()


def _report(offset):
    import os

    import numpy as np

    import hvd

    total = hvd.allreduce(np.array([hvd.rank() + offset], dtype=np.float64), op=hvd.Sum,
                          name="sum")
    pids = hvd.allgather(np.array([os.getpid()], dtype=np.int64), name="pids")
    return {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
            "local_size": hvd.local_size(), "pid": os.getpid(), "sum": float(total[0]),
            "pids": pids.tolist(), "hvd_file": hvd.__file__, "library": hvd.library_path(),
            "pythonpath": os.environ.get("PYTHONPATH", "")}


def test_run_returns_per_rank_results_in_rank_order(sc):
    # The first job of the application: run() waits for the executors itself.
    t0 = time.time()
    res = hvd.spark.run(_report, args=(10.0,), num_proc=2, spark_context=sc, start_timeout_s=60)
    print(f"first hvd.spark.run job (executors registering): {time.time() - t0:.1f} s")
    assert [r["rank"] for r in res] == [0, 1]
    assert all(r["size"] == 2 and r["local_size"] == 2 for r in res)
    assert [r["local_rank"] for r in res] == [0, 1]
    assert all(r["sum"] == 21.0 for r in res)  # (0 + 10) + (1 + 10)
    assert res[0]["pid"] != res[1]["pid"], "two Python workers"
    assert res[0]["pids"] == res[1]["pids"] == [res[0]["pid"], res[1]["pid"]]
    # hvd came from the shipped zip, the library from the driver's path.
    for r in res:
        assert os.sep.join(["hvd.zip", "hvd", "__init__.py"]) in r["hvd_file"], r["hvd_file"]
        assert r["library"] == hvd.library_path()
        assert PKG_DIR not in r["pythonpath"], r["pythonpath"]


def test_more_ranks_than_slots_fails_at_once(sc):
    t0 = time.time()
    with pytest.raises(hvd.spark.InsufficientSlotsError) as info:
        hvd.spark.run(lambda: None, num_proc=3, spark_context=sc)
    elapsed = time.time() - t0
    assert (info.value.requested, info.value.available) == (3, 2)
    msg = str(info.value)
    assert "num_proc=3 needs 3 barrier task slots" in msg and "the cluster has 2" in msg, msg
    assert elapsed < 5, f"took {elapsed:.1f} s"


def _explode(bad_rank):
    import numpy as np

    import hvd

    hvd.allreduce(np.ones(1), op=hvd.Sum, name="warmup")
    if hvd.rank() == bad_rank:
        raise ValueError(f"python rank {bad_rank} failed on purpose")
    i = 0
    while True:  # the other rank waits in collectives the failed rank never joins
        hvd.allreduce(np.ones(1), op=hvd.Sum, name=f"step{i}")
        i += 1


def test_a_raising_function_fails_the_job_with_its_exception(sc):
    t0 = time.time()
    with pytest.raises(ValueError) as info:
        hvd.spark.run(_explode, kwargs={"bad_rank": 1}, num_proc=2, spark_context=sc)
    elapsed = time.time() - t0
    assert type(info.value) is ValueError
    assert str(info.value) == "python rank 1 failed on purpose"
    assert "Py4JJavaError" in type(info.value.__cause__).__name__
    assert any("rank 1 of 2" in n and "_explode" in n for n in getattr(info.value, "__notes__", []))
    assert elapsed < 90, f"the job took {elapsed:.0f} s to fail"
    # Both task slots are free again.
    assert hvd.spark.run(lambda: "ok", num_proc=2, spark_context=sc) == ["ok", "ok"]


def _mismatch():
    import numpy as np

    import hvd

    # Rank 0 sends 2 elements, rank 1 sends 3: the library reports a mismatch.
    hvd.allreduce(np.ones(2 + hvd.rank()), op=hvd.Sum, name="uneven")


def test_hvd_errors_arrive_as_their_own_type(sc):
    with pytest.raises(hvd.MismatchError) as info:
        hvd.spark.run(_mismatch, num_proc=2, spark_context=sc)
    e = info.value
    assert type(e) is hvd.MismatchError
    assert e.status == -5  # HVD_ERR_MISMATCH
    assert "uneven" in e.message, e.message
    assert str(e).endswith("[HVD_ERR_MISMATCH]")


class _Unpicklable(Exception):
    def __init__(self, a, b):  # pickling rebuilds with args=(message,): TypeError
        super().__init__(f"{a}/{b}")


def _raise_unpicklable():
    raise _Unpicklable("x", "y")


def test_an_exception_that_cannot_travel_is_named(sc):
    with pytest.raises(hvd.spark.TaskFailedError, match=r"_Unpicklable: x/y"):
        hvd.spark.run(_raise_unpicklable, num_proc=2, spark_context=sc)


def test_the_docs_snippet_runs(sc):
    """docs/spark.md's hvd.spark.run example, as printed there (its getOrCreate
    returns this module's session)."""
    import re

    import numpy as np

    docs = os.path.join(os.path.dirname(PKG_DIR), os.pardir, "docs", "spark.md")
    with open(docs, encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## PySpark: `hvd.spark.run`"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    ns = {"__name__": "docs_spark_md"}  # not importable: train() travels by value
    exec(compile(code, docs, "exec"), ns)
    assert len(ns["results"]) == 2
    for r in ns["results"]:
        np.testing.assert_allclose(r, np.full(4, 0.3), rtol=1e-12)


def _train_resumable(ckpt_path, marker, steps, die_at):
    """Linear-model steps from a Checkpoint; commits every second step. With
    ``marker`` given, rank 1 dies (its Python worker exits) on reaching step
    ``die_at`` the first time (the marker file says it already did)."""
    import os

    import numpy as np

    import hvd
    import hvd.spark

    ckpt = hvd.spark.Checkpoint(ckpt_path)
    state = ckpt.load(default={"step": 0, "w": np.zeros(3), "starts": []})
    state["starts"] = state["starts"] + [state["step"]]
    while state["step"] < steps:
        if marker and hvd.rank() == 1 and state["step"] == die_at and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(3)  # mid-training, with uncommitted progress
        x = np.array([hvd.rank() + 1.0, state["step"] * 0.5, 1.0 / (state["step"] + 1)])
        g = hvd.allreduce(x * state["w"] + x, op=hvd.Sum, name="grad")
        state["w"] = state["w"] - 0.05 * g
        state["step"] += 1
        if state["step"] % 2 == 0:
            ckpt.commit(state)
    return {"w": state["w"].tolist(), "step": state["step"], "starts": state["starts"],
            "attempt_pid": os.getpid()}


def test_a_failed_rank_resumes_from_the_last_checkpoint(sc, tmp_path):
    """resumable=True: rank 1 dies at step 7 of 10 in the first attempt (the last
    commit at step 6); Spark runs the barrier stage again, the new ranks load the
    checkpoint and finish with the weights of an uninterrupted run, bit for bit."""
    t0 = time.time()
    whole = hvd.spark.run(_train_resumable, args=(str(tmp_path / "whole.pkl"), None, 10, 7),
                          num_proc=2, spark_context=sc, resumable=True)
    t1 = time.time()
    marker = tmp_path / "died"
    path = tmp_path / "resumed.pkl"
    resumed = hvd.spark.run(_train_resumable, args=(str(path), str(marker), 10, 7),
                            num_proc=2, spark_context=sc, resumable=True)
    t2 = time.time()
    print(f"uninterrupted: {t1 - t0:.1f} s, with a failure and a retried stage: {t2 - t1:.1f} s")
    assert marker.exists(), "rank 1 never died: the test tested nothing"
    for r in whole:
        assert r["step"] == 10 and r["starts"] == [0], r
    for r in resumed:
        assert r["step"] == 10 and r["starts"] == [0, 6], r  # the second attempt began at step 6
    assert resumed[0]["w"] == whole[0]["w"] == whole[1]["w"] == resumed[1]["w"]
    # The driver reads the last commit: the final state.
    final = hvd.spark.Checkpoint(path).read()
    assert final["step"] == 10 and final["w"].tolist() == whole[0]["w"]
    assert hvd.spark.Checkpoint(tmp_path / "none.pkl").read(default="nothing") == "nothing"
    assert t2 - t1 < 90, f"the resumed run took {t2 - t1:.0f} s"


def test_without_resumable_a_failure_ends_the_job(sc, tmp_path):
    """The default: Spark does not run a failed barrier result stage again."""
    marker = tmp_path / "died"
    with pytest.raises(Exception) as info:
        hvd.spark.run(_train_resumable, args=(str(tmp_path / "c.pkl"), str(marker), 10, 3),
                      num_proc=2, spark_context=sc)
    assert marker.exists()
    assert "barrier" in hvd.spark._error_text(info.value.__cause__ or info.value)
    assert hvd.spark.Checkpoint(tmp_path / "c.pkl").read()["step"] == 2


def test_arguments_are_checked(sc):
    with pytest.raises(TypeError):
        hvd.spark.run(lambda: None, num_proc=2, spark_context=sc, rank=3)
    with pytest.raises(ValueError):
        hvd.spark.run(lambda: None, num_proc=0, spark_context=sc)
