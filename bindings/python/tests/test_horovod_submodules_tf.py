"""Horovod's TensorFlow and Keras submodule paths (horovod.tensorflow.mpi_ops,
.compression, .functions, .sync_batch_norm; horovod.tensorflow.keras.callbacks,
.elastic; horovod.keras.callbacks, .elastic) as hvd.<...>: each offers
Horovod's public names of that module that hvd has, as hvd.tensorflow's (or
hvd.keras') own objects, and nothing else; importing them loads no torch. The
torch side is test_horovod_submodules_torch.py (another pytest process)."""

import importlib
import os
import subprocess
import sys

import pytest

import harness

pytest.importorskip("tensorflow", reason="tensorflow-cpu is not installed (requirements-test.txt)")

import hvd.keras as hvdk  # noqa: E402
import hvd.tensorflow as hvdtf  # noqa: E402
import hvd.tensorflow.compression  # noqa: E402,F401
import hvd.tensorflow.functions  # noqa: E402,F401
import hvd.tensorflow.mpi_ops  # noqa: E402,F401
import hvd.tensorflow.sync_batch_norm  # noqa: E402,F401

# The public module-level names of Horovod 0.28's modules (defined there, or
# the process-set names imported there; Python modules and the helpers of
# horovod.common.util left out), and those of them hvd does not have.
HOROVOD = {
    "mpi_ops": {
        "Adasum", "Average", "Max", "Min", "ProcessSet", "Product", "Sum", "add_process_set",
        "allgather", "alltoall", "broadcast", "broadcast_", "ccl_built",
        "check_num_rank_power_of_2", "cross_rank", "cross_size", "cuda_built", "ddl_built",
        "global_process_set", "gloo_built", "gloo_enabled", "grouped_allgather",
        "handle_average_backwards_compatibility", "init", "is_homogeneous", "is_initialized",
        "join", "local_rank", "local_rank_op", "local_size", "local_size_op", "mpi_built",
        "mpi_enabled", "mpi_threads_supported", "nccl_built", "process_set_included_op", "rank",
        "rank_op", "remove_process_set", "rocm_built", "shutdown", "size", "size_op",
        "start_timeline", "stop_timeline", "MPI_LIB",
    },
    "compression": {"Compressor", "NoneCompressor", "FP16Compressor", "Compression"},
    "functions": {"broadcast_variables", "broadcast_object", "broadcast_object_fn",
                  "allgather_object"},
    "sync_batch_norm": {"SyncBatchNormalization"},
}
MISSING = {"mpi_ops": {"MPI_LIB"}}
# Modules of Horovod's that hvd has no names for, so no module either.
ABSENT = {"util": {"vars_to_refs", "refs_to_vars"},
          "gradient_aggregation": {"LocalGradientAggregationHelper"},
          "gradient_aggregation_eager": {"LocalGradientAggregationHelperEager"}}
KERAS_CALLBACKS = {"BroadcastGlobalVariablesCallback", "MetricAverageCallback",
                   "LearningRateScheduleCallback", "LearningRateWarmupCallback",
                   "BestModelCheckpoint"}


def _public(mod):
    return {n for n in vars(mod) if not n.startswith("_")}


@pytest.mark.parametrize("sub", sorted(HOROVOD))
def test_submodule_names_are_hvd_tensorflow_objects(sub):
    mod = importlib.import_module(f"hvd.tensorflow.{sub}")
    assert mod.__name__ == f"hvd.tensorflow.{sub}"
    assert getattr(hvdtf, sub) is mod
    want = HOROVOD[sub] - MISSING.get(sub, set())
    assert set(mod.__all__) == want
    assert _public(mod) == want, "public names beyond Horovod's"
    assert not [n for n in MISSING.get(sub, ()) if hasattr(mod, n)], "a missing name is there"
    ns = {}
    exec(f"from hvd.tensorflow.{sub} import {', '.join(sorted(want))}", ns)  # a Horovod script
    for name in want:
        assert ns[name] is getattr(hvdtf, name), name


