# Elastic jobs (docs/elastic.md): the C calls on a context (Hvd.reset!,
# Hvd.membership) and Horovod's elastic loop (Hvd.Elastic).

"""
    Hvd.Membership(elastic, hosts_updated, epoch)

A context's place in an elastic job (`hvd_context_membership`): `elastic`
(an elastic job: `Hvd.reset!` works), `hosts_updated` (the launcher added or
removed hosts since this epoch formed), `epoch` (0 the first, and 0 outside
an elastic job).
"""
struct Membership
    elastic::Bool
    hosts_updated::Bool
    epoch::Int
end

function require_elastic_symbol(fp::Base.RefValue{Ptr{Cvoid}}, what::AbstractString)
    fp[] == C_NULL || return
    throw(HvdError(Int(HVD_ERR_UNSUPPORTED),
                   "$what: $(LIB_PATH[]) predates elastic jobs (no hvd_context_reset / " *
                   "hvd_context_membership); rebuild it or set HVD_LIBRARY_PATH to a newer build"))
end

"""
    Hvd.membership([ctx]) -> Hvd.Membership

The default context's (or `ctx`'s) `Hvd.Membership`. `hosts_updated` costs
one round trip to the launcher's store; a process set answers for its
parent's job.
"""
function membership(ctx::Context = DEFAULT_CONTEXT)
    require_elastic_symbol(_fp_hvd_context_membership, "Hvd.membership")
    out = Ref(HvdMembership(sizeof(HvdMembership), 0, 0, 0))
    @check hvd_context_membership(ctxptr(ctx, "Hvd.membership"), out)
    m = out[]
    return Membership(m.elastic != 0, m.hosts_updated != 0, Int(m.epoch))
end

"""
    Hvd.reset!([ctx])

Forms the job again after its membership changed (`hvd_context_reset`):
pending operations complete with `MembershipChanged`, the context leaves its
epoch, waits (at most the elastic timeout) for the launcher to form the next
one, and takes the rank and size it is given there. Collective over the new
membership; no other task may use the context meanwhile.

Process sets made from the context stop: they are closed here (later uses
throw); make them again. Unnamed operations are numbered from 0 again, as
on a worker that just started.

Throws `MembershipChanged` when forming the new epoch failed (a peer lost
again: reset again) or the launcher ended the job (`Hvd.launcher_ended(e)`),
and `HvdError(HVD_ERR_UNSUPPORTED)` outside an elastic job and for a process
set.
"""
function reset!(ctx::Context = DEFAULT_CONTEXT)
    require_elastic_symbol(_fp_hvd_context_reset, "Hvd.reset!")
    @check hvd_context_reset(ctxptr(ctx, "Hvd.reset!"))
    # The sets stopped with the old epoch: destroying them is local now.
    sets = lock(SETS_LOCK) do
        [s for s in keys(LIVE_SETS) if s.parent === ctx && !s.closed]
    end
    for s in sets
        p = s.ptr
        s.closed = true
        s.ptr = C_NULL
        lock(() -> delete!(LIVE_SETS, s), SETS_LOCK)
        hvd_context_destroy(p)
    end
    if ctx === DEFAULT_CONTEXT
        reset_names!()
    else
        lock(() -> (empty!(ctx.names); empty!(ctx.busy)), NAME_LOCK)
    end
    return nothing
end

"""
    Hvd.Elastic

Horovod's elastic training for Julia: `State`s to go back to, and
`Hvd.Elastic.run`, which runs a training function until it returns, going
back to the last commit when the job's membership changes.

```julia
using Hvd
Hvd.init()
state = Hvd.Elastic.ObjectState((epoch = 1, batch = 1, W = zeros(10)))
Hvd.Elastic.run(state) do s
    while s[].epoch <= epochs
        W = train_batch(s[].W)                  # collectives
        s[] = next(s[], W)
        Hvd.Elastic.commit!(s)                  # may throw HostsUpdatedInterrupt
    end
    return s[]
end
```
"""
module Elastic

using Serialization
using ..Hvd: Hvd, Context, MembershipChanged, HvdError, launcher_ended

export State, ObjectState, HostsUpdatedInterrupt, commit!, restore!, sync!, save!,
       check_host_updates!, register_reset_callback!

"""
    HostsUpdatedInterrupt(skip_sync = false)

Thrown by `commit!` (on every rank at the same commit) when the launcher
added or removed hosts since this epoch formed: `run` then resets without
restoring the state, so that new workers join. `skip_sync` (Horovod's): the
state need not be synced after the reset; hvd cannot tell added hosts from
removed ones, so it is `false` when hvd throws it.
"""
struct HostsUpdatedInterrupt <: Exception
    skip_sync::Bool
