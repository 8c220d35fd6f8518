"""Horovod's process sets over hvd's (include/hvd.h, "Process sets").

A ProcessSet names some ranks of a root context (the default one from
hvd.init(), or an hvd.Context). Registering it (hvd.add_process_set, or
hvd.init(process_sets=[...])) is collective over the root's ranks and makes
it a context of its own on its members (hvd_process_set_create); every
collective takes ``process_set=`` and then runs on that context, among the
set's members only. Ranks outside the set hold the same ProcessSet object
(same ranks, same id) but no context, and running an operation on it there
raises ValueError.

As in Horovod:
  - ProcessSet(ranks) sorts the ranks; it is only a list until registered
    (process_set_id None, rank() and size() None);
  - ProcessSet(mpi_comm) takes an mpi4py communicator: its ranks are found
    when it is registered (ranks None until then), by translating the
    communicator's group to the root's MPI communicator (the one passed to
    hvd.init(comm=...), else MPI.COMM_WORLD), whose ranks are hvd's when
    mpirun started the job. Every rank passes its own communicator (e.g. from
    MPI.COMM_WORLD.Split), and every distinct one becomes a set, in the order
    of its lowest rank: after a Split by parity, ranks 0 and 2 hold set [0, 2]
    and ranks 1 and 3 set [1, 3], with different ids;
  - hvd.global_process_set (id 0) is every rank of the default context;
  - add_process_set / remove_process_set are called by every rank, in the
    same order; removing returns True, or False for the global set and a set
    that is not registered;
  - broadcast roots are ranks of the root context (hvd.rank()), not ranks
    within the set; ps.rank() is this process's rank within the set (the
    order of allgather's blocks);
  - a ProcessSet pickles as its ranks alone (see ProcessSet.__reduce__), so
    it can go through multiprocessing, broadcast_object or a saved config.

A call that registers several sets (hvd.init(process_sets=[...]), or one
ProcessSet(mpi_comm) holding several communicators) registers all of them or
none: when making a later one fails, the sets that call registered already
are removed again before the error is raised (Registry._rollback).
"""

from __future__ import annotations

import numbers
import sys
import threading

from . import _c_api as C


def _err(msg):
    return ValueError(f"hvd: {msg}")


