"""hvd.torch.optimizer: DistributedOptimizer (Horovod's
horovod.torch.optimizer): a torch optimizer whose step() applies gradients
reduced over the ranks (or the ranks of a process set), each gradient's
allreduce started from a hook as soon as autograd has it; op=Adasum reduces
the parameter updates instead. Horovod's private classes there
(_DistributedOptimizer, _DistributedAdasumOptimizer), which some scripts
subclass, are not offered: hvd's take other arguments."""

from __future__ import annotations

import contextlib
import warnings
import weakref

import torch

from .. import _c_api as C
from .. import _ops
from .. import Adasum, Average, global_process_set, size
from ._collectives import _t, _set_size, broadcast_object, sparse_allreduce_async
from ._compression import Compression

class _Slot:
    """One parameter's part of a step: its reduction's name, the backward
    passes since the last synchronize, whether its reduction started, and its
    group (with groups)."""

    __slots__ = ("param", "name", "passes", "submitted", "group", "handle", "compressed",
                 "cctx")

    def __init__(self, param, name):
        self.param = param
        self.name = name
        self.passes = 0
        self.submitted = False
        self.group = None
        # The step's reduction: Handle, compressed tensor (None if sparse), ctx.
        self.handle = self.compressed = self.cctx = None

    def start(self, reduction):
        """Holds the step's reduction (handle, compressed, ctx)."""
        self.submitted = True
        self.handle, self.compressed, self.cctx = reduction


class _Group:
    """A group of parameters reduced as one grouped allreduce, and how many
    of their gradients are ready this step."""

    __slots__ = ("params", "slots", "ready")

    def __init__(self, params, slots):
        self.params = params
        self.slots = slots
        self.ready = 0


