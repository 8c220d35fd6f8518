"""hvd.ProcessSet in one process: pickling (the ranks only; the registered
set with those ranks back where there is one, else an unregistered set to
add; also in a process without hvd), and the all-or-none registration of
several sets in one call (Registry.add_all, behind hvd.init(process_sets=...))
against a fake root whose set creation fails on demand. The same with real
ranks: test_mp_process_sets.py and test_mp_process_sets_mpi.py."""

import concurrent.futures
import copy
import multiprocessing
import pickle

import numpy as np
import pytest

import harness  # noqa: F401  (puts the package on sys.path)
import hvd
import hvd._c_api as C
from elastic_helpers import FakeBackend
from hvd._process_sets import Registry

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_pickle_unregistered(protocol):
    ps = hvd.ProcessSet([2, 0, 1])
    back = pickle.loads(pickle.dumps(ps, protocol=protocol))
    assert back is not ps and isinstance(back, hvd.ProcessSet)
    assert (back.ranks, back.process_set_id, back.size(), back.rank()) == ([0, 1, 2], None,
                                                                           None, None)
    assert copy.deepcopy(ps) is ps and copy.copy(ps) is ps  # a handle: copies share it


def test_pickle_holds_the_ranks_only():
    ps = hvd.ProcessSet([3, 1])
    ps._gone = "was removed (hvd.remove_process_set)"  # process-local: not carried
    back = pickle.loads(pickle.dumps(ps))
    assert back._gone is None and back._registry is None and back._ctx is None
    assert pickle.dumps(hvd.ProcessSet([1, 3])) == pickle.dumps(ps)


def test_pickle_registered(hvd_world):
    ps = hvd.add_process_set([0])
    try:
        for protocol in PROTOCOLS:
            back = pickle.loads(pickle.dumps(ps, protocol=protocol))
            assert back is ps and back.process_set_id == ps.process_set_id > 0
        # inside other objects too, and usable at once
        got = pickle.loads(pickle.dumps({"sets": [ps, hvd.global_process_set]}))
        assert got["sets"][0] is ps and got["sets"][1] is hvd.global_process_set
        out = hvd.allreduce(np.array([2.5, 4.0]), op=hvd.Sum, process_set=got["sets"][0])
        np.testing.assert_array_equal(out, [2.5, 4.0])
        # an unregistered set with the same ranks also unpickles as the registered one
        assert pickle.loads(pickle.dumps(hvd.ProcessSet([0]))) is ps
    finally:
        assert hvd.remove_process_set(ps) is True
    back = pickle.loads(pickle.dumps(ps))  # removed: a new, unregistered set to add again
    assert back is not ps and back.process_set_id is None and back.ranks == [0]
    added = hvd.add_process_set(back)
    try:
        assert added is back and back.process_set_id > 0
        out = hvd.allreduce(np.array([7], np.int64), op=hvd.Sum, process_set=back)
        assert out.tolist() == [7]
    finally:
        hvd.remove_process_set(back)


def test_unpickled_before_init_then_used_in_init():
    data = pickle.dumps(hvd.ProcessSet([0]))
    assert not hvd.is_initialized()
    ps = pickle.loads(data)
    assert ps.process_set_id is None
    hvd.init(process_sets=[ps])
    try:
        assert ps.process_set_id is not None and ps.size() == 1 and ps.rank() == 0
        assert pickle.loads(data) is ps
    finally:
        while hvd.is_initialized():
            hvd.shutdown()
    assert pickle.loads(data) is not ps  # dropped at shutdown


def _describe_in_child(data):
    import pickle as p
    ps = p.loads(data)
    return type(ps).__module__, ps.ranks, ps.process_set_id


def test_unpickled_in_another_process(hvd_world):
    ps = hvd.add_process_set([0])
    try:
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
            got = pool.submit(_describe_in_child, pickle.dumps(ps)).result(timeout=120)
        # a process without hvd initialized: an unregistered set of the same ranks
        assert got == ("hvd._process_sets", [0], None)
    finally:
        hvd.remove_process_set(ps)


def test_global_set_pickles_as_the_global_set():
    for protocol in PROTOCOLS:
        assert pickle.loads(pickle.dumps(hvd.global_process_set, protocol=protocol)) \
            is hvd.global_process_set


# -- several sets in one call: all or none ----------------------------------------------


def invalid(msg="rank 9 is out of range"):
    return C.InvalidArgumentError(C.HVD_ERR_INVALID_ARGUMENT, msg)


def registry(rank=0, size=4):
    b = FakeBackend(rank=rank, size=size, elastic=False)
    return b, b.registry()


def closes(log):
    return [e[1] for e in log if e[0] == "close"]


def failing_at(reg, n, close_error=None):
    """Makes reg's n-th set creation from now fail (as the library fails it
    on every rank); with close_error, closing a made context raises it."""
    real = type(reg.root)._make_set
    calls = []

    def make(ranks):
        calls.append(list(ranks))
        if len(calls) == n:
            raise invalid()
        ctx = real(reg.root, ranks)
        if ctx is not None and close_error is not None:
            def close():
                ctx.closed = True
                raise close_error
            ctx.close = close
        return ctx

    reg.root._make_set = make
    return calls


@pytest.mark.parametrize("rank", [0, 2])
def test_add_all_rolls_back_what_it_registered(rank):
    b, reg = registry(rank)
    kept = reg.add([0, 3])  # an earlier call: stays
    calls = failing_at(reg, 3)
    a, c = hvd.ProcessSet([0, 1]), hvd.ProcessSet([2, 3])
    with pytest.raises(C.InvalidArgumentError, match="out of range"):
        reg.add_all([a, c, [0, 9]])
    assert calls == [[0, 1], [2, 3], [0, 9]]
    assert reg.live() == [kept] and kept.process_set_id == 1
    for ps in (a, c):
        assert ps.process_set_id is None and ps._ctx is None
        with pytest.raises(ValueError, match="was removed again because registering a later"):
            ps._hvd_bind(reg.root)
    # each member closed its set's context (rank 0: [0, 1]; rank 2: [2, 3])
    assert closes(b.log) == [(0, 1) if rank == 0 else (2, 3)]
    # ids are not reused; the sets can be registered again
    assert reg.add(a).process_set_id == 4


def test_add_all_duplicate_later_in_the_list():
    b, reg = registry()
    with pytest.raises(ValueError, match="duplicate process set"):
        reg.add_all([[0, 1], [1, 2], [0, 1]])
    assert reg.live() == []
    # [0, 1]: rank 0's context closed twice (the refused duplicate, then the rollback)
    assert closes(b.log) == [(0, 1), (0, 1)]


def test_add_all_checks_every_item_before_registering():
    b, reg = registry()
    with pytest.raises(ValueError, match="list of ranks"):
        reg.add_all([[0, 1], 3.5])
    assert reg.live() == [] and b.log == []  # nothing made


def test_rollback_survives_a_failing_close():
    b, reg = registry()

    class Boom(Exception):
        pass

    failing_at(reg, 3, close_error=Boom("the transport is gone"))
    first, second = hvd.ProcessSet([0, 1]), hvd.ProcessSet([0, 2])
    with pytest.raises(C.InvalidArgumentError):  # the first error, not the close's
        reg.add_all([first, second, [0, 3]])
    assert reg.live() == [] and first.process_set_id is None and second.process_set_id is None
