"""Horovod's torch submodule paths (horovod.torch.mpi_ops, .compression,
.functions, .optimizer, .sync_batch_norm, .elastic.sampler, .elastic.state)
as hvd.torch.<name>: each offers Horovod's public names of that module that
hvd has, as hvd.torch's (or hvd.torch.elastic's) own objects, and nothing
else; importing them loads no TensorFlow; and a 2-rank hvdrun job that
imports its names only from the submodules gets exact results (elastic
state: sync from rank 0, the sampler's shards, commit and restore).
The TensorFlow side is test_horovod_submodules_tf.py (another pytest process)."""

import importlib
import os
import subprocess
import sys

import pytest

import harness

pytest.importorskip("torch", reason="torch is not installed (requirements-test.txt)")

import hvd.torch as hvdt  # noqa: E402
import hvd.torch.compression  # noqa: E402,F401
import hvd.torch.elastic.sampler  # noqa: E402,F401
import hvd.torch.elastic.state  # noqa: E402,F401
import hvd.torch.functions  # noqa: E402,F401
import hvd.torch.mpi_ops  # noqa: E402,F401
import hvd.torch.optimizer  # noqa: E402,F401
import hvd.torch.sync_batch_norm  # noqa: E402,F401

# The public module-level names of Horovod 0.28's modules (defined there, or
# imported there from Horovod's own modules; Python modules and the helpers of
# horovod.common.util left out), and those of them hvd does not have.
HOROVOD = {
    "mpi_ops": {
        "Adasum", "Average", "Compression", "HorovodInternalError", "Max", "Min", "ProcessSet",
        "Product", "Sum", "add_process_set", "allgather", "allgather_async", "allreduce",
        "allreduce_", "allreduce_async", "allreduce_async_", "alltoall", "alltoall_async",
        "barrier", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_", "ccl_built",
        "cross_rank", "cross_size", "cuda_built", "ddl_built", "global_process_set",
        "gloo_built", "gloo_enabled", "grouped_allgather", "grouped_allgather_async",
        "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
        "grouped_allreduce_async_", "grouped_reducescatter", "grouped_reducescatter_async",
        "init", "is_homogeneous", "is_initialized", "join", "local_rank", "local_size",
        "mpi_built", "mpi_enabled", "mpi_threads_supported", "nccl_built", "poll", "rank",
        "reducescatter", "reducescatter_async", "remove_process_set", "rocm_built", "shutdown",
        "size", "sparse_allreduce_async", "start_timeline", "stop_timeline", "synchronize",
        "HorovodAllreduce", "HorovodGroupedAllreduce", "HorovodAllgather",
        "HorovodGroupedAllgather", "HorovodBroadcast", "HorovodAlltoall",
        "HorovodReducescatter", "HorovodGroupedReducescatter",
        "handle_average_backwards_compatibility", "mpi_lib",
    },
    "compression": {"Compressor", "NoneCompressor", "FP16Compressor", "Compression"},
    "functions": {"broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
                  "allgather_object"},
    "optimizer": {"DistributedOptimizer"},
    "sync_batch_norm": {"SyncBatchNorm"},
    # (the classes and functions defined there)
    "elastic.sampler": {"ElasticSampler"},
    "elastic.state": {"TorchState", "StateHandler", "ModelStateHandler", "OptimizerStateHandler",
                      "LRSchedulerStateHandler", "SamplerStateHandler", "get_handler_registry",
                      "set_handler_registry"},
}
MISSING = {
    "mpi_ops": {"HorovodAllreduce", "HorovodGroupedAllreduce", "HorovodAllgather",
                "HorovodGroupedAllgather", "HorovodBroadcast", "HorovodAlltoall",
                "HorovodReducescatter", "HorovodGroupedReducescatter", "mpi_lib"},
    "elastic.state": {"StateHandler", "ModelStateHandler", "OptimizerStateHandler",
                      "LRSchedulerStateHandler", "SamplerStateHandler", "get_handler_registry",
                      "set_handler_registry"},
}


