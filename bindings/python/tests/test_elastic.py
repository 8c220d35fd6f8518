"""hvd.elastic's Python logic against a fake default context: State
commit/restore/sync, the run loop (retry after HorovodInternalError and
HostsUpdatedInterrupt, reset retries), process sets re-made or dropped after a
reset, ElasticSampler's exact shards before and after re-sharding, TorchState,
and the DistributedOptimizer's reset hook. The real elastic jobs (hvdrun
--min-np ...) are in test_mp_elastic.py."""

import copy
import ctypes
import importlib
import os
import shutil
import subprocess
import warnings

import pytest

import harness

torch = pytest.importorskip("torch", reason="torch is not installed (requirements-test.txt)")

import hvd  # noqa: E402
import hvd._c_api as C  # noqa: E402
import hvd._ops as _ops  # noqa: E402
import hvd.elastic as E  # noqa: E402
import hvd.torch as hvdt  # noqa: E402
from hvd._process_sets import ProcessSet  # noqa: E402
from hvd.torch.elastic import ElasticSampler, TorchState  # noqa: E402
from elastic_helpers import FakeBackend, FakeRoot, changed, fake, names  # noqa: E402,F401


# ---------------------------------------------------------------------------
# Modules and the C binding.
# ---------------------------------------------------------------------------


def test_modules_are_horovods():
    assert importlib.import_module("hvd.elastic") is hvd.elastic
    assert importlib.import_module("hvd.torch.elastic") is hvdt.elastic
    for name in ("run", "State", "ObjectState", "HostsUpdatedInterrupt"):
        assert getattr(hvdt.elastic, name) is getattr(hvd.elastic, name), name
    assert hvdt.elastic.TorchState is TorchState
    assert hvd.HostsUpdatedInterrupt is E.HostsUpdatedInterrupt
    ns = {}
    exec("from hvd.torch.elastic import TorchState, ElasticSampler, run", ns)
    assert ns["run"] is E.run


def test_membership_changed_is_horovod_internal_error():
    err = C.make_error(C.HVD_ERR_MEMBERSHIP_CHANGED, "peer 1 left")
    assert type(err) is C.MembershipChangedError is hvd.MembershipChangedError
    assert isinstance(err, hvd.HorovodInternalError) and err.status == -14
    assert "HVD_ERR_MEMBERSHIP_CHANGED" in str(err)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to read the layout from")
def test_membership_struct_layout_matches_c(tmp_path):
    header = os.path.join(harness.REPO, "include", "hvd.h")
    if "hvd_membership_t" not in open(header).read():
        pytest.skip("include/hvd.h does not declare hvd_membership_t yet")
    src = tmp_path / "m.c"
    src.write_text('#include <stddef.h>\n#include <stdio.h>\n#include "hvd.h"\n'
                   "int main(void) { printf(\"%zu %zu %zu %zu %zu\\n\", sizeof(hvd_membership_t),"
                   " offsetof(hvd_membership_t, struct_size), offsetof(hvd_membership_t, elastic),"
                   " offsetof(hvd_membership_t, hosts_updated), offsetof(hvd_membership_t, epoch));"
                   " return 0; }\n")
    exe = tmp_path / "m"
    subprocess.run(["cc", "-std=c99", "-I", os.path.dirname(header), str(src), "-o", str(exe)],
                   check=True)
    got = [int(x) for x in subprocess.run([str(exe)], check=True, stdout=subprocess.PIPE)
           .stdout.split()]
    M = C.HvdMembership
    assert got == [ctypes.sizeof(M), M.struct_size.offset, M.elastic.offset,
                   M.hosts_updated.offset, M.epoch.offset]
    assert C.HvdMembership().struct_size == ctypes.sizeof(M)


def test_old_library_gives_a_clear_error_only_when_used(monkeypatch):
    monkeypatch.setattr(C, "MISSING", C.MISSING + ["hvd_context_reset",
                                                   "hvd_context_membership"])
    monkeypatch.setattr(E, "_backend", E._DefaultBackend())
    state = E.ObjectState(epoch=1)  # making a state needs nothing from the library
    state.save()
    with pytest.raises(hvd.UnsupportedError, match="elastic jobs.*predates them"):
        E.membership()
    with pytest.raises(hvd.UnsupportedError, match="hvd_context_membership"):
        state.commit()
    with pytest.raises(hvd.UnsupportedError, match="hvd_context_reset"):
        E._reset_context()


