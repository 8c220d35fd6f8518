"""hvd.ProcessSet(mpi_comm): an mpi4py communicator's ranks translated to
hvd's. Under mpirun (4 ranks): hvd.init(comm=COMM_WORLD, process_sets=[...]),
hvd.init() then add_process_set, and hvd.init(comm=<a half of the job>);
under hvdrun (2 ranks, mpi4py a singleton) the size check. See
workers/process_sets_mpi.py. Skipped, with the reason, when the MPI plugin,
mpi4py or mpirun is missing."""

import os

import pytest

import harness

WORKER = os.path.join(harness.WORKERS, "process_sets_mpi.py")
MPI_REASON = harness.mpi_reason()
needs_mpi = pytest.mark.skipif(MPI_REASON is not None, reason=f"mpi: {MPI_REASON}")
CHECKS = {
    "world": ["registered", "allreduce", "allgather_order", "broadcast", "with_rank_lists",
              "duplicate", "comm_self", "different_comms", "pickled", "comm_rolls_back",
              "remove"],
    "default": ["registered", "allreduce", "allgather_order", "broadcast", "remove"],
    "subcomm": ["subcomm_sets", "outside_comm"],
    "hvdrun": ["size_mismatch"],
}
SIZES = {"world": 4, "default": 4, "subcomm": 4, "hvdrun": 2}
_jobs = {}


def _job(mode, tmp_path_factory):
    if mode not in _jobs:
        tmp = tmp_path_factory.mktemp(f"psmpi-{mode}")
        if mode == "hvdrun":
            _jobs[mode] = harness.run_job(SIZES[mode], WORKER, args=(mode,), tmp_path=tmp,
                                          timeout=180)
        else:
            _jobs[mode] = harness.run_mpirun(SIZES[mode], WORKER, args=(mode,), tmp_path=tmp,
                                             timeout=180)
    return _jobs[mode]


@needs_mpi
@pytest.mark.parametrize("mode,check", [pytest.param(m, c, id=f"{m}-{c}")
                                        for m in CHECKS for c in CHECKS[m]])
def test_process_set_from_mpi_comm(mode, check, tmp_path_factory):
    harness.assert_check(_job(mode, tmp_path_factory), SIZES[mode], check)


@needs_mpi
@pytest.mark.parametrize("mode", list(CHECKS))
def test_job_exit(mode, tmp_path_factory):
    job = _job(mode, tmp_path_factory)
    assert job.ok(), job.describe()


def test_process_set_rejects_other_objects():
    import hvd
    with pytest.raises(ValueError, match="list of ranks .ints. or an mpi4py communicator"):
        hvd.ProcessSet(3.5)
    with pytest.raises(ValueError, match="got 'a'"):
        hvd.ProcessSet(["a"])
