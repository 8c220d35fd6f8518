"""Horovod scripts on hvd.tensorflow and hvd.keras (`import hvd.tensorflow as
hvd` in place of `import horovod.tensorflow as hvd`, likewise for
horovod.tensorflow.keras): capability queries, errors with TensorFlow's
types, join(device=-1), hvd.elastic."""

import importlib

import pytest

import harness
from test_horovod_api import (
    CAPABILITIES,
    NO_SUCH_TRANSPORT,
    caps_job,
    check_caps_job,
    describe,
    mpi_reason,
    plugin_next_to_library,
    run_hvdrun,
)

tf = pytest.importorskip("tensorflow", reason="tensorflow-cpu is not installed "
                                              "(requirements-test.txt)")

import hvd  # noqa: E402
import hvd.keras as hvdk  # noqa: E402
import hvd.tensorflow as hvdtf  # noqa: E402


@pytest.mark.parametrize("frontend", [hvdtf, hvdk], ids=["tensorflow", "keras"])
def test_capability_queries_are_there_and_agree(frontend):
    assert not frontend.is_initialized()
    for name in CAPABILITIES:
        assert getattr(frontend, name)() == getattr(hvd, name)(), name
    assert frontend.gloo_built() is True
    assert frontend.mpi_built() is plugin_next_to_library("mpi")
    for name in NO_SUCH_TRANSPORT:
        assert getattr(frontend, name)() is False, name
    assert frontend.mpi_enabled() is False and frontend.gloo_enabled() is False
    with pytest.raises(ValueError):
        frontend.mpi_threads_supported()


def test_capabilities_under_hvdrun_gloo(tmp_path, hvdrun):
    script = harness.write_script(tmp_path, caps_job("hvd.keras"))
    p, res = run_hvdrun(hvdrun, ["--gloo"], 2, script, tmp_path)
    check_caps_job(p, res, "gloo")


@pytest.mark.skipif(mpi_reason() is not None, reason=f"hvdrun --mpi: {mpi_reason()}")
def test_capabilities_under_hvdrun_mpi(tmp_path, hvdrun):
    script = harness.write_script(tmp_path, caps_job("hvd.tensorflow"))
    p, res = run_hvdrun(hvdrun, ["--mpi"], 2, script, tmp_path)
    check_caps_job(p, res, "mpi")


def test_error_classes():
    for frontend in (hvdtf, hvdk):
        assert issubclass(frontend.MismatchError, tf.errors.FailedPreconditionError)
        assert issubclass(frontend.MismatchError, hvd.MismatchError)
        assert issubclass(frontend.InvalidArgumentError, tf.errors.InvalidArgumentError)
        assert issubclass(frontend.InvalidArgumentError, hvd.InvalidArgumentError)
        assert issubclass(frontend.InvalidArgumentError, ValueError)
        assert frontend.HorovodInternalError is hvd.HorovodInternalError
    e = hvdtf.MismatchError(hvd._c_api.HVD_ERR_MISMATCH, "shapes differ")
    assert e.error_code == tf.errors.FAILED_PRECONDITION and e.status == -5
    assert e.message == "shapes differ" and str(e) == "shapes differ [HVD_ERR_MISMATCH]"
    import pickle
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is hvdtf.MismatchError and str(back) == str(e)


def test_bad_argument_is_tf_invalid_argument_eager_and_in_graph():
    hvdtf.init()
    try:
        with pytest.raises(tf.errors.InvalidArgumentError, match="root is 3") as e:
            hvdtf.broadcast(tf.constant([1.0, 2.0]), root_rank=3)
        assert isinstance(e.value, hvd.InvalidArgumentError)

        @tf.function
        def bcast(x):
            return hvdtf.broadcast(x, root_rank=3, name="graph_root")

        with pytest.raises(tf.errors.InvalidArgumentError, match="root is 3"):
            bcast(tf.constant([1.0, 2.0]))
        with pytest.raises(tf.errors.InvalidArgumentError, match="root is 3"):
            hvdtf.broadcast_variables([tf.Variable([1.0])], root_rank=3)
        # the context is still usable
        assert hvdtf.allreduce(tf.constant([3.0])).numpy().tolist() == [3.0]
    finally:
        hvdtf.shutdown()


def test_join_accepts_device():
    hvdtf.init()
    try:
        # A world of one: rank 0 joined last.
        assert hvdtf.join(device=-1) == 0 and hvdk.join(device=-1) == 0
    finally:
        hvdtf.shutdown()


MISMATCH_JOB = """
import os, sys
import tensorflow as tf
import hvd.tensorflow as hvd
sys.path.insert(0, {workers!r})
from common import write
hvd.init()
r = hvd.rank()
out = {{}}
try:  # eager: ranks disagree on the shape
    hvd.allreduce(tf.ones([2 + r]), name="eager_mismatch")
    out["eager"] = "no error"
except tf.errors.FailedPreconditionError as e:
    out["eager"] = ["FailedPreconditionError", isinstance(e, hvd.MismatchError), str(e)]

@tf.function
def step(x):
    return hvd.allreduce(x, name="graph_mismatch")

try:  # in a tf.function: the op is hvd's TensorFlow kernel
    step(tf.ones([2 + r]))
    out["graph"] = "no error"
except tf.errors.OpError as e:
    out["graph"] = [type(e).__name__, e.message]
out["after"] = hvd.allreduce(tf.constant([float(r)]), op=hvd.Sum, name="after").numpy().tolist()
write(r, out)
hvd.shutdown()
"""


def test_mismatch_is_tf_failed_precondition(tmp_path, hvdrun):
    script = harness.write_script(tmp_path, MISMATCH_JOB.format(workers=harness.WORKERS))
    p, res = run_hvdrun(hvdrun, [], 2, script, tmp_path)
    assert p.returncode == 0, describe(p)
    for r in range(2):
        kind, is_hvd, text = res[r]["eager"]
        assert (kind, is_hvd) == ("FailedPreconditionError", True), res[r]
        assert "HVD_ERR_MISMATCH" in text and "eager_mismatch" in text, text
        # In a graph hvd's kernel fails the op with TensorFlow's status for
        # it: FailedPrecondition, with hvd's message (docs/horovod.md).
        kind, text = res[r]["graph"]
        assert kind == "FailedPreconditionError", res[r]["graph"]
        assert "HVD_ERR_MISMATCH" in text and "graph_mismatch" in text, text
        assert res[r]["after"] == [1.0]  # a mismatch leaves the context usable


@pytest.mark.parametrize("frontend,names", [
    (hvdtf, ["run", "TensorFlowKerasState", "TensorFlowState"]),
    (hvdk, ["run", "KerasState", "CommitStateCallback", "UpdateBatchStateCallback"]),
], ids=["tensorflow", "keras"])
def test_elastic(frontend, names):
    """Horovod's elastic modules (test_elastic_tf.py tests what they do)."""
    name = frontend.__name__ + ".elastic"
    assert importlib.import_module(name) is frontend.elastic
    for n in names:
        assert callable(getattr(frontend.elastic, n)), n
    ns = {}
    exec(f"from {name} import run", ns)
    assert ns["run"] is frontend.elastic.run