@pytest.mark.parametrize("sub", sorted(ABSENT))
def test_modules_without_names_are_absent(sub):
    for name in ABSENT[sub]:
        assert not hasattr(hvdtf, name), name
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"hvd.tensorflow.{sub}")


def test_sync_batch_normalization_is_the_lazy_class():
    from hvd.tensorflow.sync_batch_norm import SyncBatchNormalization
    import keras
    assert SyncBatchNormalization is hvdtf.SyncBatchNormalization is hvdk.SyncBatchNormalization
    assert issubclass(SyncBatchNormalization, keras.layers.BatchNormalization)


@pytest.mark.parametrize("front", ["hvd.tensorflow.keras", "hvd.keras"])
def test_keras_callbacks_and_elastic_modules(front):
    mod = importlib.import_module(front)
    # hvd.tensorflow.keras is a package of its own (Horovod's name) whose
    # every public name is hvd.keras's object.
    for name in hvdk.__all__ + ["SyncBatchNormalization"]:
        assert getattr(mod, name) is getattr(hvdk, name), name
    callbacks = importlib.import_module(f"{front}.callbacks")
    assert callbacks is mod.callbacks
    assert _public(callbacks) == KERAS_CALLBACKS
    ns = {}
    exec(f"from {front}.callbacks import {', '.join(sorted(KERAS_CALLBACKS))}", ns)
    for name in KERAS_CALLBACKS:
        assert ns[name] is getattr(hvdk, name), name
    elastic = importlib.import_module(f"{front}.elastic")
    assert elastic is mod.elastic
    for name in hvdk.elastic.__all__:
        assert getattr(elastic, name) is getattr(hvdk.elastic, name), name
    ns = {}
    exec(f"from {front}.elastic import KerasState, CommitStateCallback, "
         "UpdateBatchStateCallback, UpdateEpochStateCallback, run", ns)
    assert ns["KerasState"] is hvdk.elastic.KerasState


def test_hvd_keras_all_lists_its_api():
    # hvd.tensorflow.keras exports hvd.keras's __all__: every public name of
    # hvd.keras but the modules it uses and its submodules.
    import types
    api = {n for n in _public(hvdk) if not isinstance(getattr(hvdk, n), types.ModuleType)}
    assert set(hvdk.__all__) == api - {"annotations"}


def test_hvd_tensorflow_is_a_package():
    # hvd/tensorflow/ is a package (hvd/tensorflow/__init__.py) whose
    # submodules are files of the folder, hvd.tensorflow.keras among them
    # (hvd/tensorflow/keras/, no import hook).
    pkg = os.path.dirname(os.path.abspath(hvd.__file__))
    assert hvdtf.__file__ == os.path.join(pkg, "tensorflow", "__init__.py")
    assert hvd.tensorflow.mpi_ops.__file__ == os.path.join(pkg, "tensorflow", "mpi_ops.py")
    assert not os.path.exists(os.path.join(pkg, "tensorflow.py"))
    assert importlib.import_module("hvd.tensorflow.elastic") is hvdtf.elastic
    assert hvdtf.elastic.__file__ == os.path.join(pkg, "tensorflow", "elastic.py")
    hvdtfk = importlib.import_module("hvd.tensorflow.keras")
    assert hvdtfk.__file__ == os.path.join(pkg, "tensorflow", "keras", "__init__.py")
    assert hvdtfk.callbacks.__file__ == os.path.join(pkg, "tensorflow", "keras", "callbacks.py")
    assert not [f for f in sys.meta_path if type(f).__module__.startswith("hvd")], sys.meta_path


def test_submodules_load_no_torch():
    code = ("import sys\n"
            "import hvd.tensorflow.mpi_ops, hvd.tensorflow.compression\n"
            "import hvd.tensorflow.functions, hvd.tensorflow.sync_batch_norm\n"
            "import hvd.tensorflow.keras.callbacks, hvd.keras.elastic\n"
            "print(sorted(m for m in ('torch', 'torchvision', 'triton') if m in sys.modules))\n")
    p = subprocess.run([sys.executable, "-c", code], env=harness.child_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    out = p.stdout.decode("utf-8", "replace")
    assert p.returncode == 0, out
    assert out.strip().splitlines()[-1] == "[]", out