# ---------------------------------------------------------------------------
# State and ObjectState.
# ---------------------------------------------------------------------------


def test_object_state_commit_restore_keeps_copies(fake):
    s = E.ObjectState(epoch=0, seen=[1])
    s.epoch, s.seen = 4, [1, 2]
    s.commit()
    assert names(fake.log, "any") == [("any", "elastic.hosts_updated", False)]
    s.epoch = 9
    s.seen.append(3)  # changed in place: the committed copy must not change
    s.restore()
    assert (s.epoch, s.seen) == (4, [1, 2])
    s.seen.append(5)
    s.restore()
    assert s.seen == [1, 2]


def test_object_state_sync_takes_rank0s_saved_values(fake):
    fake.r = 1
    s = E.ObjectState(epoch=3, batch=7)
    fake.root_objects["elastic.object_state"] = {"epoch": 5, "batch": 0}
    s.batch = 99  # not committed: sync sends the saved values, rank 0's win
    s.sync()
    assert (s.epoch, s.batch) == (5, 0)
    s.batch = 2
    s.restore()  # the synced values are the new saved ones
    assert s.batch == 0


def test_object_state_with_horovods_bcast_object_signature(fake):
    got = []
    s = E.ObjectState(bcast_object=lambda obj: got.append(obj) or {"x": 2}, get_rank=lambda: 0,
                      x=1)
    s.sync()
    assert got == [{"x": 1}] and s.x == 2


def test_commit_saves_then_raises_hosts_updated(fake):
    s = E.ObjectState(step=1)
    s.step = 2
    fake.hosts_updated = True
    with pytest.raises(E.HostsUpdatedInterrupt) as e:
        s.commit()
    assert e.value.skip_sync is False
    # the ranks agree through the collective, also when this rank saw it
    assert names(fake.log, "any") == [("any", "elastic.hosts_updated", True)]
    s.step = 3
    s.restore()
    assert s.step == 2  # saved before the interrupt


def test_hosts_updated_seen_by_another_rank_interrupts_every_rank(fake):
    s = E.ObjectState(step=1)
    fake.others_hosts_updated = True
    with pytest.raises(E.HostsUpdatedInterrupt):
        s.commit()
    assert names(fake.log, "any") == [("any", "elastic.hosts_updated", False)]


def test_commit_outside_an_elastic_job_is_local(fake):
    fake.elastic = False
    fake.others_hosts_updated = True  # would interrupt if the ranks were asked
    s = E.ObjectState(step=1)
    s.commit()
    assert names(fake.log, "any") == []


# ---------------------------------------------------------------------------
# The run loop.
# ---------------------------------------------------------------------------


def test_run_restores_resets_and_retries_after_internal_error(fake):
    fake.resets = [(0, 2)]
    s = E.ObjectState(step=0)
    order = []
    s.register_reset_callbacks([lambda: order.append(("cb1", E._backend.size())),
                                lambda: order.append(("cb2",))])
    calls = []

    @E.run
    def train(state, total, tag=None):
        calls.append((state.step, E._backend.size(), tag))
        while state.step < total:
            state.step += 1
            if state.step % 2 == 0:
                state.commit()
            if state.step == 5 and len(calls) == 1:
                raise changed()
        return state.step

    assert train(s, 8, tag="t") == 8
    # first round from 0; after the failure at 5 the state went back to 4
    assert calls == [(0, 3, "t"), (4, 2, "t")]
    assert order == [("cb1", 2), ("cb2",)]
    kinds = [e[0] for e in fake.log if e[0] in ("bcast", "reset", "after_reset")]
    assert kinds == ["bcast", "reset", "after_reset", "bcast"]


class RecordingState(E.State):
    def __init__(self, log):
        super().__init__()
        self.log = log

    def save(self):
        self.log.append(("save",))

    def restore(self):
        self.log.append(("restore",))

    def sync(self):
        self.log.append(("sync",))

    def reset(self):
        self.log.append(("state.reset",))