class _DistributedOptimizer:
    """Methods mixed into a subclass of the wrapped optimizer's class."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, sparse_as_dense=False, groups=None,
                 process_set=global_process_set, member=True):
        super(self.__class__, self).__init__(params)
        self._process_set = process_set
        self._member = member  # False: this rank is not in process_set (a plain optimizer)
        self._compression = compression
        self._sparse_as_dense = bool(sparse_as_dense)
        self._op = _ops.check_op(op)
        if backward_passes_per_step < 1:
            raise ValueError("hvd.torch.DistributedOptimizer: backward_passes_per_step must be "
                             ">= 1")
        self.backward_passes_per_step = int(backward_passes_per_step)
        if gradient_predivide_factor != 1.0 and self._op != Average:
            raise ValueError("hvd.torch.DistributedOptimizer: gradient_predivide_factor needs "
                             "op=Average")
        self._predivide = float(gradient_predivide_factor)

        all_params = [p for g in self.param_groups for p in g["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            for item in named:
                if not (isinstance(item, tuple) and len(item) == 2):
                    raise ValueError("hvd.torch.DistributedOptimizer: named_parameters must be "
                                     "(name, parameter) pairs, e.g. model.named_parameters()")
            names = [n for n, _ in named]
            dup = {n for n in names if names.count(n) > 1}
            if dup:
                raise ValueError(f"hvd.torch.DistributedOptimizer: duplicate parameter names "
                                 f"{sorted(dup)}")
            by_id = {id(p): n for n, p in named}
            missing = [i for i, p in enumerate(all_params) if id(p) not in by_id]
            if missing:
                raise ValueError(
                    "hvd.torch.DistributedOptimizer: named_parameters does not cover every "
                    f"parameter of the optimizer ({len(missing)} missing); pass "
                    "model.named_parameters() of the model the optimizer trains")
            self._names = {p: by_id[id(p)] for p in all_params}
        else:
            self._names = {p: f"noname.{i}" for i, p in enumerate(all_params)}

        # The step's reductions, in submit order: a _Slot holding its own, or
        # for a grouped allreduce (tuple of params, Handle, [compressed], [ctx]).
        self._handles = []
        self._submitted = []  # the _Slots whose reduction started since the last synchronize
        self._requires_update = [p for p in all_params if p.requires_grad]
        # What a hook needs of its parameter, found without hashing tensors
        # (torch's Tensor.__hash__ is a Python call: a hook looked up seven).
        self._slots = [_Slot(p, f"DistributedOptimizer.{self._names[p]}")
                       for p in self._requires_update]
        self._groups = []  # the groups' parameters, with groups
        self._hooks = []
        self._synchronized = False
        self._should_synchronize = True
        # Horovod's name: parameter -> the name its allreduce is called by
        self._parameter_names = self._names
        if not member:
            return  # no hooks, no groups: step() is the wrapped optimizer's own
        if groups is not None:
            self._form_groups(_check_groups(groups))
        self._register_hooks()

    # -- groups -----------------------------------------------------------------------
    def _form_groups(self, groups):
        """Horovod's grouping: an int n splits the parameters that need
        gradients (in rank 0's order of their names) into n contiguous groups
        of nearly equal length; a list of lists makes each inner list a group
        and every other parameter a group of its own."""
        plist = list(self._requires_update)
        if isinstance(groups, int):
            ps = self._process_set
            if _set_size(ps) > 1:
                # the first rank's order, so that every rank forms the same groups
                first = 0 if ps is None or ps._global else ps.ranks[0]
                order = broadcast_object([self._names[p] for p in plist], first,
                                         name="DistributedOptimizer.groups", process_set=ps)
                pos = {n: i for i, n in enumerate(order)}
                unknown = [self._names[p] for p in plist if self._names[p] not in pos]
                if unknown:
                    raise ValueError("hvd.torch.DistributedOptimizer: parameters "
                                     f"{unknown} are not among rank 0's; every rank must "
                                     "wrap the same model")
                plist.sort(key=lambda p: pos[self._names[p]])
            per, extra = divmod(len(plist), groups)
            formed, start = [], 0
            for i in range(groups):
                end = start + per + (1 if i < extra else 0)
                formed.append(plist[start:end])
                start = end
        else:
            wanted = {id(p) for p in plist}
            formed, seen = [], set()
            for g in groups:
                formed.append([p for p in g if id(p) in wanted])
                seen.update(id(p) for p in g)
            formed.extend([p] for p in plist if id(p) not in seen)
        slot_of = {id(sl.param): sl for sl in self._slots}
        for g in formed:
            if g:
                group = _Group(tuple(g), [slot_of[id(p)] for p in g])
                self._groups.append(group.params)
                for sl in group.slots:
                    sl.group = group

    def _grouped_allreduce_grads_async(self, group):
        """Starts the reduction of a group's gradients: one grouped allreduce
        per dtype (the library groups one dtype); sparse gradients (without
        sparse_as_dense) are reduced one by one, as without groups."""
        by_dtype = {}
        for sl in group.slots:
            p = sl.param
            sl.submitted = True
            self._submitted.append(sl)
            if p.grad is None:
                p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
            if p.grad.is_sparse and not self._sparse_as_dense:
                sl.start(self._allreduce_grad_async(sl))
                self._handles.append(sl)
                continue
            grad = p.grad.to_dense() if p.grad.is_sparse else p.grad
            compressed, cctx = self._compression.compress(grad)
            by_dtype.setdefault(compressed.dtype, []).append((p, compressed, cctx))
        prescale, postscale = self._scales()
        base = f"DistributedOptimizer.group.{self._names[group.params[0]]}"
        for dt, members in by_dtype.items():
            name = base if len(by_dtype) == 1 else f"{base}.{str(dt).replace('torch.', '')}"
            handle = _t.grouped_allreduce_async_([m[1] for m in members], name=name,
                                                 op=self._op, prescale_factor=prescale,
                                                 postscale_factor=postscale,
                                                 process_set=self._process_set)
            self._handles.append((tuple(m[0] for m in members), handle,
                                  [m[1] for m in members], [m[2] for m in members]))

    def _scales(self):
        if self._op == Average and self._predivide != 1.0:
            return 1.0 / self._predivide, self._predivide
        return 1.0, 1.0

    # -- hooks ------------------------------------------------------------------------
    def _register_hooks(self):
        for sl in self._slots:
            p = sl.param
            if hasattr(p, "register_post_accumulate_grad_hook"):
                self._hooks.append(p.register_post_accumulate_grad_hook(self._make_hook(sl)))
            else:  # torch < 2.1: hook the gradient accumulator node
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                hook = self._make_hook(sl)
                self._hooks.append(acc.register_hook(lambda *_, p=p, h=hook: h(p)))
                self._hooks.append(acc)  # keep the node alive

    def _make_hook(self, sl):
        def hook(_p):
            passes = self.backward_passes_per_step
            if sl.submitted or sl.passes >= passes:
                raise AssertionError(
                    "hvd.torch.DistributedOptimizer: gradients were computed more than "
                    f"backward_passes_per_step ({passes}) times before "
                    "step() or synchronize(); raise backward_passes_per_step to accumulate")
            sl.passes += 1
            if sl.passes == passes:
                group = sl.group
                if group is None:
                    sl.start(self._allreduce_grad_async(sl))
                    self._submitted.append(sl)
                    self._handles.append(sl)
                else:
                    group.ready += 1
                    if group.ready == len(group.slots):
                        self._grouped_allreduce_grads_async(group)
        return hook

    def _allreduce_grad_async(self, sl):
        p = sl.param
        if p.grad is None:
            # Unused in this step's graph: still take part, with zeros, so every
            # rank submits the same names.
            p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
        grad = p.grad
        if grad.is_sparse:
            if not self._sparse_as_dense:
                # As Horovod: indices and values allgathered, no compression.
                return sparse_allreduce_async(
                    grad, name=sl.name, op=self._op, process_set=self._process_set), None, None
            grad = grad.to_dense()  # allreduced densely, made sparse again in synchronize()
        compressed, cctx = self._compression.compress(grad)
        prescale, postscale = self._scales()
        handle = _t.allreduce_async_(compressed, name=sl.name, op=self._op,
                                     prescale_factor=prescale, postscale_factor=postscale,
                                     process_set=self._process_set)
        return handle, compressed, cctx

    # -- public -----------------------------------------------------------------------
    def synchronize(self):
        """Waits for every gradient's allreduce (starting those whose hook did
        not fire, e.g. parameters unused this step) and writes the results to .grad.
        On a rank outside the optimizer's process set it does nothing."""
        if not self._member:
            self._synchronized = True
            return
        for sl in self._slots:
            if not sl.submitted:
                if sl.group is None:
                    sl.start(self._allreduce_grad_async(sl))
                    self._submitted.append(sl)
                    self._handles.append(sl)
                else:
                    self._grouped_allreduce_grads_async(sl.group)
        try:
            for entry in list(self._handles):
                if entry.__class__ is _Slot:
                    p, handle, compressed, cctx = (entry.param, entry.handle, entry.compressed,
                                                   entry.cctx)
                else:
                    p, handle, compressed, cctx = entry
                result = handle.wait()
                if isinstance(p, tuple):  # a grouped allreduce, in place in `compressed`
                    for gp, c, x in zip(p, compressed, cctx):
                        self._write_grad(gp, c, x)
                elif compressed is None:  # a sparse gradient, allgathered
                    with torch.no_grad():  # sparse tensors have no set_/copy_ from sparse
                        p.grad.zero_().add_(result)
                else:
                    self._write_grad(p, compressed, cctx)
        finally:
            self._clear_step()
        self._synchronized = True

    def _clear_step(self):
        """Forgets the step's handles and counters: the next backward pass
        starts afresh."""
        self._handles.clear()
        self._submitted.clear()
        for sl in self._slots:
            sl.passes = 0
            sl.submitted = False
            sl.handle = sl.compressed = sl.cctx = None
            if sl.group is not None:
                sl.group.ready = 0

    def _hvd_drop_pending(self):
        """Forgets the reductions of a step that failed (an elastic reset
        follows): their handles are dropped (they complete with the reset's
        error), and the next backward pass starts afresh."""
        self._clear_step()
        self._synchronized = False

    def _write_grad(self, p, compressed, cctx):
        """Puts a densely allreduced gradient (compressed, in place) into p.grad."""
        if p.grad.is_sparse:  # sparse_as_dense: made sparse again
            reduced = self._compression.decompress(compressed, cctx).to_sparse(
                p.grad.sparse_dim())
            with torch.no_grad():  # sparse tensors have no set_/copy_ from sparse
                p.grad.zero_().add_(reduced)
        elif compressed is not p.grad:
            with torch.no_grad():
                p.grad.copy_(self._compression.decompress(compressed, cctx))

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For `optimizer.synchronize(); (clip gradients); with optimizer.skip_synchronize():
        optimizer.step()`."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("hvd.torch.DistributedOptimizer: optimizer.step() called without "
                              "optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(): step() after synchronize() without "
                              "skip_synchronize() allreduces the gradients twice",
                              stacklevel=2)
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError(
                "hvd.torch.DistributedOptimizer: zero_grad() was called after backward() but "
                "before step() or synchronize(): the pending allreduces would be lost")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


