"""Process sets through the numpy API on N ranks (2 or 4) under hvdrun.

Sets: `even` and `odd` (the ranks of one parity, registered by
hvd.init(process_sets=...), `odd` given unsorted), and `low` (ranks 0 ..
N-2, or both ranks at N = 2; added later), which overlaps both. Every
collective runs with process_set= and is checked exactly against what the
set's members contributed (floats: Average of small integers, within 1e-12
relative). Every check submits all its operations before asserting, so a
failing check leaves the ranks in step for the next one.

Also: ProcessSets sent between ranks through pickle (broadcast_object,
allgather_object) come back as the registered sets, usable at once, or as
unregistered ones to add; and hvd.init(process_sets=[...]) whose last set
fails on every rank removes the sets it had registered before raising."""

import os
import sys

import numpy as np
try:
    from common import Checks  # run as a script (this folder first on sys.path)
except ImportError:
    from workers.common import Checks  # imported by a test module

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CHECKS = ["registered", "add_dynamic", "allreduce", "allreduce_inplace_async",
          "grouped_allreduce", "allgather", "grouped_allgather", "broadcast", "alltoall",
          "reducescatter", "grouped_reducescatter", "barrier_join", "objects",
          "same_names_at_once", "not_registered", "not_a_member", "root_outside_set",
          "bad_ranks", "mismatched_lists", "duplicate_set", "remove", "init_dynamic",
          "pickled", "init_rolls_back", "shutdown_drops_sets"]


def check_names(size):
    return list(CHECKS)


def low_ranks(size):
    return list(range(size - 1)) if size > 2 else [0, 1]


def value(g, shape=(2, 3)):
    """Rank g's input: distinct small integers per rank."""
    return (np.arange(int(np.prod(shape))).reshape(shape) + 10 * g + 1).astype(np.int64)