@pytest.mark.parametrize("error", ["internal", "hosts"])
def test_run_order_of_calls(fake, error):
    fake.resets = [(0, 2)]
    s = RecordingState(fake.log)
    s.register_reset_callbacks([lambda: fake.log.append(("callback",))])
    rounds = []

    @E.run
    def train(state):
        rounds.append(1)
        fake.log.append(("func",))
        if len(rounds) == 1:
            if error == "internal":
                raise changed()
            fake.hosts_updated = True
            state.commit()
        return 7

    assert train(s) == 7
    got = [e[0] for e in fake.log if e[0] not in ("membership", "any")]
    middle = ["restore"] if error == "internal" else ["save"]
    assert got == ["sync", "func", *middle, "reset", "after_reset", "state.reset", "callback",
                   "sync", "func"]


def test_run_after_hosts_updated_resets_without_restoring(fake):
    fake.resets = [(1, 4)]
    s = E.ObjectState(step=0)
    calls = []

    @E.run
    def train(state):
        calls.append(state.step)
        while state.step < 6:
            state.step += 1
            if state.step == 3 and len(calls) == 1:
                fake.hosts_updated = True
            state.commit()
        return "done"

    assert train(s) == "done"
    assert calls == [0, 3]  # resumed at the commit that raised, nothing undone
    assert [e[0] for e in fake.log if e[0] in ("bcast", "reset")] == ["bcast", "reset", "bcast"]
    assert (fake.r, fake.n) == (1, 4)


def test_run_skip_sync_from_the_interrupt(fake):
    fake.resets = [(0, 2)]
    s = E.ObjectState(x=0)
    rounds = []

    @E.run
    def train(state):
        rounds.append(1)
        if len(rounds) == 1:
            raise E.HostsUpdatedInterrupt(skip_sync=True)

    train(s)
    assert [e[0] for e in fake.log if e[0] in ("bcast", "reset")] == ["bcast", "reset"]


def test_run_outside_an_elastic_job_lets_the_error_through(fake):
    fake.elastic = False
    s = E.ObjectState(x=0)

    @E.run
    def train(state):
        raise changed("transport failed")

    with pytest.raises(C.MembershipChangedError, match="transport failed"):
        train(s)
    assert names(fake.log, "reset") == []


def test_run_retries_a_reset_that_lost_a_peer_again(fake):
    fake.resets = [changed("lost peer while forming"), (0, 2)]
    s = E.ObjectState(x=0)
    rounds = []

    @E.run
    def train(state):
        rounds.append(E._backend.size())
        if len(rounds) == 1:
            raise changed()

    train(s)
    assert rounds == [3, 2] and len(names(fake.log, "reset")) == 2


def test_run_stops_when_the_launcher_ends_the_worker(fake):
    fake.resets = [changed("hvd_context_reset: the launcher ends this worker (h:0:0): fewer "
                           "workers than --min-np 2")]
    s = E.ObjectState(x=0)

    @E.run
    def train(state):
        raise changed()

    with pytest.raises(C.MembershipChangedError, match="min-np"):
        train(s)
    assert len(names(fake.log, "reset")) == 1


def test_run_gives_up_after_max_failed_resets(fake, monkeypatch):
    monkeypatch.setattr(E, "MAX_RESET_ATTEMPTS", 3)
    fake.resets = [changed(f"again {i}") for i in range(5)]
    s = E.ObjectState(x=0)

    @E.run
    def train(state):
        raise changed()

    with pytest.raises(C.MembershipChangedError, match="3 resets in a row failed.*again 2"):
        train(s)
    assert len(names(fake.log, "reset")) == 3


def test_other_errors_are_not_retried(fake):
    s = E.ObjectState(x=0)

    @E.run
    def train(state):
        raise ValueError("bug in the training function")

    with pytest.raises(ValueError, match="bug"):
        train(s)
    assert names(fake.log, "reset") == []


# ---------------------------------------------------------------------------
# Process sets after a reset.
# ---------------------------------------------------------------------------