def _mpi_comm(obj):
    """obj if it is an mpi4py communicator, else None. mpi4py is not imported
    here: a communicator exists only once mpi4py.MPI is loaded."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and isinstance(obj, mpi.Comm):
        return obj
    return None


class ProcessSet:
    """Some ranks of the job that run collectives together (Horovod's
    ProcessSet). Build it from a list of ranks, then register it on every
    rank: hvd.init(process_sets=[...]) or hvd.add_process_set(ps)."""

    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        self._registry = None  # the root's registry, once registered
        self._ctx = None  # this rank's context for the set (members only)
        self._gone = None  # why it is no longer registered (removed, shut down)
        self._global = False
        self._siblings = ()  # ids registered by the same ProcessSet(mpi_comm) registration
        comm = _mpi_comm(ranks_or_comm)
        if comm is not None:
            from mpi4py import MPI
            if comm == MPI.COMM_NULL:
                raise _err("ProcessSet(mpi_comm): the communicator is MPI.COMM_NULL; pass a "
                           "communicator this process belongs to (e.g. from "
                           "MPI.COMM_WORLD.Split with a color >= 0)")
            if comm.Is_inter():
                raise _err("ProcessSet(mpi_comm): an intercommunicator cannot be a process "
                           "set; pass an intracommunicator")
            self.mpi_comm = comm
            return
        try:
            ranks = list(ranks_or_comm)
        except TypeError:
            raise _err("ProcessSet takes a list of ranks (ints) or an mpi4py communicator, "
                       f"got {type(ranks_or_comm).__name__}") from None
        bad = [r for r in ranks if isinstance(r, bool) or not isinstance(r, numbers.Integral)]
        if bad:
            raise _err(f"ProcessSet takes a list of ranks (ints); got {bad[0]!r}")
        self.ranks = sorted(int(r) for r in ranks)

    # -- Horovod's queries ------------------------------------------------------------
    def size(self):
        """The number of ranks in the set, or None if it is not registered."""
        if self._global:
            return self._registry.root.size()
        if self.process_set_id is None:
            return None
        return len(self.ranks)

    def rank(self):
        """This process's rank within the set (its block's index in an
        allgather over the set), or None if it is not registered. Raises
        ValueError on a rank outside the set."""
        if self._global:
            return self._registry.root.rank()
        if self.process_set_id is None:
            return None
        if self._ctx is None:
            raise _err(f"rank {self._registry.root.rank()} is not part of {self._describe()}")
        return self._ctx.rank()

    def included(self):
        """Whether this process is in the set (None when ranks is None)."""
        if self._global:
            return True
        if self.ranks is None:
            return None
        if self._registry is not None:
            return self._ctx is not None
        return C.get_int("hvd_rank") in self.ranks

    def __copy__(self):
        return self  # a handle on a registered set: copies of a model share it

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        """Pickles the ranks and nothing else (the context, the registry and
        an MPI communicator belong to this process). Unpickling gives the set
        registered on the default context with the same ranks, where there is
        one (the same object: same id, usable at once), else an unregistered
        ProcessSet(ranks) to pass to hvd.add_process_set or
        hvd.init(process_sets=...); hvd.global_process_set gives the
        unpickling process's global set. A ProcessSet(mpi_comm) can be
        pickled once registered (its ranks are known then)."""
        if self._global:
            return (_unpickle_global, ())
        if self.ranks is None:
            raise TypeError(f"hvd: cannot pickle {self._describe()}: its ranks are known only "
                            "once it is registered (hvd.add_process_set or "
                            "hvd.init(process_sets=[...])); pickle it after that")
        return (_unpickle, (list(self.ranks),))

    def __str__(self):
        return (f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, "
                f"mpi_comm={self.mpi_comm})")

    __repr__ = __str__

    def _describe(self):
        if self._global:
            return "the global process set"
        ident = "" if self.process_set_id is None else f" (id {self.process_set_id})"
        if self.ranks is None:
            return f"the process set of MPI communicator {self.mpi_comm}"
        return f"process set {self.ranks}{ident}"

    # -- binding an operation to the set ---------------------------------------------------
    def _hvd_bind(self, root):
        """(context, self) for an operation of root's collectives on this set;
        (root, None) for the global set. Raises ValueError naming the problem."""
        if self._global:
            return root, None
        if self.process_set_id is None:
            if self._gone:
                raise _err(f"{self._describe()} {self._gone}; add it again (on every rank) "
                           "to use it")
            raise _err(f"{self._describe()} is not registered: pass it to "
                       "hvd.init(process_sets=[...]) or call hvd.add_process_set() on every "
                       "rank first")
        if self._registry.root is not root:
            raise _err(f"{self._describe()} was registered on another context than the one "
                       "this operation runs on")
        if self._ctx is None:
            raise _err(f"rank {root.rank()} is not in {self._describe()}: only its members "
                       "may run operations on it")
        return self._ctx, self

    def _set_rank_of(self, rank, what="root_rank"):
        """The rank within the set of the root context's rank `rank`."""
        if isinstance(rank, bool) or not isinstance(rank, numbers.Integral):
            raise TypeError(f"hvd: {what} must be an int, got {rank!r}")
        try:
            return self.ranks.index(int(rank))
        except ValueError:
            raise _err(f"{what} {rank} is not in {self._describe()} (give the rank as "
                       "hvd.rank() numbers it, one of the set's ranks)") from None

    def _register(self, registry, ident, ctx):
        self._registry = registry
        self.process_set_id = ident
        self._ctx = ctx
        self._gone = None

    def _invalidate(self, why):
        self.process_set_id = None
        self._ctx = None
        self._gone = why


def _default_registry():
    # hvd._api attaches the default context's registry to global_process_set
    return global_process_set._registry


def _unpickle(ranks):
    """ProcessSet.__reduce__'s counterpart: the default context's registered
    set with these ranks, else a new unregistered ProcessSet(ranks)."""
    found = _default_registry().by_ranks(ranks)
    return found if found is not None else ProcessSet(ranks)


def _unpickle_global():
    return global_process_set


