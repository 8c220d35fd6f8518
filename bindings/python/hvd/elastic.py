"""hvd.elastic: Horovod's elastic training (docs/elastic.md).

    import hvd.torch as hvd
    hvd.init()
    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        ...                 # collectives; state.commit() now and then
    train(state)

Run under ``hvdrun --min-np N --max-np M --host-discovery-script S``. When a
worker is lost, the survivors' operations fail with MembershipChangedError (a
HorovodInternalError); ``run`` restores the last committed state, resets the
default context (``hvd_context_reset``: the launcher forms the next epoch with
new ranks), re-creates the registered process sets, and calls the function
again after ``state.sync()`` (rank 0's state to everyone, new workers
included). When the launcher adds or removes hosts, ``state.commit()`` raises
HostsUpdatedInterrupt on every rank at the same commit, and ``run`` resets the
same way without restoring.

This module has the framework-neutral parts (run, State, ObjectState,
HostsUpdatedInterrupt); hvd.torch.elastic adds TorchState and ElasticSampler,
hvd.tensorflow.elastic and hvd.keras.elastic their states.
"""

from __future__ import annotations

import collections
import copy
import ctypes
import functools
import warnings

import numpy as np

from . import _c_api as C
from . import _ops
from ._api import DEFAULT, NUMPY_COLLECTIVES, global_process_set
from ._numpy import NUMPY
from ._c_api import HorovodInternalError, MembershipChangedError  # noqa: F401


class HostsUpdatedInterrupt(RuntimeError):
    """Raised by State.commit() (on every rank at the same commit) when the
    launcher added or removed hosts since the current epoch formed: run()
    then resets the context, without restoring the state, so that new workers
    join. skip_sync (Horovod's): the state need not be synced after the reset;
    hvd cannot tell added hosts from removed ones, so it is always False when
    hvd raises it."""

    def __init__(self, skip_sync=False):
        super().__init__("the launcher changed the hosts of this elastic job"
                         + (" (state sync skipped)" if skip_sync else ""))
        self.skip_sync = bool(skip_sync)


Membership = collections.namedtuple("Membership", "elastic hosts_updated epoch")
Membership.__doc__ = """hvd_context_membership's answer: elastic (an elastic job),
hosts_updated (the launcher changed the hosts since this epoch formed), epoch
(0 the first; counts the resets of the job)."""

# Resets in a row that may fail (a peer lost again while the next epoch forms)
# before run() gives up; the launcher's --reset-limit usually ends a job first.
MAX_RESET_ATTEMPTS = 10

# The core's words when the launcher ends this worker's part in the job
# (fewer workers than --min-np, the reset limit, a worker no longer wanted):
# a reset failing so is not retried.
_LAUNCHER_ENDED = "the launcher ends this worker"


def _require(*names):
    """UnsupportedError when the loaded libhvd lacks the elastic functions."""
    lib = C.lib()
    missing = [n for n in names if n in C.MISSING]
    if missing:
        raise C.UnsupportedError(
            C.HVD_ERR_UNSUPPORTED,
            f"hvd.elastic needs a libhvd with elastic jobs ({', '.join(missing)}); "
            f"{lib.path} predates them: rebuild it or point HVD_LIBRARY_PATH at a newer build")


class _DefaultBackend:
    """What the elastic machinery needs from the default context. Tests
    replace it (hvd.elastic._backend) with a fake."""

    def membership(self):
        _require("hvd_context_membership")
        m = C.HvdMembership()
        C.call("hvd_context_membership", None, ctypes.byref(m))
        return Membership(bool(m.elastic), bool(m.hosts_updated), int(m.epoch))

    def reset(self):
        _require("hvd_context_reset")
        C.call("hvd_context_reset", None)

    def rank(self):
        return C.get_int("hvd_rank")

    def size(self):
        return C.get_int("hvd_size")

    def any(self, flag, name):
        """Whether flag is true on any rank (a collective)."""
        x = np.array([1 if flag else 0], dtype=np.int32)
        out = _ops.allreduce_async(None, NUMPY, x, C.HVD_MAX, name, 1.0, 1.0,
                                   inplace=False).wait()
        return bool(out[0])

    def broadcast_object(self, obj, root_rank=0, name=None):
        return NUMPY_COLLECTIVES.broadcast_object(obj, root_rank, name=name)

    def allgather_object(self, obj, name=None):
        return NUMPY_COLLECTIVES.allgather_object(obj, name=name)

    def registry(self):
        return DEFAULT._registry

    def after_reset(self):
        """The Python side of the default context, after it was re-formed."""
        DEFAULT._namer.reset()  # new workers number their unnamed ops from 0
        global_process_set.ranks = list(range(self.size()))
        DEFAULT._homogeneous.clear()


_backend = _DefaultBackend()

# Called (without arguments) after an operation failed or hosts changed,
# before the state is restored and the context reset: the frameworks drop
# what they hold of the failed step (hvd.torch: the DistributedOptimizers'
# pending handles).
_reset_hooks = []
# Called after a reset re-formed the context and its process sets
# (hvd.tensorflow: the kernels learn the sets' new contexts).
_after_reset_hooks = []


def _register_reset_hook(fn, after=False):
    hooks = _after_reset_hooks if after else _reset_hooks
    if fn not in hooks:
        hooks.append(fn)


def _run_reset_hooks(after=False):
    for fn in list(_after_reset_hooks if after else _reset_hooks):
        fn()


def membership():
    """The default context's Membership (elastic, hosts_updated, epoch): an
    hvd addition (hvd_context_membership). hosts_updated costs one round trip
    to the launcher's store."""
    return _backend.membership()