def test_process_sets_remade_or_dropped_after_reset(fake):
    reg = fake.registry()
    fake.r = 1
    a = reg.add(ProcessSet([0, 1]))
    b = reg.add(ProcessSet([1, 2]))
    c = reg.add(ProcessSet([0, 2]))
    d = reg.add(ProcessSet([0]))
    old_a, old_b = a._ctx, b._ctx
    assert c._ctx is None and d._ctx is None  # rank 1 is not in them
    fake.log.clear()
    fake.resets = [(0, 2)]  # rank 2 is gone; this worker is rank 0 now
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        E._reset_context()
    dropped = sorted(str(x.message) for x in w)
    assert len(dropped) == 2 and "[0, 2]" in dropped[0] and "[1, 2]" in dropped[1], dropped
    assert all("job of 2 ranks" in m for m in dropped)
    # the old contexts were destroyed, then the sets that fit made again, in id order
    assert old_a.closed and old_b.closed
    assert names(fake.log, "make_set") == [("make_set", (0, 1)), ("make_set", (0,))]
    assert reg.live() == [a, d] and (a.process_set_id, d.process_set_id) == (1, 4)
    assert a._ctx is not None and a._ctx is not old_a and d._ctx is not None
    for gone in (b, c):
        assert gone.process_set_id is None
        with pytest.raises(ValueError, match="dropped by an elastic reset"):
            gone._hvd_bind(reg.root)
    assert a._hvd_bind(reg.root) == (a._ctx, a)


def test_process_sets_made_again_after_a_failure_while_making_them(fake):
    reg = fake.registry()
    a = reg.add(ProcessSet([0, 1]))
    b = reg.add(ProcessSet([0, 2]))
    fake.resets = [(0, 3), (0, 3)]
    calls = {"n": 0}
    orig = FakeRoot._make_set

    def flaky(root, ranks):
        calls["n"] += 1
        if calls["n"] == 2:  # the second set of the first try: a peer is lost again
            raise changed("lost while making sets")
        return orig(root, ranks)

    FakeRoot._make_set = flaky
    try:
        fake.log.clear()
        E._reset_context()
    finally:
        FakeRoot._make_set = orig
    assert len(names(fake.log, "reset")) == 2
    assert reg.live() == [a, b] and a._ctx is not None and b._ctx is not None
    # the set made in the failed try was destroyed before being made again
    assert ("close", (0, 1)) in fake.log


def test_reset_updates_the_default_context_bookkeeping(monkeypatch):
    """_DefaultBackend.after_reset: unnamed-op counters from 0, the global
    set's ranks, is_homogeneous asked again."""
    from hvd._api import DEFAULT, global_process_set
    b = E._DefaultBackend()
    monkeypatch.setattr(b, "size", lambda: 5)
    DEFAULT._namer("allreduce")
    hvd._homogeneous[:] = [True]
    b.after_reset()
    assert DEFAULT._namer("allreduce") == "allreduce.noname.0"
    assert global_process_set.ranks == [0, 1, 2, 3, 4] and hvd._homogeneous == []
    global_process_set.ranks = []


# ---------------------------------------------------------------------------
# ElasticSampler.
# ---------------------------------------------------------------------------


def test_sampler_shards_and_pads(fake):
    ds = list(range(10))
    got = []
    for r in range(3):
        fake.r = r
        got.append(list(ElasticSampler(ds, shuffle=False)))
    assert got == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]
    fake.r = 1
    s = ElasticSampler(ds, shuffle=False)
    assert len(s) == 4 and s.get_indices(1, 3) == [0]


def test_sampler_shuffles_by_seed_and_epoch(fake):
    import random
    fake.n, fake.r = 2, 1
    s = ElasticSampler(list(range(7)), shuffle=True, seed=11)
    order = list(range(7))
    random.Random(11).shuffle(order)
    assert list(s) == (order + order[:1])[1::2]
    s.set_epoch(3)
    order = list(range(7))
    random.Random(14).shuffle(order)
    assert list(s) == (order + order[:1])[1::2] and s.processed_indices == set()


def test_sampler_reshards_remaining_indices_after_reset(fake):
    """3 ranks process one batch of 2, commit (every rank's indices
    together), then rank 2 is lost: the remaining 4 indices are sharded over
    2 ranks."""
    ds = list(range(10))
    fake.r = 1
    s = ElasticSampler(ds, shuffle=False)
    state = TorchState(sampler=s, batch=0)
    s.record_batch(0, 2)
    assert s.processed_indices == {1, 4}
    fake.others_objects["elastic.sampler.save"] = [{0, 3}, {2, 5}]
    state.commit()
    s.record_batch(1, 2)  # after the commit: lost with the failure
    fake.resets = [(1, 2)]
    state.restore()
    assert s.processed_indices == {0, 1, 2, 3, 4, 5}
    E._reset_context()
    state.on_reset()
    fake.root_objects["elastic.sampler"] = {"epoch": 0, "processed_indices": {0, 1, 2, 3, 4, 5}}
    state.sync()
    assert (s.num_replicas, s.rank) == (2, 1)
    assert s.remaining_indices == [6, 7, 8, 9] and list(s) == [7, 9] and len(s) == 2
    fake.r = 0
    s.reset()
    assert list(s) == [6, 8]