def _public(mod):
    return {n for n in vars(mod) if not n.startswith("_")}


@pytest.mark.parametrize("sub", sorted(HOROVOD))
def test_submodule_names_are_hvd_torch_objects(sub):
    mod = importlib.import_module(f"hvd.torch.{sub}")
    assert mod.__name__ == f"hvd.torch.{sub}"
    parent, _, leaf = f"hvd.torch.{sub}".rpartition(".")
    owner = importlib.import_module(parent)  # hvd.torch, or hvd.torch.elastic
    assert getattr(owner, leaf) is mod
    want = HOROVOD[sub] - MISSING.get(sub, set())
    assert set(mod.__all__) == want
    assert _public(mod) == want, "public names beyond Horovod's"
    assert not [n for n in MISSING.get(sub, ()) if hasattr(mod, n)], "a missing name is there"
    ns = {}
    exec(f"from hvd.torch.{sub} import {', '.join(sorted(want))}", ns)  # as a Horovod script
    for name in want:
        assert ns[name] is getattr(owner, name), name


def test_star_import_gives_the_same_objects():
    ns = {}
    exec("from hvd.torch.mpi_ops import *", ns)
    names = {n for n in ns if n != "__builtins__"}
    assert names == HOROVOD["mpi_ops"] - MISSING["mpi_ops"]
    assert all(ns[n] is getattr(hvdt, n) for n in names)


def test_hvd_torch_is_a_package():
    # hvd/torch/ is a package (hvd/torch/__init__.py) whose submodules are
    # files of the folder; hvd.torch.elastic likewise (hvd/torch/elastic/).
    pkg = os.path.dirname(os.path.abspath(hvd.__file__))
    assert hvdt.__file__ == os.path.join(pkg, "torch", "__init__.py")
    assert hvd.torch.mpi_ops.__file__ == os.path.join(pkg, "torch", "mpi_ops.py")
    assert not os.path.exists(os.path.join(pkg, "torch.py"))
    assert importlib.import_module("hvd.torch.elastic") is hvdt.elastic
    assert hvdt.elastic.__file__ == os.path.join(pkg, "torch", "elastic", "__init__.py")
    assert hvd.torch.elastic.state.__file__ == os.path.join(pkg, "torch", "elastic", "state.py")


def test_submodules_load_no_tensorflow():
    code = ("import sys\n"
            "import hvd.torch.mpi_ops, hvd.torch.compression, hvd.torch.functions\n"
            "import hvd.torch.optimizer, hvd.torch.sync_batch_norm\n"
            "import hvd.torch.elastic.sampler, hvd.torch.elastic.state\n"
            "print(sorted(m for m in ('tensorflow', 'keras', 'tf_keras') if m in sys.modules))\n")
    p = subprocess.run([sys.executable, "-c", code], env=harness.child_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=180)
    out = p.stdout.decode("utf-8", "replace")
    assert p.returncode == 0, out
    assert out.strip().splitlines()[-1] == "[]", out