end
HostsUpdatedInterrupt() = HostsUpdatedInterrupt(false)

Base.showerror(io::IO, e::HostsUpdatedInterrupt) =
    print(io, "HostsUpdatedInterrupt: the launcher changed the hosts of this elastic job",
          e.skip_sync ? " (state sync skipped)" : "")

# ---------------------------------------------------------------------------
# What the machinery needs from a communicator. ContextBackend is the real
# one; the tests pass their own Backend.
# ---------------------------------------------------------------------------
"""
    Hvd.Elastic.Backend

What `State`s and `run` need from a communicator: `membership(b)`,
`reset!(b)`, `rank(b)`, `any_rank(b, flag, name)` (true on every rank when
`flag` is on any; collective), `broadcast_bytes(b, bytes, root, name)`
(`root`'s bytes on every rank; collective). `ContextBackend(ctx)` is the one
over an `Hvd.Context`.
"""
abstract type Backend end

"""`ContextBackend(ctx = Hvd.default_context())`: a `Backend` over an `Hvd.Context`."""
struct ContextBackend <: Backend
    ctx::Context
end
ContextBackend() = ContextBackend(Hvd.default_context())

membership(b::ContextBackend) = Hvd.membership(b.ctx)
reset!(b::ContextBackend) = Hvd.reset!(b.ctx)
rank(b::ContextBackend) = Hvd.rank(b.ctx)
any_rank(b::ContextBackend, flag::Bool, name::AbstractString) =
    Hvd.allreduce!(Int32[flag ? 1 : 0], b.ctx; op = Hvd.Max, name = name)[1] != 0
function broadcast_bytes(b::ContextBackend, bytes::Vector{UInt8}, root::Integer,
                         name::AbstractString)
    isroot = Hvd.rank(b.ctx) == root
    n = Hvd.broadcast!(Int64[isroot ? length(bytes) : 0], root, b.ctx; name = name * ".length")[1]
    n == 0 && return UInt8[]
    buf = isroot ? copy(bytes) : Vector{UInt8}(undef, n)
    return Hvd.broadcast!(buf, root, b.ctx; name = name * ".data")
end

# ---------------------------------------------------------------------------
# States
# ---------------------------------------------------------------------------
"""
    Hvd.Elastic.State

What training needs to go on after a reset. A subtype implements `save!(s)`
(keep a copy), `restore!(s)` (go back to it) and `sync!(s)` (rank 0's copy
to every rank; collective), and has the fields `backend::Backend` and
`reset_callbacks::Vector{Any}` (or methods `backend(s)`,
`reset_callbacks(s)`). `ObjectState` is one for any value `Serialization`
can write.
"""
abstract type State end

backend(s::State) = s.backend
reset_callbacks(s::State) = s.reset_callbacks

"""`save!(s)`: keeps a copy of the state to go back to."""
function save! end
"""`restore!(s)`: goes back to the last saved copy."""
function restore! end
"""`sync!(s)`: makes every rank's state rank 0's (collective)."""
function sync! end

"""
    register_reset_callback!(s, f)

Calls `f()` after every reset, after the callbacks registered before it and
before the state is synced (e.g. to scale the learning rate to the new size).
"""
register_reset_callback!(s::State, f) = (push!(reset_callbacks(s), f); s)

"""`on_reset!(s)`: called by `run` after a reset: the reset callbacks in order."""
function on_reset!(s::State)
    for f in reset_callbacks(s)
        f()
    end
    return nothing
end

"""
    check_host_updates!(s)

Throws `HostsUpdatedInterrupt` on every rank when the launcher changed the
hosts since this epoch formed (on any rank's reading: the ranks agree with one
allreduce, so all of them throw at the same commit). Outside an elastic job
there is nothing to check and no collective.
"""
function check_host_updates!(s::State)
    b = backend(s)
    m = membership(b)
    m.elastic || return nothing
    any_rank(b, m.hosts_updated, "elastic.hosts_updated") && throw(HostsUpdatedInterrupt(false))
    return nothing
end

"""
    commit!(s)

`save!(s)`, then `check_host_updates!(s)`: a copy to go back to after a
failure. Call it at the same points on every rank (collective in an elastic
job); throws `HostsUpdatedInterrupt` when hosts changed.
"""
function commit!(s::State)
    save!(s)
    check_host_updates!(s)
    return nothing