def test_sampler_sync_unions_progress_after_an_interrupt(fake):
    """After HostsUpdatedInterrupt nothing is restored: each rank holds only
    its own processed indices, and sync joins them before re-sharding."""
    fake.r = 0
    s = ElasticSampler(list(range(12)), shuffle=False)  # 3 ranks: 4 each
    s.record_batch(0, 2)
    assert s.processed_indices == {0, 3}
    fake.others_objects["elastic.sampler.sync"] = [{1, 4}, {2, 5}]
    fake.n = 4  # a host was added
    TorchState(sampler=s)._handlers["sampler"].sync()
    assert s.remaining_indices == [6, 7, 8, 9, 10, 11]
    assert list(s) == [6, 10] and len(s) == 2


def test_sampler_with_fewer_remaining_than_ranks(fake):
    s = ElasticSampler(list(range(5)), shuffle=False)
    s.record_indices([0, 1, 2, 3])
    fake.n = 3
    for r, want in enumerate([[4], [4], [4]]):
        fake.r = r
        s.reset()
        assert list(s) == want
    s.record_indices([4])
    s.reset()
    assert list(s) == [] and len(s) == 0


# ---------------------------------------------------------------------------
# TorchState.
# ---------------------------------------------------------------------------


def make_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, opt


def train_step(model, opt, seed):
    g = torch.Generator().manual_seed(seed)
    opt.zero_grad()
    model(torch.randn(8, 4, generator=g)).pow(2).mean().backward()
    opt.step()


def flat(model, opt):
    vals = [t.detach().clone() for t in model.state_dict().values()]
    vals += [st["momentum_buffer"].clone() for st in opt.state.values()]
    return vals


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x, y)


def test_torch_state_commit_and_restore(fake):
    model, opt = make_model()
    state = TorchState(model, opt, epoch=0)
    train_step(model, opt, 1)
    state.epoch = 1
    state.commit()
    committed = flat(model, opt)
    train_step(model, opt, 2)
    state.epoch = 2
    assert not all(torch.equal(x, y) for x, y in zip(committed, flat(model, opt)))
    state.restore()
    assert_same(committed, flat(model, opt)) and state.epoch == 1
    # restoring twice: the momentum buffers loaded back must not alias the copy
    train_step(model, opt, 3)
    state.restore()
    assert_same(committed, flat(model, opt))


def test_torch_state_commit_is_all_or_nothing(fake, monkeypatch):
    """A peer lost in a sampler's allgather (the collective part of a
    commit) leaves the previous commit whole: model, optimizer, samplers and
    counters all go back to it. The state is made as Horovod's elastic
    ImageNet example makes it (two samplers): kept part by part, the train
    sampler's progress of the failed commit went with the model of the one
    before (the samples in between were skipped)."""
    model, opt = make_model()
    train = ElasticSampler(list(range(12)), shuffle=False)  # 3 ranks: 4 each
    val = ElasticSampler(list(range(6)), shuffle=False)
    state = TorchState(model=model, optimizer=opt, train_sampler=train, val_sampler=val,
                       step=0)
    train_step(model, opt, 1)
    train.record_batch(0, 2)
    state.step = 1
    fake.others_objects["elastic.train_sampler.save"] = [{1, 4}, {2, 5}]
    state.commit()
    committed = flat(model, opt)
    train_step(model, opt, 2)
    train.record_batch(1, 2)
    val.record_batch(0, 1)
    state.step = 2
    gather = fake.allgather_object

    def lost_in_val(obj, name=None):
        if name == "elastic.val_sampler.save":
            raise changed("rank 2 (host h3) has not answered")
        return gather(obj, name)

    monkeypatch.setattr(fake, "allgather_object", lost_in_val)
    with pytest.raises(C.MembershipChangedError):
        state.commit()
    state.restore()
    assert_same(committed, flat(model, opt))
    assert state.step == 1
    assert train.processed_indices == {0, 1, 2, 3, 4, 5}
    assert val.processed_indices == set()