def make_checks(hvd, size, rank, even, odd):
    checks = Checks()
    add = checks.add

    mine = even if rank % 2 == 0 else odd
    other = odd if rank % 2 == 0 else even
    state = {}

    def sets_of_mine():
        """(set, its ranks) for every set this rank belongs to, global last."""
        out = [(mine, mine.ranks)]
        low = state.get("low")
        if low is not None and low.included():
            out.append((low, low.ranks))
        out.append((hvd.global_process_set, list(range(size))))
        return out

    @add("registered")
    def _():
        g = hvd.global_process_set
        assert (g.process_set_id, g.ranks, g.size(), g.rank(), g.included()) == \
            (0, list(range(size)), size, rank, True), str(g)
        assert (even.process_set_id, odd.process_set_id) == (1, 2), (str(even), str(odd))
        assert even.ranks == list(range(0, size, 2)) and odd.ranks == list(range(1, size, 2))
        assert mine.included() is True and other.included() is False
        assert (mine.size(), mine.rank()) == (len(mine.ranks), mine.ranks.index(rank))
        assert other.size() == len(other.ranks)
        try:
            other.rank()
        except ValueError as e:
            assert f"rank {rank} is not part of process set {other.ranks}" in str(e), str(e)
        else:
            raise AssertionError("rank() on a set without this rank did not raise")
        assert str(even) == f"ProcessSet(process_set_id=1, ranks={even.ranks}, mpi_comm=None)"
        fresh = hvd.ProcessSet([1, 0])
        assert (fresh.ranks, fresh.process_set_id, fresh.size(), fresh.rank()) == \
            ([0, 1], None, None, None)
        assert fresh.included() is (rank in (0, 1))

    @add("add_dynamic")
    def _():
        low = hvd.add_process_set(low_ranks(size))  # a list: a new ProcessSet
        state["low"] = low
        assert isinstance(low, hvd.ProcessSet) and low.process_set_id == 3, str(low)
        assert low.ranks == low_ranks(size) and low.included() == (rank in low.ranks)
        if low.included():
            assert low.rank() == low.ranks.index(rank)

    @add("allreduce")
    def _():
        got = []
        for ps, ranks in sets_of_mine():
            x = value(rank)
            got.append((ranks, "Sum", hvd.allreduce(x, op=hvd.Sum, name="ar", process_set=ps)))
            got.append((ranks, "Max", hvd.allreduce(x, op=hvd.Max, name="ar.max",
                                                    process_set=ps)))
            got.append((ranks, "Average", hvd.allreduce(x.astype(np.float64), name="ar.avg",
                                                        process_set=ps)))
            got.append((ranks, "scaled", hvd.allreduce(x.astype(np.float64), op=hvd.Sum,
                                                       name="ar.scaled", prescale_factor=0.5,
                                                       postscale_factor=4.0, process_set=ps)))
        for ranks, op, out in got:
            xs = np.stack([value(g) for g in ranks])
            if op == "Sum":
                np.testing.assert_array_equal(out, xs.sum(0))
                assert out.dtype == np.int64
            elif op == "Max":
                np.testing.assert_array_equal(out, xs.max(0))
            elif op == "Average":
                np.testing.assert_allclose(out, xs.sum(0) / len(ranks), rtol=1e-12)
            else:
                np.testing.assert_allclose(out, xs.sum(0) * 2.0, rtol=1e-12)

    @add("allreduce_inplace_async")
    def _():
        bufs, handles = [], []
        for ps, ranks in sets_of_mine():
            b = value(rank).astype(np.int32)
            bufs.append((ranks, b))
            handles.append(hvd.allreduce_async_(b, op=hvd.Sum, name="inplace", process_set=ps))
            handles.append(hvd.allreduce_async(value(rank), op=hvd.Min, name="async",
                                               process_set=ps))
        outs = [hvd.synchronize(h) for h in handles]
        for i, (ranks, b) in enumerate(bufs):
            xs = np.stack([value(g) for g in ranks])
            np.testing.assert_array_equal(b, xs.sum(0).astype(np.int32))
            assert outs[2 * i] is b
            np.testing.assert_array_equal(outs[2 * i + 1], xs.min(0))

    @add("grouped_allreduce")
    def _():
        res = []
        for ps, ranks in sets_of_mine():
            xs = [value(rank, (3,)), value(rank, (2, 2)) * 2]
            res.append((ranks, hvd.grouped_allreduce(xs, op=hvd.Sum, name="grp",
                                                     process_set=ps), None))
            ys = [value(rank, (4,)), value(rank, (1,))]
            res.append((ranks, hvd.grouped_allreduce_(ys, op=hvd.Sum, name="grp.inplace",
                                                      process_set=ps), ys))
        for ranks, out, inplace in res:
            if inplace is None:
                want = [sum(value(g, (3,)) for g in ranks),
                        sum(value(g, (2, 2)) * 2 for g in ranks)]
            else:
                want = [sum(value(g, (4,)) for g in ranks), sum(value(g, (1,)) for g in ranks)]
                assert all(o is i for o, i in zip(out, inplace))
            for o, w in zip(out, want):
                np.testing.assert_array_equal(o, w)

    @add("allgather")
    def _():
        res = []
        for ps, ranks in sets_of_mine():
            x = np.full((rank + 1, 2), rank, np.int64)  # rows differ per rank
            res.append((ranks, hvd.allgather(x, name="ag", process_set=ps)))
        for ranks, out in res:
            want = np.concatenate([np.full((g + 1, 2), g, np.int64) for g in ranks])
            np.testing.assert_array_equal(out, want)

    @add("grouped_allgather")
    def _():
        res = []
        for ps, ranks in sets_of_mine():
            xs = [np.full((1,), rank, np.int32), np.full((rank % 2 + 1, 3), rank, np.float64)]
            res.append((ranks, hvd.grouped_allgather(xs, name="gag", process_set=ps)))
        for ranks, out in res:
            np.testing.assert_array_equal(out[0], np.array(ranks, np.int32))
            np.testing.assert_array_equal(
                out[1], np.concatenate([np.full((g % 2 + 1, 3), g, np.float64) for g in ranks]))

    @add("broadcast")
    def _():
        res = []
        for ps, ranks in sets_of_mine():
            root = ranks[-1]  # a rank of the job, not the set's first
            res.append((root, hvd.broadcast(value(rank), root, name="bc", process_set=ps)))
            b = value(rank)
            res.append((root, hvd.broadcast_(b, root, name="bc.inplace", process_set=ps)))
            h = hvd.broadcast_async(value(rank).astype(np.float32), root, name="bc.async",
                                    process_set=ps)
            res.append((root, hvd.synchronize(h)))
        for root, out in res:
            np.testing.assert_array_equal(out, value(root))

    @add("alltoall")
    def _():
        res = []
        for ps, ranks in sets_of_mine():
            i, n = ranks.index(rank), len(ranks)
            # set rank i sends i + j + 1 rows of 1000 * rank + j to set rank j
            x = np.concatenate([np.full((i + j + 1, 2), 1000 * rank + j, np.int64)
                                for j in range(n)])
            out, recv = hvd.alltoall(x, splits=[i + j + 1 for j in range(n)], name="a2a",
                                     process_set=ps)
            even_split = hvd.alltoall(np.arange(2 * n, dtype=np.int32) + 100 * rank,
                                      name="a2a.even", process_set=ps)
            res.append((ranks, i, out, recv, even_split))
        for ranks, j, out, recv, even_split in res:
            want = np.concatenate([np.full((i + j + 1, 2), 1000 * g + j, np.int64)
                                   for i, g in enumerate(ranks)])
            np.testing.assert_array_equal(out, want)
            np.testing.assert_array_equal(recv, [i + j + 1 for i in range(len(ranks))])
            np.testing.assert_array_equal(
                even_split, np.concatenate([np.arange(2 * j, 2 * j + 2) + 100 * g
                                            for g in ranks]))

    def blocks(total, n):
        per, extra = divmod(total, n)
        starts = [k * per + min(k, extra) for k in range(n + 1)]
        return [(starts[k], starts[k + 1]) for k in range(n)]

    @add("reducescatter")
    def _():
        res = []
        for ps, ranks in sets_of_mine():
            rows = 2 * len(ranks) + 1  # uneven: the first set rank gets an extra row
            x = value(rank, (rows, 2))
            res.append((ranks, rows, "Sum", hvd.reducescatter(x, op=hvd.Sum, name="rs",
                                                              process_set=ps)))
            res.append((ranks, rows, "Average", hvd.reducescatter(
                x.astype(np.float64), name="rs.avg", process_set=ps)))
        for ranks, rows, op, out in res:
            total = sum(value(g, (rows, 2)) for g in ranks)
            lo, hi = blocks(rows, len(ranks))[ranks.index(rank)]
            if op == "Sum":
                np.testing.assert_array_equal(out, total[lo:hi])
            else:
                np.testing.assert_allclose(out, total[lo:hi] / len(ranks), rtol=1e-12)

    @add("grouped_reducescatter")
    def _():
        res = []
        for ps, ranks in sets_of_mine():
            n = len(ranks)
            xs = [value(rank, (n, 3)), value(rank, (2 * n + 1,))]
            res.append((ranks, hvd.grouped_reducescatter(xs, op=hvd.Sum, name="grs",
                                                         process_set=ps)))
        for ranks, out in res:
            n, k = len(ranks), ranks.index(rank)
            t0 = sum(value(g, (n, 3)) for g in ranks)
            t1 = sum(value(g, (2 * n + 1,)) for g in ranks)
            np.testing.assert_array_equal(out[0], t0[k:k + 1])
            lo, hi = blocks(2 * n + 1, n)[k]
            np.testing.assert_array_equal(out[1], t1[lo:hi])

    @add("barrier_join")
    def _():
        low = state["low"]
        for ps, _ in sets_of_mine():
            hvd.barrier(process_set=ps)
            hvd.synchronize(hvd.barrier_async(process_set=ps))
        got = None
        if low.included():
            # low's first rank joins at once; the others' allreduce counts it as zeros
            if low.rank() == 0:
                hvd.join(process_set=low)
            else:
                got = hvd.allreduce(np.ones(3, np.int64), op=hvd.Sum, name="j",
                                    process_set=low)
                hvd.join(process_set=low)
        hvd.barrier()
        if got is not None:
            np.testing.assert_array_equal(got, np.full(3, len(low.ranks) - 1))

    @add("objects")
    def _():
        res = []
        for ps, ranks in sets_of_mine():
            root = ranks[-1]
            res.append((ranks, root,
                        hvd.broadcast_object({"from": rank}, root_rank=root, process_set=ps),
                        hvd.allgather_object((rank, "x" * rank), process_set=ps)))
        for ranks, root, b, g in res:
            assert b == {"from": root}, b
            assert g == [(r, "x" * r) for r in ranks], g

    @add("same_names_at_once")
    def _():
        # "grad" in every set this rank is in and in the whole job, all in flight
        # at once, submitted in a different order on every rank
        sets = sets_of_mine()
        order = list(range(len(sets)))
        order = order[rank % len(order):] + order[:rank % len(order)]
        handles = {}
        for k in order:
            ps, _ = sets[k]
            handles[k] = hvd.allreduce_async(np.full(4, rank + 1, np.int64), op=hvd.Sum,
                                             name="grad", process_set=ps)
        for k, (ps, ranks) in enumerate(sets):
            np.testing.assert_array_equal(hvd.synchronize(handles[k]),
                                          np.full(4, sum(g + 1 for g in ranks)))

    def raises(exc, pattern, fn):
        try:
            fn()
        except exc as e:
            if pattern not in str(e):
                raise AssertionError(f"{type(e).__name__} without {pattern!r}: {e}") from e
            return e
        raise AssertionError(f"expected {exc.__name__} ({pattern!r})")

    @add("not_registered")
    def _():
        loose = hvd.ProcessSet([0])
        raises(ValueError, "process set [0] is not registered",
               lambda: hvd.allreduce(np.ones(2), process_set=loose))
        raises(TypeError, "process_set must be an hvd.ProcessSet",
               lambda: hvd.allreduce(np.ones(2), process_set=[0, 1]))
        hvd.barrier()  # and the job still works

    @add("not_a_member")
    def _():
        msg = f"rank {rank} is not in process set {other.ranks} (id {other.process_set_id})"
        raises(ValueError, msg, lambda: hvd.allreduce(np.ones(2), process_set=other))
        raises(ValueError, msg, lambda: hvd.allgather_async(np.ones(2), process_set=other))
        raises(ValueError, msg, lambda: hvd.barrier(process_set=other))
        got = hvd.allreduce(np.ones(2), op=hvd.Sum, name="member.ok", process_set=mine)
        np.testing.assert_array_equal(got, np.full(2, len(mine.ranks)))

    @add("root_outside_set")
    def _():
        outside = other.ranks[0]
        raises(ValueError, f"root_rank {outside} is not in process set {mine.ranks}",
               lambda: hvd.broadcast(np.ones(2), outside, process_set=mine))
        raises(ValueError, "root_rank", lambda: hvd.broadcast_object(1, outside,
                                                                     process_set=mine))
        hvd.barrier()

    @add("bad_ranks")
    def _():
        # checked before any collective, the same way on every rank
        for bad in ([0, 1.5], ["0"], [True]):
            raises(ValueError, "ProcessSet takes a list of ranks (ints)",
                   lambda: hvd.ProcessSet(bad))
        raises(ValueError, "ProcessSet takes a list of ranks", lambda: hvd.ProcessSet(3))
        # refused by the library on every rank together
        e = raises(hvd.InvalidArgumentError, "rank list", lambda: hvd.add_process_set([0, 0]))
        assert "lists rank 0 twice" in str(e), str(e)
        raises(hvd.InvalidArgumentError, f"rank {size} is out of range",
               lambda: hvd.add_process_set([0, size]))
        raises(hvd.InvalidArgumentError, "rank list", lambda: hvd.add_process_set([]))
        hvd.barrier()

    @add("mismatched_lists")
    def _():
        mismatched = [0, 1 + rank % 2] if size > 2 else [rank]
        raises(hvd.MismatchError, "ranks disagree",
               lambda: hvd.add_process_set(mismatched))
        assert hvd.allreduce(np.ones(1), op=hvd.Sum, name="after.mismatch")[0] == size

    @add("duplicate_set")
    def _():
        e = raises(ValueError, "attempted to add a duplicate process set",
                   lambda: hvd.add_process_set(list(even.ranks)))
        assert "(id 1)" in str(e), str(e)
        raises(ValueError, "already registered", lambda: hvd.add_process_set(odd))
        if mine is even:
            got = hvd.allreduce(np.ones(1), op=hvd.Sum, name="after.dup", process_set=even)
            assert got[0] == len(even.ranks)

    @add("remove")
    def _():
        low = state["low"]
        assert hvd.remove_process_set(low) is True
        assert low.process_set_id is None and low.ranks == low_ranks(size)
        assert (low.size(), low.rank()) == (None, None)
        raises(ValueError, f"process set {low.ranks} was removed",
               lambda: hvd.allreduce(np.ones(1), process_set=low))
        assert hvd.remove_process_set(low) is False  # already removed
        assert hvd.remove_process_set(hvd.global_process_set) is False
        assert hvd.remove_process_set(hvd.ProcessSet([0])) is False  # never registered
        # the refused registrations above took no id: this one is the 4th
        ends = hvd.add_process_set(hvd.ProcessSet([size - 1, 0]))  # sorted, as in Horovod
        assert (ends.ranks, ends.process_set_id) == ([0, size - 1], 4), str(ends)
        if ends.included():
            assert hvd.allreduce(np.ones(1), op=hvd.Sum, process_set=ends)[0] == 2
        assert hvd.remove_process_set(ends) is True
        again = hvd.add_process_set(ends)  # the same object, registered anew
        assert again is ends and ends.process_set_id == 5, str(ends)  # ids are not reused
        if ends.included():
            got = hvd.allreduce(np.full(2, rank), op=hvd.Sum, name="again", process_set=ends)
            np.testing.assert_array_equal(got, np.full(2, size - 1))
        assert hvd.remove_process_set(ends) is True

    @add("init_dynamic")
    def _():
        hvd.init(process_sets="dynamic")  # a second reference; sets stay
        try:
            assert mine.process_set_id in (1, 2)
            for bad in ("static", 5):
                raises((ValueError, TypeError), "process_sets must be",
                       lambda: hvd.init(process_sets=bad))
        finally:
            hvd.shutdown()
        assert hvd.is_initialized()
        assert hvd.allreduce(np.ones(1), op=hvd.Sum, process_set=mine)[0] == len(mine.ranks)

    def registered():
        from hvd._api import DEFAULT
        return [(p.process_set_id, p.ranks) for p in DEFAULT.process_sets()]

    @add("pickled")
    def _():
        import pickle
        loose = hvd.ProcessSet([size - 1, 0])
        sent = {"even": even, "odd": odd, "global": hvd.global_process_set, "loose": loose}
        got = hvd.broadcast_object(sent if rank == 0 else None, root_rank=0, name="ps.pickled")
        # every rank's own sets, in rank order
        theirs = hvd.allgather_object(mine, name="ps.pickled.mine")
        out = hvd.allreduce(np.full(3, rank + 1, np.int64), op=hvd.Sum, name="ps.pickled.ar",
                            process_set=theirs[rank])  # used as received
        np.testing.assert_array_equal(out, np.full(3, sum(g + 1 for g in mine.ranks)))
        assert got["even"] is even and got["odd"] is odd, got
        assert got["global"] is hvd.global_process_set
        assert [p.process_set_id for p in theirs] == [1 + g % 2 for g in range(size)], theirs
        assert all(p is (even if g % 2 == 0 else odd) for g, p in enumerate(theirs)), theirs
        new = got["loose"]  # not registered anywhere: a ProcessSet of its ranks
        assert new.process_set_id is None and new.ranks == [0, size - 1], str(new)
        assert rank != 0 or new is not loose
        added = hvd.add_process_set(new)
        assert added is new and new.process_set_id is not None, str(new)
        if new.included():
            got_sum = hvd.allreduce(np.full(2, rank, np.int64), op=hvd.Sum, name="ps.pickled.new",
                                    process_set=new)
            np.testing.assert_array_equal(got_sum, np.full(2, size - 1))
        # once registered, rank 0's pickle of its own object is the registered one everywhere
        again = hvd.broadcast_object(new if rank == 0 else None, root_rank=0,
                                     name="ps.pickled.again")
        assert again is new, (str(again), str(new))
        assert pickle.loads(pickle.dumps(new)) is new
        assert hvd.remove_process_set(new) is True
        back = pickle.loads(pickle.dumps(new))
        assert back is not new and back.process_set_id is None and back.ranks == new.ranks

    @add("init_rolls_back")
    def _():
        import copy
        before = registered()
        firsts = [hvd.ProcessSet([0, 1])] + ([hvd.ProcessSet([1, 2])] if size > 2 else [])
        # bad last list: the library refuses it on every rank, after the first ones were made
        e = raises(hvd.InvalidArgumentError, f"rank {size} is out of range",
                   lambda: hvd.init(process_sets=firsts + [hvd.ProcessSet([0, size])]))
        assert hvd.is_initialized() and registered() == before, (registered(), before, e)
        for ps in firsts:
            assert ps.process_set_id is None, str(ps)
            raises(ValueError, "was removed again because registering a later process set",
                   lambda: hvd.allreduce(np.ones(1), process_set=ps))
        # a duplicate later in the list: refused (on every rank) once made, the first removed
        raises(ValueError, "attempted to add a duplicate process set",
               lambda: hvd.init(process_sets=[[0, 1], copy.copy([0, 1])]))
        assert hvd.is_initialized() and registered() == before, registered()
        # the job goes on, and the rolled back sets can be registered again
        out = hvd.allreduce(np.full(2, rank + 1, np.int64), op=hvd.Sum, name="after.rollback")
        np.testing.assert_array_equal(out, np.full(2, size * (size + 1) // 2))
        again = hvd.add_process_set(firsts[0])
        ids = hvd.allgather_object(again.process_set_id, name="rollback.ids")
        assert len(set(ids)) == 1, ids  # the same id on every rank
        if again.included():
            got = hvd.allreduce(np.full(2, rank + 1, np.int64), op=hvd.Sum, name="again",
                                process_set=again)
            np.testing.assert_array_equal(got, np.full(2, 3))
        assert hvd.remove_process_set(again) is True
        assert registered() == before, registered()

    @add("shutdown_drops_sets")
    def _():
        pass  # checked in main(), after the last shutdown

    assert [n for n, _ in checks] == CHECKS, "check list out of sync"
    return checks


def main():
    import hvd
    from common import run_checks, write

    size = int(sys.argv[1])  # the sets are made before init, as in Horovod's static sets
    even = hvd.ProcessSet(range(0, size, 2))
    odd = hvd.ProcessSet(reversed(range(1, size, 2)))  # unsorted: ProcessSet sorts
    hvd.init(process_sets=[even, odd])
    assert hvd.size() == size
    rank = hvd.rank()
    results = run_checks(make_checks(hvd, size, rank, even, odd), rank)
    # Not before every rank is done: a rank that shuts down stops the sets of
    # the others too (operations still running on them fail with AbortedError).
    hvd.barrier()
    hvd.shutdown()
    err = None
    try:
        assert not hvd.is_initialized()
        for ps in (even, odd):
            assert ps.process_set_id is None, str(ps)
            try:
                hvd.allreduce(np.ones(1), process_set=ps)
            except ValueError as e:
                assert "dropped when hvd.shutdown()" in str(e), str(e)
            else:
                raise AssertionError("an op on a set after shutdown did not raise")
    except BaseException:  # noqa: B902 - reported like any check
        import traceback
        err = traceback.format_exc()
    results["shutdown_drops_sets"] = err
    write(rank, {"checks": results})


if __name__ == "__main__":
    main()