end

"""
    ObjectState(value; ctx = Hvd.default_context(), backend = ContextBackend(ctx))

A `State` holding one value (a NamedTuple of counters and arrays, a struct, a
Dict): `s[]` reads it, `s[] = v` replaces it. `save!` keeps a serialized copy
(changes made in place afterwards do not reach it), `restore!` sets a fresh
copy again, `sync!` broadcasts rank 0's saved copy and sets it on every rank.
The value given here is the first copy to go back to.
"""
mutable struct ObjectState <: State
    value::Any
    saved::Vector{UInt8}
    backend::Backend
    reset_callbacks::Vector{Any}
end

ObjectState(value; ctx::Context = Hvd.default_context(), backend::Backend = ContextBackend(ctx)) =
    ObjectState(value, to_bytes(value), backend, Any[])

Base.getindex(s::ObjectState) = s.value
Base.setindex!(s::ObjectState, v) = (s.value = v; s)

save!(s::ObjectState) = (s.saved = to_bytes(s.value); nothing)
restore!(s::ObjectState) = (s.value = from_bytes(s.saved); nothing)
function sync!(s::ObjectState)
    s.saved = broadcast_bytes(s.backend, s.saved, 0, "elastic.object_state")
    s.value = from_bytes(s.saved)
    return nothing
end

function to_bytes(x)
    io = IOBuffer()
    serialize(io, x)
    return take!(io)
end
from_bytes(b::Vector{UInt8}) = deserialize(IOBuffer(b))

# ---------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------
"""
Resets in a row that may fail because the membership changed again (a peer
lost while the next epoch forms) before `run` gives up.
"""
const MAX_RESET_ATTEMPTS = 10

# The MembershipChanged or HostsUpdatedInterrupt behind an exception thrown
# by the function (tasks wrap what they throw).
function elastic_cause(e, depth = 0)
    e isa Union{MembershipChanged,HostsUpdatedInterrupt} && return e
    depth > 16 && return nothing
    if e isa TaskFailedException
        return elastic_cause(e.task.exception, depth + 1)
    elseif e isa CompositeException
        for x in e.exceptions
            c = elastic_cause(x, depth + 1)
            c === nothing || return c
        end
    end
    return nothing
end

# Whether a membership change can be recovered from: an elastic job's context.
function recoverable(b::Backend)
    try
        return membership(b).elastic
    catch e
        e isa MembershipChanged && return true   # the query met the changed membership
        e isa HvdError && return false
        rethrow()
    end
end

# reset!(b), tried again while the membership changes under it.
function reset_backend!(b::Backend)
    last = nothing
    for _ in 1:MAX_RESET_ATTEMPTS
        try
            reset!(b)
            return nothing
        catch e
            (e isa MembershipChanged && !launcher_ended(e)) || rethrow()
            last = e
        end
    end
    throw(MembershipChanged("Hvd.Elastic.run: $MAX_RESET_ATTEMPTS resets in a row failed; the " *
                            "last: $(last.message)"))
end

"""
    Hvd.Elastic.run(f, state)

Runs `f(state)` until it returns (its value is `run`'s), going back to the
last commit after a failure. Each round: `sync!(state)` (skipped after a
`HostsUpdatedInterrupt` with `skip_sync`), then `f(state)`.

- `MembershipChanged` (a peer was lost; also inside a `TaskFailedException`
  or `CompositeException`): `restore!(state)`, then a reset;
- `HostsUpdatedInterrupt` (from `commit!`): a reset;
- anything else, and a membership change outside an elastic job: thrown.

A reset is `Hvd.reset!` on the state's context (tried again while it fails
with a membership change, at most `MAX_RESET_ATTEMPTS` times; when the
launcher ends the job its `MembershipChanged` is thrown), then the state's
reset callbacks. A worker the launcher adds later runs the script from the
top and meets the others in `sync!`: it must do no collective before `run`.
"""
function run(f, state::State)
    b = backend(state)
    skip_sync = false
    while true
        try
            skip_sync || sync!(state)
            return f(state)
        catch e
            c = elastic_cause(e)
            if c isa MembershipChanged
                (launcher_ended(c) || !recoverable(b)) && rethrow()
                restore!(state)
                skip_sync = false
            elseif c isa HostsUpdatedInterrupt
                skip_sync = c.skip_sync
            else
                rethrow()
            end
        end
        reset_backend!(b)
        on_reset!(state)
    end
end

end # module Elastic