def _default_bcast(obj):
    return _backend.broadcast_object(obj, 0, name="elastic.object_state")


class State:
    """Horovod's elastic State: what training needs to go on after a reset.
    Subclasses implement save() (keep a copy), restore() (go back to it) and
    sync() (rank 0's to every rank; collective).

    bcast_object(obj, root_rank=0) and get_rank() default to hvd's (Horovod's
    signature takes them)."""

    def __init__(self, bcast_object=None, get_rank=None):
        # Horovod calls bcast_object(obj): rank 0's obj on every rank
        self._bcast_object = bcast_object or _default_bcast
        self._get_rank = get_rank or (lambda: _backend.rank())
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """callbacks (a list of functions without arguments) run after every
        reset, in order, before the state is synced (e.g. to scale the
        learning rate to the new hvd.size())."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        """Called by run() after the context was reset: reset(), then the
        registered callbacks."""
        self.reset()
        for fn in self._reset_callbacks:
            fn()

    def commit(self):
        """save(), then check_host_updates(): a copy to go back to after a
        failure. Collective in an elastic job (every rank commits at the
        same points); raises HostsUpdatedInterrupt when hosts changed."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when the launcher
        changed the hosts since this epoch formed (on any rank's reading:
        the ranks agree with one allreduce, so they all raise at the same
        commit). Outside an elastic job: nothing to check, no collective."""
        m = _backend.membership()
        if not m.elastic:
            return
        if _backend.any(m.hosts_updated, "elastic.hosts_updated"):
            raise HostsUpdatedInterrupt(skip_sync=False)

    def save(self):
        raise NotImplementedError(f"{type(self).__name__}.save")

    def restore(self):
        raise NotImplementedError(f"{type(self).__name__}.restore")

    def sync(self):
        raise NotImplementedError(f"{type(self).__name__}.sync")

    def reset(self):
        """Hook for subclasses, run first by on_reset()."""


class ObjectState(State):
    """Horovod's ObjectState: each keyword argument becomes an attribute
    (state.epoch, state.batch, ...). save() keeps a deep copy of their
    values (Horovod keeps the values themselves: an object changed in place
    would not go back), restore() sets them again, sync() sets rank 0's
    saved values on every rank."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        self._saved_state = copy.deepcopy(kwargs)
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = self._snapshot()

    def _snapshot(self):
        """Deep copies of the attributes' values (what save() keeps)."""
        return {k: copy.deepcopy(getattr(self, k)) for k in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for k, v in self._saved_state.items():
            setattr(self, k, copy.deepcopy(v))


def _launcher_ended(err):
    return _LAUNCHER_ENDED in str(getattr(err, "message", "") or err)


def _reset_context(backend=None):
    """hvd_context_reset on the default context, then its Python side and
    the registered process sets (re-made if their ranks still exist, dropped
    with a warning if not). A reset that fails because the membership changed
    again is tried again (MAX_RESET_ATTEMPTS in a row); one the launcher
    refused (the job is ending) raises."""
    backend = backend or _backend
    last = None
    for _ in range(MAX_RESET_ATTEMPTS):
        try:
            backend.reset()
        except MembershipChangedError as e:
            if _launcher_ended(e):
                raise
            last = e
            continue
        backend.after_reset()
        try:
            dropped = backend.registry().reform()
        except HorovodInternalError as e:  # lost a peer again while making the sets
            last = e
            continue
        for ps in dropped:
            warnings.warn(f"hvd.elastic: {ps._describe()} {ps._gone}", RuntimeWarning,
                          stacklevel=3)
        _run_reset_hooks(after=True)
        return
    raise MembershipChangedError(
        C.HVD_ERR_MEMBERSHIP_CHANGED,
        f"hvd.elastic: {MAX_RESET_ATTEMPTS} resets in a row failed; the last: {last}")


def _recoverable(err):
    """Whether run() may reset after err: an elastic job's context."""
    try:
        return _backend.membership().elastic
    except HorovodInternalError:
        return True  # the membership query itself hit the changed membership
    except C.HvdError:
        return False


def run_fn(func, reset):
    """Horovod's run_fn: func wrapped in the elastic loop, with reset() the
    way to form the job again."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError as e:
                if not _recoverable(e):
                    raise  # not an elastic job: nothing to go on with
                _run_reset_hooks()
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                _run_reset_hooks()
                skip_sync = e.skip_sync
            reset()
            state.on_reset()

    return wrapper


def run(func):
    """Horovod's hvd.elastic.run decorator: func(state, ...) runs until it
    returns, going back to the last commit after a failure.

    Each round: state.sync() (skipped after an interrupt with skip_sync),
    then func. On HorovodInternalError (a lost peer: MembershipChangedError):
    pending operations of the framework are dropped, state.restore(), reset.
    On HostsUpdatedInterrupt (from state.commit()): reset. A reset re-forms
    the default context under the next epoch (new rank and size), re-creates
    the process sets registered with hvd.add_process_set / hvd.init(
    process_sets=...) whose ranks all still exist (the same ProcessSet
    objects; the others are dropped with a RuntimeWarning and then raise
    ValueError when used), then calls state.on_reset(). A worker the launcher
    starts later runs the script from the top: it must register the same
    process sets, and do no collective before calling func (as in Horovod,
    the others are waiting in state.sync()).

    Outside an elastic job, errors propagate as they are."""
    return run_fn(func, _reset_context)


__all__ = ["run", "run_fn", "State", "ObjectState", "HostsUpdatedInterrupt",
           "HorovodInternalError", "MembershipChangedError", "Membership", "membership"]