def test_torch_state_sync_broadcasts_from_rank0(fake, monkeypatch):
    model, opt = make_model()
    state = TorchState(model, opt, epoch=0)
    root_model, root_opt = make_model()
    train_step(root_model, root_opt, 5)
    calls = []

    def bcast_params(params, root_rank=0, prefix=None, process_set=None):
        calls.append(("params", root_rank, prefix))
        ref = root_model.state_dict()
        with torch.no_grad():
            for k, t in params.items():
                t.copy_(ref[k])

    def bcast_opt(optimizer, root_rank=0, name=None, process_set=None):
        calls.append(("opt", root_rank, name))
        optimizer.load_state_dict(copy.deepcopy(root_opt.state_dict()))

    import hvd.torch.elastic._state as torch_state  # where TorchState calls them
    monkeypatch.setattr(torch_state, "broadcast_parameters", bcast_params)
    monkeypatch.setattr(torch_state, "broadcast_optimizer_state", bcast_opt)
    fake.root_objects["elastic.object_state"] = {"epoch": 4}
    fake.r = 2
    state.sync()
    assert calls == [("params", 0, "elastic.model"), ("opt", 0, "elastic.optimizer")]
    assert_same(flat(root_model, root_opt), flat(model, opt)) and state.epoch == 4


def test_torch_state_new_model_assigned(fake):
    model, opt = make_model()
    state = TorchState(model, opt)
    other, _ = make_model()
    with torch.no_grad():
        other[0].weight.fill_(3.0)
    state.model = other
    assert state.model is other and state._handlers["model"].value is other
    with torch.no_grad():
        other[0].weight.fill_(0.0)
    state.restore()  # assigning saved the new model
    assert torch.all(other[0].weight == 3.0)


def test_torch_state_lr_scheduler(fake):
    model, opt = make_model()
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    state = TorchState(model, opt, scheduler=sched)
    assert "scheduler" in state._handlers
    opt.step()
    sched.step()
    state.commit()
    opt.step()
    sched.step()
    state.restore()
    assert sched.last_epoch == 1 and opt.param_groups[0]["lr"] == pytest.approx(0.05)


# ---------------------------------------------------------------------------
# DistributedOptimizer across a reset (a world of one, the real library).
# ---------------------------------------------------------------------------


@pytest.fixture
def world():
    hvdt.init()
    yield
    while hvdt.is_initialized():
        hvdt.shutdown()


def test_optimizer_pending_reductions_dropped_by_the_reset_hook(world, fake):
    # An elastic job of one rank (the fake backend says elastic): the
    # optimizer reduces, since ranks may join.
    model, _ = make_model()
    opt = hvdt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                    named_parameters=model.named_parameters())
    x = torch.randn(8, 4)
    model(x).pow(2).mean().backward()  # the hooks started the reductions
    assert opt._handles
    # without the hook the next backward pass is refused (the step never finished)
    with pytest.raises(AssertionError, match="backward_passes_per_step"):
        model(x).pow(2).mean().backward()
    E._run_reset_hooks()
    assert not opt._handles and not opt._submitted
    _ops.reap_orphans(wait=True)  # as the reset that follows does
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
    assert not opt._handles


def test_run_loop_drops_pending_reductions_of_the_failed_step(world, fake):
    model, _ = make_model()
    opt = hvdt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                    named_parameters=model.named_parameters())
    fake.resets = [(0, 1)]
    state = E.ObjectState(step=0)
    x = torch.randn(8, 4)
    rounds = []

    @E.run
    def train(state):
        rounds.append(state.step)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        if len(rounds) == 1:
            state.step = 1
            raise changed("lost a peer during backward")
        opt.step()
        return len(opt._handles)

    assert train(state) == 0 and rounds == [0, 0]


def test_sampler_fixed_world(fake):
    fake.n, fake.r = 5, 4  # not used: the sampler's own ranks
    got = [list(ElasticSampler(list(range(10)), shuffle=False, num_replicas=3, rank=r))
           for r in range(3)]
    assert got == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]
    with pytest.raises(ValueError, match="together"):
        ElasticSampler([1], num_replicas=2)
    with pytest.raises(ValueError, match=r"rank 2 is not in \[0, 2\)"):
        ElasticSampler([1], num_replicas=2, rank=2)