class Registry:
    """The process sets registered on one root context, by id. Ids count up
    from 1 and are never reused within a process (a stale id in a traced
    TensorFlow graph fails instead of reaching another set); every rank
    assigns the same ids because registration is collective and ordered.

    root provides rank(), size(), _make_set(ranks) -> child context or None
    (collective over the root's ranks) and _ptr."""

    def __init__(self, root):
        self.root = root
        self._lock = threading.RLock()
        self._next_id = 1
        self._sets = {}  # id -> ProcessSet
        self.on_remove = []  # callbacks(id), run before a set's context is destroyed

    def add(self, process_set):
        if isinstance(process_set, ProcessSet):
            ps = process_set
        else:
            ps = ProcessSet(process_set)
        if ps._global:
            raise _err("the global process set is always registered")
        with self._lock:
            if ps.process_set_id is not None:
                raise _err(f"{ps._describe()} is already registered")
            if ps.ranks is None:
                before = set(self._sets)
                try:
                    return self._add_comm(ps)
                except BaseException:
                    self._rollback(before, ps)
                    raise
            # The set is made first, so that ranks passing different lists
            # all fail together (MismatchError) rather than some refusing a
            # duplicate here while the others wait in the collective.
            ctx = self.root._make_set(ps.ranks)
            dup = [o for o in self._sets.values() if o.ranks == ps.ranks]
            if dup:
                if ctx is not None:
                    ctx.close()  # collective over the members, who all refuse it too
                raise _err(f"attempted to add a duplicate process set: {dup[0]._describe()} "
                           "has the same ranks")
            ident = self._next_id
            self._next_id += 1
            self._sets[ident] = ps
            ps._register(self, ident, ctx)
        return ps

    def add_all(self, process_sets):
        """Registers the sets in order (hvd.init(process_sets=[...])), all or
        none: each item is made a ProcessSet before anything is registered,
        and when registering one fails, the sets registered by this call are
        removed again (_rollback) and the error raised. Returns the
        ProcessSets."""
        sets = [ps if isinstance(ps, ProcessSet) else ProcessSet(ps) for ps in process_sets]
        with self._lock:
            before = set(self._sets)
            try:
                for ps in sets:
                    self.add(ps)
            except BaseException:
                self._rollback(before, *sets)
                raise
        return sets

    def _rollback(self, before, *comm_sets):
        """Removes every set registered since the registry held the ids
        `before` (by the call that is failing), in id order. Every rank
        registered the same sets under the same ids and sees the same failure
        (making a set is collective, and so is what refuses one), so every
        rank removes the same sets in the same order: the members of each
        destroy its context together (bounded as any destroy, by the stall
        inspector; a failure there is ignored, the context is freed whatever
        it returns, and the original error is the one raised). comm_sets:
        ProcessSet(mpi_comm)s of the call, which get their ranks back to
        None (they are known only once registered)."""
        for ident in sorted(set(self._sets) - set(before)):
            target = self._sets.pop(ident)
            ctx = target._ctx
            target._invalidate("was removed again because registering a later process set "
                               "in the same call failed")
            target._siblings = ()
            self._forget(ident)
            if ctx is not None:
                try:
                    ctx.close()  # collective over the set's members
                except Exception:  # noqa: BLE001 - the caller raises the first error
                    pass
        for ps in comm_sets:
            if ps.mpi_comm is not None and ps.process_set_id is None:
                ps.ranks = None

    def _add_comm(self, ps):
        """Registers ProcessSet(mpi_comm): collective over the root's ranks,
        each passing its own communicator. Every rank translates its
        communicator's ranks to the root's, the lists are allgathered, and each
        distinct list becomes a set (in the order of its lowest rank), so every
        rank registers the same sets under the same ids; ps becomes the set of
        this rank's communicator. Any problem on any rank raises the same
        ValueError on every rank, before anything is registered."""
        mine, problem = _translate(ps.mpi_comm, self.root)
        every = self.root._allgather_objects((mine, problem), "process_set.mpi_comm")
        bad = [(r, p) for r, (_, p) in enumerate(every) if p is not None]
        if bad:
            r, p = bad[0]
            raise _err(f"ProcessSet(mpi_comm) on rank {r}: {p}")
        lists = []
        for r, (ranks, _) in enumerate(every):
            if ranks not in lists:
                lists.append(ranks)
        for ranks in lists:
            strays = [r for r in ranks if every[r][0] != ranks]
            if strays:
                raise _err(f"ProcessSet(mpi_comm): ranks passed different communicators at "
                           f"the same call: the communicator of rank {ranks[0]} holds ranks "
                           f"{ranks}, rank {strays[0]}'s holds {every[strays[0]][0]}; every "
                           "rank must pass the communicator it belongs to (e.g. from one "
                           "MPI.COMM_WORLD.Split)")
            dup = [o for o in self._sets.values() if o.ranks == ranks]
            if dup:
                raise _err(f"attempted to add a duplicate process set: the communicator of "
                           f"rank {ranks[0]} holds the ranks of {dup[0]._describe()}")
        made = []
        for ranks in lists:
            ctx = self.root._make_set(ranks)  # collective over the root's ranks
            target = ps if ranks == mine else ProcessSet(ranks)
            if target is ps:
                ps.ranks = list(ranks)
            ident = self._next_id
            self._next_id += 1
            self._sets[ident] = target
            target._register(self, ident, ctx)
            made.append((ident, target))
        siblings = tuple(ident for ident, _ in made)
        for _, target in made:
            target._siblings = siblings
        return ps

    def remove(self, ps):
        """Horovod's remove_process_set: True once removed; False for the
        global set and a set that is not registered (here). A set made from an
        MPI communicator goes with the others of its registration (each rank
        passes its own ProcessSet; together they remove all of them)."""
        if not isinstance(ps, ProcessSet):
            raise TypeError(f"hvd.remove_process_set: expected a ProcessSet, got "
                            f"{type(ps).__name__}")
        if ps._global or ps.process_set_id is None:
            return False
        with self._lock:
            if ps._registry is not self or self._sets.get(ps.process_set_id) is not ps:
                return False
            for ident in sorted(set(ps._siblings) | {ps.process_set_id}):
                target = self._sets.pop(ident, None)
                if target is None:
                    continue
                ctx = target._ctx
                target._invalidate("was removed (hvd.remove_process_set)")
                self._forget(ident)
                if ctx is not None:
                    ctx.close()  # collective over the set's members
        return True

    def clear(self, why):
        """Drops every set (the root is gone or going): their contexts are
        destroyed without a collective once the root has stopped."""
        with self._lock:
            sets, self._sets = self._sets, {}
            for ident, ps in sorted(sets.items()):
                ctx = ps._ctx
                ps._invalidate(why)
                self._forget(ident)
                if ctx is not None:
                    try:
                        ctx.close()
                    except Exception:  # the root stopped: only memory is freed
                        pass

    def reform(self):
        """After an elastic reset re-formed the root (new ranks and size):
        every registered set's old context (stopped by the reset) is
        destroyed, and the set is made again under the same id and
        ProcessSet object if all its ranks exist in the new job (collective
        over the root's ranks, in id order, as registration is). Sets with a
        rank >= the new size are unregistered (using them raises ValueError
        saying why). Returns those dropped sets. Calling it again (after a
        failure while making the sets) starts over from the sets still
        registered."""
        with self._lock:
            n = self.root.size()
            for ident, ps in sorted(self._sets.items()):
                ctx, ps._ctx = ps._ctx, None
                self._forget(ident)  # before the context goes (TF kernels hold it)
                if ctx is not None:
                    try:
                        ctx.close()  # stopped by the reset: only frees it
                    except Exception:
                        pass
            dropped = []
            for ident, ps in sorted(self._sets.items()):
                if not ps.ranks or max(ps.ranks) >= n:
                    del self._sets[ident]
                    ps._invalidate(f"was dropped by an elastic reset: its ranks {ps.ranks} do "
                                   f"not all exist in the job of {n} ranks it formed")
                    ps._siblings = ()
                    dropped.append(ps)
            for ident, ps in sorted(self._sets.items()):
                ps._ctx = self.root._make_set(ps.ranks)
            return dropped

    def _forget(self, ident):
        for fn in list(self.on_remove):
            fn(ident)

    def by_id(self, ident):
        with self._lock:
            return self._sets.get(ident)

    def by_ranks(self, ranks):
        """The registered set with exactly these ranks (sorted), or None."""
        ranks = list(ranks)
        with self._lock:
            for ps in self._sets.values():
                if ps.ranks == ranks:
                    return ps
        return None

    def live(self):
        with self._lock:
            return [self._sets[k] for k in sorted(self._sets)]


