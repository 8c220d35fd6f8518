"""hvd.tensorflow in graphs, driven as Horovod scripts drive it (2 ranks under
hvdrun): more independent hvd ops in one tf.compat.v1 Session.run, and in one
tf.function, than TensorFlow has inter-op threads (1 and 2), built in a
different order on each rank -- with a tf.py_function per op that deadlocked;
hvd's asynchronous kernels must not. Also the TF1 helpers
(broadcast_global_variables, BroadcastGlobalVariablesHook,
DistributedOptimizer), rank_op and friends, broadcast_variables inside a
tf.function, PartialDistributedGradientTape / register_local_source, sparse
gradients, errors in graphs, and the kernel build itself."""

import os
import subprocess
import sys

import numpy as np
import pytest

import harness

tf = pytest.importorskip("tensorflow", reason="tensorflow-cpu is not installed "
                                              "(requirements-test.txt)")

from hvd import _tf_kernels  # noqa: E402

WORKER = os.path.join(harness.WORKERS, "tf_graph.py")
SIZE = 2
ALL_CHECKS = ["session_many_ops", "tf_function_many_ops", "topology_ops",
              "broadcast_global_variables", "broadcast_hook", "v1_distributed_optimizer",
              "broadcast_variables_in_tf_function", "graph_errors", "partial_tape",
              "sparse_tape"]
MANY_OPS = ["session_many_ops", "tf_function_many_ops"]


@pytest.fixture(scope="module")
def kernels():
    """Builds (or finds) the kernels here first, so the ranks do not spend
    their stall budget compiling."""
    mod = _tf_kernels.load()
    assert mod is not None, f"hvd's TensorFlow kernels did not load: {_tf_kernels.error()}"
    return mod


def _job(threads, checks, tmp_path_factory):
    j = harness.run_job(SIZE, WORKER, args=[threads, *checks], launcher="hvdrun",
                        tmp_path=tmp_path_factory.mktemp(f"tf_graph_{threads}"), timeout=300,
                        env={"HVD_STALL_SHUTDOWN_TIME": "30"})
    assert set(j.results) == set(range(SIZE)), j.describe()
    return j


@pytest.fixture(scope="module")
def job1(kernels, hvdrun, tmp_path_factory):
    return _job(1, [], tmp_path_factory)


@pytest.fixture(scope="module")
def job2(kernels, hvdrun, tmp_path_factory):
    return _job(2, MANY_OPS, tmp_path_factory)


def _check(job, check):
    for r in range(SIZE):
        assert job.results[r]["checks"][check] is None, \
            f"rank {r}, {check}: {job.results[r]['checks'][check]}"


def test_kernels_build_and_load(kernels):
    assert _tf_kernels.error() is None
    for op in ("hvd_allreduce", "hvd_grouped_allreduce", "hvd_broadcast", "hvd_allgather",
               "hvd_alltoall", "hvd_reducescatter", "hvd_rank", "hvd_size"):
        assert hasattr(kernels, op), op
    path = _tf_kernels.build()  # cached: the same file
    assert os.path.isfile(path) and path.startswith(_tf_kernels.cache_dir())


@pytest.mark.parametrize("check", ALL_CHECKS)
def test_one_inter_op_thread(job1, check):
    assert all(job1.results[r]["kernels"] == "loaded" for r in range(SIZE)), job1.describe()
    _check(job1, check)


@pytest.mark.parametrize("check", MANY_OPS)
def test_two_inter_op_threads(job2, check):
    _check(job2, check)


def test_jobs_exit_cleanly(job1, job2):
    assert job1.ok(), job1.describe()
    assert job2.ok(), job2.describe()


def test_weights_identical_after_graph_training(job1):
    for key in ("v1_weights", "tf2_weights", "tf2_opt"):
        for r in range(1, SIZE):
            assert job1.results[r][key] == job1.results[0][key], key


FALLBACK = """
import os, sys, warnings
import tensorflow as tf
import hvd.tensorflow as hvd
from hvd import _tf_kernels
hvd.init()
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    with tf.Graph().as_default():
        a = hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Sum, name="a")
        b = hvd.broadcast(tf.constant([3, 4]), 0, name="b")
        r = hvd.rank_op()
        with tf.compat.v1.Session() as s:
            print("values", s.run(a).tolist(), s.run(b).tolist(), int(s.run(r)))
    print("ops", sorted({op.type for op in a.graph.get_operations()} & {"EagerPyFunc", "HvdAllreduce"}))
print("warnings", [str(x.message)[:60] for x in w if issubclass(x.category, RuntimeWarning)])
print("error", _tf_kernels.error()[:40])
"""


@pytest.mark.parametrize("how", ["disabled", "no_compiler"])
def test_without_kernels_graph_ops_fall_back_to_py_function(tmp_path, how):
    env = harness.child_env({"HVD_TF_KERNELS_DIR": str(tmp_path / "cache")})
    if how == "disabled":
        env["HVD_TF_KERNELS"] = "0"
    else:
        env["CXX"] = "/bin/false"
    p = subprocess.run([sys.executable, "-c", FALLBACK], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=180)
    out = p.stdout.decode("utf-8", "replace")
    assert p.returncode == 0, out
    assert "values [1.0, 2.0] [3, 4] 0" in out, out
    assert "ops ['EagerPyFunc']" in out, out
    if how == "disabled":  # asked for: no warning
        assert "warnings []" in out and "error HVD_TF_KERNELS=0" in out, out
    else:
        assert 'warnings ["hvd.tensorflow: could not build hvd\'s TensorFlow kernels' in out, out
        assert "error compiling" in out or "error cannot run" in out, out


def test_kernels_in_graph_world_of_one(kernels):
    import hvd.tensorflow as hvd
    hvd.init()
    try:
        with tf.Graph().as_default():
            x = tf.constant(np.arange(6, dtype=np.float64).reshape(3, 2))
            outs = [hvd.allreduce(x, op=hvd.Average, prescale_factor=1.0 / 3,
                                  postscale_factor=3.0, name="g.avg"),
                    hvd.allgather(x, name="g.ag"), hvd.reducescatter(x, name="g.rs"),
                    hvd.alltoall(x, splits=[3], name="g.a2a")[1],
                    hvd.grouped_allreduce([x, tf.cast(x, tf.float64) * 2], name="g.grp")[1],
                    hvd.allreduce(tf.constant([True, False]), op=hvd.Max, name="g.bool"),
                    hvd.allreduce(tf.zeros([0, 2]), name="g.empty")]
            types = {op.type for op in tf.compat.v1.get_default_graph().get_operations()}
            assert {"HvdAllreduce", "HvdAllgather", "HvdReducescatter", "HvdAlltoall",
                    "HvdGroupedAllreduce"} <= types, types
            assert "EagerPyFunc" not in types
            assert outs[1].shape.as_list() == [None, 2]
            with tf.compat.v1.Session() as s:
                got = s.run(outs)
        np.testing.assert_array_equal(got[0], np.arange(6).reshape(3, 2))
        np.testing.assert_array_equal(got[1], np.arange(6).reshape(3, 2))
        np.testing.assert_array_equal(got[2], np.arange(6).reshape(3, 2))
        assert got[3].tolist() == [3]
        np.testing.assert_array_equal(got[4], np.arange(6).reshape(3, 2) * 2)
        assert got[5].tolist() == [True, False] and got[6].shape == (0, 2)
    finally:
        hvd.shutdown()