class _DistributedAdasumOptimizer:
    """Methods mixed into a subclass of the wrapped optimizer's class for
    op=Adasum, with Horovod's semantics: the parameter UPDATE is reduced, not
    the gradient. When a parameter's gradient is ready (after
    backward_passes_per_step passes), this rank applies the wrapped
    optimizer's step to that parameter alone (its state, e.g. momentum, stays
    local), takes delta = new - old, restores old, and starts an in-place
    allreduce of delta with op Adasum (compressed if asked); step() waits for
    every delta and sets param = old + adasum(delta) on every rank (the same
    bits everywhere). synchronize() only starts the reductions not started
    yet; step() does the rest."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step,
                 process_set=global_process_set):
        super(self.__class__, self).__init__(params)
        self._process_set = process_set
        self._compression = compression
        if backward_passes_per_step < 1:
            raise ValueError("hvd.torch.DistributedOptimizer: backward_passes_per_step must be "
                             ">= 1")
        self.backward_passes_per_step = int(backward_passes_per_step)
        all_params = [p for g in self.param_groups for p in g["params"]]
        if named_parameters is not None:
            by_id = {id(p): n for n, p in list(named_parameters)}
            missing = [p for p in all_params if id(p) not in by_id]
            if missing or len(set(by_id.values())) != len(by_id):
                raise ValueError("hvd.torch.DistributedOptimizer: named_parameters must name "
                                 "every parameter of the optimizer once")
            self._names = {p: by_id[id(p)] for p in all_params}
        else:
            self._names = {p: f"noname.{i}" for i, p in enumerate(all_params)}
        self._parameter_names = self._names  # Horovod's name
        self._requires_update = [p for p in all_params if p.requires_grad]
        self._starts = {p: torch.zeros_like(p, memory_format=torch.contiguous_format)
                        for p in self._requires_update}
        self._handles = {}  # param -> (Handle, compressed delta, ctx)
        self._passes = {p: 0 for p in self._requires_update}
        self._hooks = []
        for p in self._requires_update:
            if hasattr(p, "register_post_accumulate_grad_hook"):
                self._hooks.append(p.register_post_accumulate_grad_hook(self._adasum_hook))
            else:  # torch < 2.1: hook the gradient accumulator node
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._hooks.append(acc.register_hook(lambda *_, p=p: self._adasum_hook(p)))
                self._hooks.append(acc)

    def _adasum_hook(self, p):
        if p in self._handles or self._passes[p] >= self.backward_passes_per_step:
            raise AssertionError(
                "hvd.torch.DistributedOptimizer: gradients were computed more than "
                f"backward_passes_per_step ({self.backward_passes_per_step}) times before "
                "step(); raise backward_passes_per_step to accumulate")
        self._passes[p] += 1
        if self._passes[p] == self.backward_passes_per_step:
            self._handles[p] = self._adasum_delta_async(p)

    def _adasum_delta_async(self, p):
        start = self._starts[p]
        with torch.no_grad():
            start.copy_(p)
        # The wrapped optimizer's step on p alone (a parameter without a
        # gradient is left as it is: its delta is zero).
        saved = [g["params"] for g in self.param_groups]
        try:
            for g in self.param_groups:
                g["params"] = [p] if any(q is p for q in g["params"]) else []
            super(self.__class__, self).step()
        finally:
            for g, ps in zip(self.param_groups, saved):
                g["params"] = ps
        with torch.no_grad():
            delta = (p - start).contiguous()
            p.copy_(start)
        compressed, cctx = self._compression.compress(delta)
        handle = _t.allreduce_async_(compressed, name=f"DistributedOptimizer.{self._names[p]}",
                                     op=Adasum, process_set=self._process_set)
        return handle, compressed, cctx

    def synchronize(self):
        """Starts the reduction of every parameter whose hook did not fire
        (unused this step); step() waits and applies."""
        for p in self._requires_update:
            if p not in self._handles:
                self._handles[p] = self._adasum_delta_async(p)

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Accepted for Horovod compatibility: with Adasum step() always applies
        the reduced updates."""
        yield

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        self.synchronize()
        try:
            for p, (handle, compressed, cctx) in list(self._handles.items()):
                handle.wait()
                delta = self._compression.decompress(compressed, cctx)
                with torch.no_grad():
                    p.copy_(self._starts[p] + delta.to(p.dtype))
        finally:
            self._handles.clear()
            for p in self._passes:
                self._passes[p] = 0
        return loss

    def _hvd_drop_pending(self):
        """Forgets the reductions of a step that failed (an elastic reset follows)."""
        self._handles.clear()
        for p in self._passes:
            self._passes[p] = 0

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError(
                "hvd.torch.DistributedOptimizer: zero_grad() was called after backward() but "
                "before step(): the pending Adasum reductions would be lost")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def _check_groups(groups):
    """Horovod's checks of DistributedOptimizer's groups: a positive int, or a
    list of lists of tensors in which no tensor appears twice."""
    if isinstance(groups, list):
        seen = set()
        for g in groups:
            for p in g:
                if not isinstance(p, torch.Tensor):
                    raise ValueError("hvd.torch.DistributedOptimizer: groups must consist of "
                                     f"torch.Tensor, got a {type(p).__name__}")
                if id(p) in seen:
                    raise ValueError("hvd.torch.DistributedOptimizer: a parameter can only "
                                     "appear once in groups")
                seen.add(id(p))
        return groups
    if isinstance(groups, bool) or not isinstance(groups, int) or groups <= 0:
        raise ValueError("hvd.torch.DistributedOptimizer: groups should be a positive integer "
                         f"or a list of lists of torch.Tensor, got {groups!r}")
    return groups


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps a torch optimizer so that step() applies the gradients averaged
    (op) over all ranks. Each gradient's allreduce starts from a hook as soon
    as autograd has accumulated it (after `backward_passes_per_step` backward
    passes), so communication overlaps the rest of backward; step() waits.

    Sparse gradients (nn.Embedding(sparse=True)) are reduced as Horovod does:
    their indices and values are allgathered (sparse_allreduce_async), or, with
    sparse_as_dense=True, they are allreduced as dense tensors (with
    compression and gradient_predivide_factor) and made sparse again.

    groups (Horovod's): gradients reduced together as grouped allreduces,
    each started once every member's gradient is ready. An int n splits the
    parameters that need gradients (in rank 0's order of names) into n
    groups of nearly equal length (a collective when the optimizer is built:
    rank 0's order is broadcast); a list of lists of parameters makes each
    inner list a group and every other parameter a group of its own. A group
    is named "DistributedOptimizer.group.<name of its first parameter>" (one
    grouped allreduce per dtype). num_groups=n is Horovod's deprecated
    spelling of groups=n (DeprecationWarning).

    op=hvd.Adasum (Horovod's): the parameter update is reduced instead of the
    gradient: each rank applies its own step to a parameter as soon as its
    gradient is ready, the deltas (new - old) are combined with Adasum, and
    step() sets param = old + adasum(deltas) on every rank. No groups, no
    gradient_predivide_factor; the wrapped optimizer's state stays local.

    process_set (Horovod's): gradients are reduced (averaged) among the set's
    ranks only, e.g. to train one model per set; every rank of the set must
    wrap the same model. On a rank outside the set (a registered set), as in
    Horovod, the optimizer registers no hooks and reduces nothing: step() is
    the wrapped optimizer's own, with this rank's gradients (its weights then
    differ from the members').

    In a world of one (hvd.size() == 1) that is not elastic, as in Horovod,
    it registers no hooks either: step() is the wrapped optimizer's own, so
    a single-process run pays nothing per gradient and its gradients are
    exactly autograd's (no compression round trip). An elastic job of one
    rank reduces, since ranks may join.

    The result is an instance of a subclass of optimizer's class built from
    its param_groups (wrap before training: existing state is carried over)."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError("hvd.torch.DistributedOptimizer: expected a torch.optim.Optimizer, got "
                        f"{type(optimizer).__name__}")
    member = _is_member(process_set)
    # As Horovod's: in a world of one that is not elastic (one that is may
    # grow) there is nothing to reduce, and the optimizer is the wrapped one's
    # own: no hooks, no allreduce a gradient (their Python cost, and the
    # rounding of a compression, would buy nothing).
    alone = member and _world_of_one()
    if num_groups != 0:
        warnings.warn("hvd.torch.DistributedOptimizer: num_groups has been replaced by groups",
                      DeprecationWarning, stacklevel=2)
        if groups is None:
            groups = num_groups
    if _ops.check_op(op) == Adasum and member and not alone:
        if gradient_predivide_factor != 1.0:
            raise ValueError("hvd.torch.DistributedOptimizer: gradient_predivide_factor needs "
                             "op=Average")
        if groups is not None:
            raise ValueError("hvd.torch.DistributedOptimizer: groups are not supported with "
                             "op=Adasum (each parameter's update is combined on its own)")
        return _wrap(_DistributedAdasumOptimizer, optimizer, named_parameters, compression,
                     backward_passes_per_step, process_set)
    if groups is not None:
        _check_groups(groups)
    return _wrap(_DistributedOptimizer, optimizer, named_parameters, compression,
                 backward_passes_per_step, op, gradient_predivide_factor, sparse_as_dense, groups,
                 process_set, member and not alone)


def _world_of_one():
    """Whether the default context has one rank and is not elastic."""
    if size() != 1:
        return False
    from .. import elastic
    try:
        return not elastic.membership().elastic
    except C.UnsupportedError:  # a libhvd without elastic jobs
        return True


def _is_member(process_set):
    """Whether this rank is in process_set, a set registered on the default
    context (ValueError for one that is not registered, or was removed)."""
    try:
        _t._target(process_set)
        return True
    except ValueError:
        if getattr(process_set, "process_set_id", None) is not None and \
                process_set.included() is False:
            return False
        raise


def _wrap(mixin, optimizer, *args):
    """An instance of a subclass of optimizer's class with mixin's methods,
    built from optimizer's param_groups (args go to mixin's __init__), with
    optimizer's state."""
    methods = {k: v for k, v in mixin.__dict__.items() if k not in ("__dict__", "__weakref__")}
    methods["_hvd_distributed"] = True
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), methods)
    opt = cls(optimizer.param_groups, *args)
    opt.state.update(optimizer.state)
    _distributed_optimizers.add(opt)
    return opt


# Every DistributedOptimizer, for hvd.elastic.run: after a failed step their
# pending reductions are dropped before the state is restored.
_distributed_optimizers = weakref.WeakSet()


def _drop_pending_reductions():
    for opt in list(_distributed_optimizers):
        opt._hvd_drop_pending()


__all__ = ["DistributedOptimizer"]
