"""hvd.spark.run on real executor JVMs (local-cluster[2,1,1024]).

Starting a Spark cluster costs tens of seconds, so these tests run from
spark/run_tests.sh, which sets HVD_TEST_SPARK=1 (and installs pyspark); in the
Python SDK's own suite they are skipped with that reason.
"""

import os
import sys
import time

import pytest

if os.environ.get("HVD_TEST_SPARK") != "1":
    pytest.skip("Spark tests run from spark/run_tests.sh (HVD_TEST_SPARK=1)", allow_module_level=True)
pyspark = pytest.importorskip("pyspark")

import hvd.spark  # noqa: E402
from hvd.spark import _host, _topology  # noqa: E402

PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(hvd.spark.__file__)))


def test_topology_groups_tasks_by_host():
    addrs = ["h1:1", "h2:2", "h1:3", "[fe80::1]:4", "h2:5"]
    assert _host("[fe80::1]:4") == "fe80::1"
    assert _topology(2, addrs) == (1, 2, 0, 2)
    assert _topology(3, addrs) == (0, 1, 2, 3)


@pytest.fixture(scope="module")
def sc():
    from pyspark.sql import SparkSession

    # The executors' Python workers import hvd, and this module (the functions
    # below are pickled by reference).
    path = [PKG_DIR, os.path.dirname(os.path.abspath(__file__)), os.environ.get("PYTHONPATH", "")]
    env = {"PYTHONPATH": os.pathsep.join(p for p in path if p)}
    if os.environ.get("HVD_LIBRARY_PATH"):
        env["HVD_LIBRARY_PATH"] = os.environ["HVD_LIBRARY_PATH"]
    builder = (SparkSession.builder.master("local-cluster[2,1,1024]")
               .appName("hvd-pyspark-tests")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.task.maxFailures", "1")
               .config("spark.pyspark.python", sys.executable)
               .config("spark.pyspark.driver.python", sys.executable))
    for k, v in env.items():
        builder = builder.config(f"spark.executorEnv.{k}", v)
    spark = builder.getOrCreate()
    sc = spark.sparkContext
    deadline = time.time() + 120
    while sc._jsc.sc().getExecutorMemoryStatus().size() < 3:  # 2 executors + the driver
        assert time.time() < deadline, "executors did not register within 120 s"
        time.sleep(0.2)
    yield sc
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
            "pids": pids.tolist()}


def test_run_returns_per_rank_results_in_rank_order(sc):
    res = hvd.spark.run(_report, args=(10.0,), num_proc=2, spark_context=sc, start_timeout_s=60)
    assert [r["rank"] for r in res] == [0, 1]
    assert all(r["size"] == 2 and r["local_size"] == 2 for r in res)
    assert [r["local_rank"] for r in res] == [0, 1]
    assert all(r["sum"] == 21.0 for r in res)  # (0 + 10) + (1 + 10)
    assert res[0]["pid"] != res[1]["pid"], "two Python workers"
    assert res[0]["pids"] == res[1]["pids"] == [res[0]["pid"], res[1]["pid"]]


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


def test_a_raising_function_fails_the_job_with_its_message(sc):
    t0 = time.time()
    with pytest.raises(Exception) as info:
        hvd.spark.run(_explode, kwargs={"bad_rank": 1}, num_proc=2, spark_context=sc)
    elapsed = time.time() - t0
    assert "python rank 1 failed on purpose" in str(info.value)
    assert elapsed < 90, f"the job took {elapsed:.0f} s to fail"
    # Both task slots are free again.
    assert hvd.spark.run(lambda: "ok", num_proc=2, spark_context=sc) == ["ok", "ok"]


def test_arguments_are_checked(sc):
    with pytest.raises(TypeError):
        hvd.spark.run(lambda: None, num_proc=2, spark_context=sc, rank=3)
    with pytest.raises(ValueError):
        hvd.spark.run(lambda: None, num_proc=0, spark_context=sc)