def _translate(comm, root):
    """(this rank's communicator's members as root ranks, sorted; None) or
    (None, why not). The root's ranks are those of its MPI communicator (the
    one given to hvd.init / hvd.Context, else MPI.COMM_WORLD), which must have
    hvd's size and this rank at hvd's rank."""
    try:
        from mpi4py import MPI
        ref = getattr(root, "_mpi_comm", None)
        what = "the communicator passed to hvd.init(comm=...)"
        if ref is None:
            ref, what = MPI.COMM_WORLD, "MPI.COMM_WORLD"
        n, n_ref = root.size(), ref.Get_size()
        if n != n_ref:
            return None, (f"hvd's job has {n} ranks but {what} has {n_ref}: the ranks of an MPI "
                          f"communicator are hvd's ranks only when every hvd rank is an MPI "
                          f"process of {what} (start the job with mpirun, or pass "
                          "hvd.init(comm=...)); pass the ranks instead (hvd.ProcessSet([...]))")
        if ref.Get_rank() != root.rank():
            return None, (f"this process is rank {root.rank()} of hvd's job but rank "
                          f"{ref.Get_rank()} of {what}: their ranks do not match")
        group, ref_group = comm.Get_group(), ref.Get_group()
        try:
            ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), ref_group)
        finally:
            group.Free()
            ref_group.Free()
        if any(r == MPI.UNDEFINED for r in ranks):
            return None, f"the communicator holds processes that are not in {what}"
        return sorted(int(r) for r in ranks), None
    except Exception as e:  # reported on every rank, not only this one
        return None, f"{type(e).__name__}: {e}"


def make_global(registry):
    """Horovod's global_process_set: id 0, every rank of the default context."""
    ps = ProcessSet([])
    ps._global = True
    ps._registry = registry
    ps.process_set_id = 0
    ps.ranks = []
    return ps


# Horovod's global process set: the whole default context (id 0). Its
# registry is the default context's, attached by hvd._api.
global_process_set = make_global(None)
