"""Horovod's compression= on hvd.torch's collectives, driven as a Horovod
torch script does, under hvdrun at 2 ranks
(workers/horovod_torch_compression.py): allreduce (4th positional, as in
Horovod), grouped_allreduce, reducescatter and grouped_reducescatter (3rd
positional) with Compression.fp16 (the float16 result in the input's dtype,
against a reference computed from both ranks' inputs), Compression.none, an
integer tensor (not compressed) and a compressor of the script's own;
gradients through the compression; the _async and in-place forms take none,
as in Horovod. Every check is exact."""

import os

import pytest

import harness

torch = pytest.importorskip("torch", reason="torch is not installed (requirements-test.txt)")

from workers import horovod_torch_compression  # noqa: E402

WORKER = os.path.join(harness.WORKERS, "horovod_torch_compression.py")
_jobs = {}


def _job(tmp_path_factory):
    if "np2" not in _jobs:
        _jobs["np2"] = harness.run_job(2, WORKER, launcher="hvdrun",
                                       tmp_path=tmp_path_factory.mktemp("torchcompression"),
                                       timeout=240)
    return _jobs["np2"]


@pytest.mark.parametrize("check", horovod_torch_compression.CHECKS)
def test_horovod_torch_compression(check, hvdrun, tmp_path_factory):
    harness.assert_check(_job(tmp_path_factory), 2, check)


def test_horovod_torch_compression_job_exit(hvdrun, tmp_path_factory):
    job = _job(tmp_path_factory)
    assert job.ok(), job.describe()