# A Horovod torch script whose hvd names all come from the submodules.
JOB = """
import json, os, time
import torch
from hvd.torch.mpi_ops import (init, shutdown, rank, size, allreduce_async_, poll,
                               synchronize, allgather, Sum)
from hvd.torch.functions import (broadcast_parameters, broadcast_optimizer_state,
                                 broadcast_object, allgather_object)
from hvd.torch.optimizer import DistributedOptimizer
from hvd.torch.compression import Compression
from hvd.torch.elastic import run
from hvd.torch.elastic.sampler import ElasticSampler
from hvd.torch.elastic.state import TorchState

init()
r, n = rank(), size()
res = {"size": n}

t = torch.tensor([r + 1.0, 10.0 * (r + 1)], dtype=torch.float64)
h = allreduce_async_(t, name="submodules.sum", op=Sum)
deadline = time.monotonic() + 60
while not poll(h):
    if time.monotonic() > deadline:
        raise TimeoutError("poll() never turned True")
    time.sleep(0.001)
synchronize(h)
res["allreduce_async_"] = t.tolist()
res["allgather"] = allgather(torch.tensor([[r, 7 * r]], dtype=torch.int32)).tolist()

model = torch.nn.Linear(1, 1, bias=False)
with torch.no_grad():
    model.weight.fill_(r + 5.0)
broadcast_parameters(model.state_dict(), root_rank=1)
res["broadcast_parameters"] = model.weight.item()

opt = torch.optim.SGD(model.parameters(), lr=0.5 * (r + 1))
broadcast_optimizer_state(opt, root_rank=0)
res["lr"] = opt.param_groups[0]["lr"]
with torch.no_grad():
    model.weight.fill_(1.0)
opt = DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                           compression=Compression.none)
opt.zero_grad()
model(torch.tensor([[2.0 * r + 1.0]])).sum().backward()  # gradients 1 and 3: average 2
opt.step()
res["step"] = model.weight.item()  # 1 - 0.5 * 2

res["broadcast_object"] = broadcast_object({"from": r, "list": [r] * 3}, root_rank=1)
res["allgather_object"] = allgather_object({"rank": r, "square": r * r})

# Horovod's elastic objects from their submodules (a job that is not elastic:
# run() syncs the state from rank 0 and calls the function once).
net = torch.nn.Linear(1, 1, bias=False)
with torch.no_grad():
    net.weight.fill_(10.0 + r)
sgd = torch.optim.SGD(net.parameters(), lr=0.25 * (r + 1))
sampler = ElasticSampler(list(range(10)), shuffle=False)
state = TorchState(net, sgd, sampler=sampler, epoch=3 + r)


@run
def train(state):
    out = {"synced": [state.model.weight.item(), state.optimizer.param_groups[0]["lr"],
                      state.epoch],
           "shard": list(state.sampler)}
    state.sampler.record_batch(0, 2)  # this rank's first 2 indices are done
    state.epoch = 7
    state.commit()  # every rank's processed indices together
    with torch.no_grad():
        state.model.weight.fill_(-1.0)
    state.epoch = 8
    state.sampler.set_epoch(9)
    state.restore()
    out["restored"] = [state.model.weight.item(), state.epoch, state.sampler.epoch]
    out["shard_after_commit"] = list(state.sampler)
    return out


res["elastic"] = train(state)
shutdown()
with open(os.path.join(os.environ["HVD_TEST_OUT"], "rank%d.json" % r), "w") as f:
    json.dump(res, f)
"""


def test_two_ranks_with_submodule_names_only(tmp_path, hvdrun):
    script = harness.write_script(tmp_path, JOB)
    job = harness.run_job(2, script, launcher="hvdrun", tmp_path=tmp_path, timeout=240)
    assert job.ok(), job.describe()
    assert set(job.results) == {0, 1}, job.describe()
    for r in (0, 1):
        assert job.results[r] == {
            "size": 2,
            "allreduce_async_": [3.0, 30.0],
            "allgather": [[0, 0], [1, 7]],
            "broadcast_parameters": 6.0,
            "lr": 0.5,
            "step": 0.0,
            "broadcast_object": {"from": 1, "list": [1, 1, 1]},
            "allgather_object": [{"rank": 0, "square": 0}, {"rank": 1, "square": 1}],
            "elastic": {
                "synced": [10.0, 0.25, 3],  # rank 0's
                "shard": [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]][r],
                "restored": [10.0, 7, 0],
                # 0, 1, 2, 3 processed (both ranks' first two): the rest resharded
                "shard_after_commit": [[4, 6, 8], [5, 7, 9]][r],
            },
        }, f"rank {r}"
