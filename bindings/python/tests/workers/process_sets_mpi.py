"""hvd.ProcessSet(mpi_comm) on N ranks (4 under mpirun; 2 under hvdrun for
the size check). Modes (argv[1]):

  world    hvd.init(comm=MPI.COMM_WORLD, process_sets=[ProcessSet(parity)]),
           parity = COMM_WORLD.Split(rank % 2, key=-rank) (the key reverses
           the communicator's order: the set's ranks are still ascending)
  default  hvd.init() (mpirun's MPI transport on COMM_WORLD), then
           hvd.add_process_set(ProcessSet(parity))
  subcomm  hvd.init(comm=halves) (ranks {0,1} and {2,3} are two jobs), then
           ProcessSet(pairs of the half) and ProcessSet(MPI.COMM_WORLD)
  hvdrun   started by hvdrun (Gloo), mpi4py a singleton: COMM_WORLD has 1
           process, hvd 2 ranks -> the size error on every rank

Results are checked exactly (integer sums, gathered rank order, ids);
failures raise the same ValueError on every rank. In world mode also:
pickling a ProcessSet(mpi_comm) (refused before registration, its ranks
after), and a registration of two communicators whose second set fails in
the library on every rank, which removes the first again."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CHECKS = {
    "world": ["registered", "allreduce", "allgather_order", "broadcast", "with_rank_lists",
              "duplicate", "comm_self", "different_comms", "pickled", "comm_rolls_back",
              "remove"],
    "default": ["registered", "allreduce", "allgather_order", "broadcast", "remove"],
    "subcomm": ["subcomm_sets", "outside_comm"],
    "hvdrun": ["size_mismatch"],
}


def expect_value_error(fn, *needles):
    try:
        fn()
    except ValueError as e:
        for n in needles:
            assert n in str(e), f"{n!r} not in: {e}"
        return str(e)
    raise AssertionError("no ValueError")


def main():
    mode = sys.argv[1]
    from mpi4py import MPI
    import hvd
    from common import run_checks

    world = MPI.COMM_WORLD
    wr = world.Get_rank()
    checks = []

    def add(name):
        def deco(fn):
            checks.append((name, fn))
            return fn
        return deco

    if mode in ("world", "default"):
        parity = world.Split(wr % 2, key=-wr)
        ps = hvd.ProcessSet(parity)
        assert ps.ranks is None and ps.process_set_id is None and ps.mpi_comm is parity
        if mode == "world":
            hvd.init(comm=world, process_sets=[ps])
        else:
            hvd.init()
            assert hvd.transport() == "mpi", hvd.transport()
            assert hvd.add_process_set(ps) is ps
        size, rank = hvd.size(), hvd.rank()
        assert (size, rank) == (world.Get_size(), wr), (size, rank)
        members = [r for r in range(size) if r % 2 == rank % 2]

        @add("registered")
        def _():
            assert ps.ranks == members, str(ps)
            assert ps.process_set_id == 1 + rank % 2, str(ps)  # in the order of lowest rank
            assert (ps.size(), ps.rank(), ps.included()) == (2, members.index(rank), True)
            live = [(p.process_set_id, p.ranks) for p in hvd._DEFAULT.process_sets()]
            assert live == [(1, [0, 2]), (2, [1, 3])], live
            other = hvd._DEFAULT.process_sets()[1 - rank % 2]
            assert other is not ps and other.included() is False
            assert f"mpi_comm={parity}" in str(ps), str(ps)

        @add("allreduce")
        def _():
            got = hvd.allreduce(np.full(3, 10 * rank + 1, np.int64), op=hvd.Sum, name="x",
                                process_set=ps)
            want = sum(10 * r + 1 for r in members)
            assert got.tolist() == [want] * 3, (got, want)
            got = hvd.allreduce(np.full(2, float(rank)), op=hvd.Average, name="avg",
                                process_set=ps)
            assert got.tolist() == [sum(members) / 2.0] * 2, got

        @add("allgather_order")
        def _():
            got = hvd.allgather(np.array([[rank, rank * rank]], np.int32), name="g",
                                process_set=ps)
            assert got.tolist() == [[r, r * r] for r in members], got

        @add("broadcast")
        def _():
            root = members[-1]
            got = hvd.broadcast(np.array([rank + 0.5]), root, name="b", process_set=ps)
            assert got.tolist() == [root + 0.5], got

        @add("with_rank_lists")
        def _():
            low = hvd.add_process_set([0, 1])
            assert low.process_set_id == 3 and low.ranks == [0, 1]
            if low.included():
                got = hvd.allreduce(np.array([rank + 1], np.int64), op=hvd.Sum, name="x",
                                    process_set=low)
                assert got.tolist() == [3], got
            assert hvd.remove_process_set(low) is True

        @add("duplicate")
        def _():
            dup = parity.Dup()
            try:
                expect_value_error(lambda: hvd.add_process_set(hvd.ProcessSet(dup)),
                                   "duplicate process set", "ranks of process set [0, 2]")
            finally:
                dup.Free()
            live = [p.ranks for p in hvd._DEFAULT.process_sets()]
            assert live == [[0, 2], [1, 3]], live

        @add("comm_self")
        def _():
            one = hvd.add_process_set(hvd.ProcessSet(MPI.COMM_SELF))
            assert one.ranks == [rank] and one.size() == 1 and one.rank() == 0, str(one)
            ids = {p.process_set_id: p.ranks for p in hvd._DEFAULT.process_sets()}
            # Ids 3 (the removed [0, 1]) is never reused: 4 .. 4 + size - 1.
            assert ids == {1: [0, 2], 2: [1, 3], **{4 + r: [r] for r in range(size)}}, ids
            assert one.process_set_id == 4 + rank
            got = hvd.allreduce(np.array([rank], np.int64), op=hvd.Sum, name="x",
                                process_set=one)
            assert got.tolist() == [rank]
            # Removing this rank's set removes every set of that registration.
            assert hvd.remove_process_set(one) is True
            live = [p.ranks for p in hvd._DEFAULT.process_sets()]
            assert live == [[0, 2], [1, 3]], live

        @add("different_comms")
        def _():
            halves = world.Split(wr // 2, key=wr)
            try:
                comm = parity if wr < 2 else halves  # rank 0: {0, 2}, but rank 2: {2, 3}
                expect_value_error(lambda: hvd.add_process_set(hvd.ProcessSet(comm)),
                                   "ranks passed different communicators")
            finally:
                halves.Free()
            live = [p.ranks for p in hvd._DEFAULT.process_sets()]
            assert live == [[0, 2], [1, 3]], live

        @add("pickled")
        def _():
            import pickle
            dup = parity.Dup()
            try:
                try:
                    pickle.dumps(hvd.ProcessSet(dup))
                except TypeError as e:
                    assert "known only once it is registered" in str(e), str(e)
                else:
                    raise AssertionError("pickling an unregistered ProcessSet(mpi_comm) worked")
            finally:
                dup.Free()
            assert pickle.loads(pickle.dumps(ps)) is ps
            # rank 0's set [0, 2], sent to every rank: the registered set of those ranks
            got = hvd.broadcast_object(ps if rank == 0 else None, root_rank=0, name="pickled")
            assert got is hvd._DEFAULT.process_sets()[0] and got.ranks == [0, 2], str(got)
            assert (got is ps) == (rank % 2 == 0)
            if got.included():
                out = hvd.allreduce(np.array([rank + 1], np.int64), op=hvd.Sum, name="pickled",
                                    process_set=got)
                assert out.tolist() == [4], out

        @add("comm_rolls_back")
        def _():
            halves = world.Split(wr // 2, key=wr)  # two sets, [0, 1] then [2, 3]
            calls = []
            real = hvd._DEFAULT._make_set

            def second_fails(ranks):
                calls.append(list(ranks))
                if len(calls) == 2:  # the library refuses it on every rank
                    return real(list(ranks) + [size])
                return real(ranks)

            half = hvd.ProcessSet(halves)
            hvd._DEFAULT._make_set = second_fails
            try:
                hvd.add_process_set(half)
            except hvd.InvalidArgumentError as e:
                assert f"rank {size} is out of range" in str(e), str(e)
            else:
                raise AssertionError("the failing registration did not raise")
            finally:
                del hvd._DEFAULT._make_set
            try:
                assert calls == [[0, 1], [2, 3]], calls
                live = [(p.process_set_id, p.ranks) for p in hvd._DEFAULT.process_sets()]
                assert live == [(1, [0, 2]), (2, [1, 3])], live
                assert (half.process_set_id, half.ranks) == (None, None), str(half)
                got = hvd.allreduce(np.array([rank + 1], np.int64), op=hvd.Sum, name="after")
                assert got.tolist() == [sum(range(1, size + 1))], got
                # registered again, whole this time
                assert hvd.add_process_set(half) is half and half.ranks == [r for r in range(
                    size) if r // 2 == rank // 2], str(half)
                out = hvd.allreduce(np.array([rank + 1], np.int64), op=hvd.Sum, name="half",
                                    process_set=half)
                assert out.tolist() == [sum(r + 1 for r in half.ranks)], out
                assert hvd.remove_process_set(half) is True
                live = [p.ranks for p in hvd._DEFAULT.process_sets()]
                assert live == [[0, 2], [1, 3]], live
            finally:
                halves.Free()

        @add("remove")
        def _():
            assert hvd.remove_process_set(ps) is True
            assert hvd._DEFAULT.process_sets() == []
            assert ps.process_set_id is None
            expect_value_error(lambda: hvd.allreduce(np.ones(1), process_set=ps),
                               "was removed")
            assert hvd.remove_process_set(ps) is False

        run_checks([c for c in checks if c[0] in CHECKS[mode]], wr)
        hvd.barrier()
        hvd.shutdown()
        parity.Free()
        return

    if mode == "subcomm":
        halves = world.Split(wr // 2, key=wr)
        hvd.init(comm=halves)
        rank = hvd.rank()
        assert (hvd.size(), rank) == (2, wr % 2)

        @add("subcomm_sets")
        def _():
            ps = hvd.add_process_set(hvd.ProcessSet(MPI.COMM_SELF))
            assert ps.ranks == [rank] and ps.process_set_id == 1 + rank, str(ps)
            got = hvd.allreduce(np.array([wr], np.int64), op=hvd.Sum, name="x", process_set=ps)
            assert got.tolist() == [wr]
            assert hvd.remove_process_set(ps) is True
            assert hvd._DEFAULT.process_sets() == []

        @add("outside_comm")
        def _():
            expect_value_error(lambda: hvd.add_process_set(hvd.ProcessSet(world)),
                               "ProcessSet(mpi_comm) on rank 0",
                               "not in the communicator passed to hvd.init(comm=...)")
            assert hvd._DEFAULT.process_sets() == []

        run_checks(checks, wr)
        hvd.barrier()
        hvd.shutdown()
        halves.Free()
        return

    if mode == "hvdrun":
        hvd.init()
        rank = hvd.rank()

        @add("size_mismatch")
        def _():
            assert world.Get_size() == 1
            expect_value_error(lambda: hvd.add_process_set(hvd.ProcessSet(world)),
                               "ProcessSet(mpi_comm) on rank 0",
                               f"hvd's job has {hvd.size()} ranks but MPI.COMM_WORLD has 1")
            for bad in (MPI.COMM_NULL,):
                expect_value_error(lambda: hvd.ProcessSet(bad), "MPI.COMM_NULL")
            assert hvd._DEFAULT.process_sets() == []
            # The job goes on: the failure left every rank in step.
            got = hvd.allreduce(np.array([rank + 1], np.int64), op=hvd.Sum, name="after")
            assert got.tolist() == [sum(range(1, hvd.size() + 1))], got

        run_checks(checks, rank)
        hvd.shutdown()
        return

    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
