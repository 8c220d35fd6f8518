"""Process sets on explicit hvd.Context objects, ranks as threads of this
process (bootstrapped through a Python out-of-band allgather):
Context.split / Context.process_set (the set's own context, with ranks and
broadcast roots within it), add_process_set / process_set= on a Context,
and bad lists failing on every rank together."""

import threading

import numpy as np
import pytest

import harness  # noqa: F401  (puts the package on sys.path)
import hvd

TIMEOUT_S = 60


def run_ranks(size, body):
    """body(rank, ctx) on `size` thread ranks, each with its own hvd.Context;
    returns the results in rank order, raising the first failure."""
    barrier = threading.Barrier(size)
    slots = [None] * size
    results = [None] * size

    def oob_for(rank):
        def allgather(data):
            slots[rank] = data
            barrier.wait(TIMEOUT_S)
            out = b"".join(slots)
            barrier.wait(TIMEOUT_S)
            return out
        return allgather

    def run(rank):
        try:
            with hvd.Context(rank=rank, size=size, oob_allgather=oob_for(rank),
                             start_timeout_s=30, stall_shutdown_s=30) as ctx:
                results[rank] = ("ok", body(rank, ctx))
        except BaseException as e:  # noqa: B902 - reported below
            results[rank] = ("error", e)

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), "a rank did not finish"
    for r, (kind, value) in enumerate(results):
        if kind == "error":
            raise AssertionError(f"rank {r} failed: {value!r}") from value
    return [value for _, value in results]


def test_split_and_explicit_list():
    def body(rank, ctx):
        # halves by parity, ordered by descending rank within each (key)
        half = ctx.split(rank % 2, key=-rank)
        # rank 3 joins no set
        low = ctx.split(0 if rank < 3 else hvd.UNDEFINED_COLOR)
        pair = ctx.process_set([1, 2])
        out = {"half": (half.rank(), half.size(), half.parent_ranks())}
        s = half.allreduce(np.full(2, rank + 1, np.int64), op=hvd.Sum, name="x")
        # broadcast roots of a set's own context are ranks within the set
        b = half.broadcast(np.full(1, rank, np.int64), root_rank=0, name="b")
        g = half.allgather(np.full(1, rank, np.int64), name="g")
        out["half_ops"] = (s.tolist(), int(b[0]), g.tolist())
        if low is not None:
            out["low"] = (low.rank(), low.size(),
                          low.allreduce(np.ones(1, np.int64), op=hvd.Sum, name="x")[0].item())
        else:
            out["low"] = None
        if pair is not None:
            o = pair.broadcast_object(("from", rank), root_rank=1)
            out["pair"] = (pair.rank(), pair.parent_ranks(), o)
        else:
            out["pair"] = None
        # the parent's own "x" is a different operation from the sets'
        out["parent"] = ctx.allreduce(np.ones(1, np.int64), op=hvd.Sum, name="x")[0].item()
        for child in (half, low, pair):
            if child is not None:
                with pytest.raises(hvd.UnsupportedError, match="process sets of process sets"):
                    child.split(0)
                child.close()
        with pytest.raises(hvd.AbortedError, match="destroyed"):
            half.allreduce(np.ones(1))
        return out

    got = run_ranks(4, body)
    for r in range(4):
        members = [3, 1] if r % 2 else [2, 0]
        want_sum = sum(m + 1 for m in members)
        assert got[r]["half"] == (members.index(r), 2, members), got[r]
        assert got[r]["half_ops"] == ([want_sum] * 2, members[0], members), got[r]
        assert got[r]["low"] == ((r, 3, 3) if r < 3 else None), got[r]
        assert got[r]["pair"] == ((r - 1, [1, 2], ("from", 2)) if r in (1, 2) else None)
        assert got[r]["parent"] == 4


def test_context_registry_and_process_set_argument():
    def body(rank, ctx):
        ps = ctx.add_process_set([2, 0])
        out = {"id": ps.process_set_id, "ranks": ps.ranks, "in": ps.included()}
        if ps.included():
            # process_set= on the Context's collectives: roots are the Context's ranks
            out["sum"] = ctx.allreduce(np.full(1, rank, np.int64), op=hvd.Sum,
                                       process_set=ps)[0].item()
            out["bc"] = ctx.broadcast(np.full(1, rank, np.int64), root_rank=2,
                                      process_set=ps)[0].item()
            out["rank"] = ps.rank()
        else:
            with pytest.raises(ValueError, match=f"rank {rank} is not in process set"):
                ctx.allreduce(np.ones(1), process_set=ps)
        # a set of another context is refused
        with pytest.raises(ValueError, match="is not registered"):
            ctx.allreduce(np.ones(1), process_set=hvd.ProcessSet([0]))
        assert ctx.process_sets() == [ps]
        assert ctx.remove_process_set(ps) is True
        assert ctx.process_sets() == []
        keep = ctx.add_process_set([0, 1])  # dropped when the Context closes
        out["keep"] = keep.process_set_id
        return out, keep

    got = run_ranks(3, body)
    for r, (out, keep) in enumerate(got):
        assert (out["id"], out["ranks"], out["in"]) == (1, [0, 2], r in (0, 2)), out
        if r in (0, 2):
            assert (out["sum"], out["bc"], out["rank"]) == (2, 2, [0, 2].index(r)), out
        assert out["keep"] == 2
        assert keep.process_set_id is None
        with pytest.raises(ValueError, match="was dropped when its hvd.Context was closed"):
            hvd.allreduce(np.ones(1), process_set=keep)


def test_bad_lists_fail_on_every_rank():
    def body(rank, ctx):
        errors = []
        for ranks in ([1, 0], [0, 0], [0, 5], []):  # unsorted, duplicate, out of range, empty
            try:
                ctx.process_set(ranks)
            except hvd.InvalidArgumentError as e:
                errors.append(str(e))
        try:  # different lists on different ranks
            ctx.process_set([0, 1 + rank % 2])
        except hvd.MismatchError as e:
            errors.append(str(e))
        try:
            ctx.split(-2)
        except hvd.InvalidArgumentError as e:
            errors.append(str(e))
        with pytest.raises(TypeError, match="color must be an int"):
            ctx.split(1.0)
        # nothing was made, and the context still works
        ok = ctx.allreduce(np.ones(1, np.int64), op=hvd.Sum, name="after")[0].item()
        return errors, ok

    got = run_ranks(3, body)
    for r, (errors, ok) in enumerate(got):
        assert ok == 3
        assert len(errors) == 6, errors
        assert "not sorted ascending" in errors[0], errors[0]
        assert "lists rank 0 twice" in errors[1], errors[1]
        assert "rank 5 is out of range" in errors[2], errors[2]
        assert "ranks disagree" in errors[4], errors[4]
        assert "-2" in errors[5], errors[5]
