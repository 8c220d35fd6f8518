# Contexts and process sets.
#
# An `Hvd.Context` is what MPI.jl calls a communicator: every collective
# takes one as its last positional argument (MPI.jl's place for `comm`), and
# the forms without one use the default context (the one `Hvd.init` makes).
# A process set is a context over some of the default context's ranks
# (hvd_context_split / hvd_process_set_create in hvd.h); it shares the
# parent's connections and background thread, and has its own ranks
# (0 .. n-1), names and response cache.
#
# Each context has its own counters for generated names (see "Names" in
# Hvd.jl): the ranks of one set must issue their unnamed operations in the
# same order, but a rank's unnamed operations in other sets (which other
# ranks do not see) must not shift the names it makes in this one.

"""
    Hvd.Context

A communicator: the default context (`Hvd.default_context()`, the one
`Hvd.init` makes) or a process set (`Hvd.split`, `Hvd.process_set`). Pass it
as the last positional argument of any collective (`allreduce!(A, +, set)`,
`Hvd.broadcast!(A, root, set)`, `Hvd.barrier(set)`) and of the topology
queries (`Hvd.rank(set)`, `Hvd.size(set)`). A process set is closed with
`close(set)`, collectively over its members; it is not closed by the garbage
collector.
"""
mutable struct Context
    ptr::Ptr{Cvoid}                  # C_NULL: the default context
    parent::Union{Nothing,Context}   # nothing for the default context
    members::Vector{Int}             # the parent's ranks of the members (a set)
    names::Dict{String,Int}          # generated-name counters per kind
    busy::Dict{String,Bool}          # fixed blocking names in flight per kind
    closed::Bool
end

# The default context: C_NULL on every call, i.e. whichever default context
# exists then (Hvd.init may run again after Hvd.shutdown). Its name tables are
# NAME_COUNTERS and BLOCKING_BUSY, reset when the default context is created.
const DEFAULT_CONTEXT = Context(C_NULL, nothing, Int[], NAME_COUNTERS, BLOCKING_BUSY, false)

"""
    Hvd.default_context() -> Hvd.Context

The default context (MPI.jl's `MPI.COMM_WORLD`): every rank of the job once
`Hvd.init()` has run. Collectives called without a context use it.
"""
default_context() = DEFAULT_CONTEXT

"""`true` for a process set (`Hvd.split`, `Hvd.process_set`), `false` for the default context."""
is_process_set(ctx::Context) = ctx.parent !== nothing

"""
    Hvd.UNDEFINED_COLOR

The color that joins no set in `Hvd.split` (`HVD_UNDEFINED_COLOR`, MPI.jl's
`MPI.UNDEFINED`): the rank gets `nothing`.
"""
const UNDEFINED_COLOR = -1

# Process sets not yet closed: freed at exit after the default context is
# shut down (then each only frees memory; see shutdown_at_exit).
const LIVE_SETS = IdDict{Context,Nothing}()
const SETS_LOCK = ReentrantLock()

# The C context of `ctx` for a call named `what`; a closed set is refused
# here, since its C object is gone.
function ctxptr(ctx::Context, what::AbstractString = "this call")
    ctx.closed && throw(HvdError(Int(HVD_ERR_ABORTED),
                                 "$what: the process set was closed (close(set)); make a new one " *
                                 "to go on"))
    return ctx.ptr
end

function Base.show(io::IO, ctx::Context)
    if !is_process_set(ctx)
        print(io, "Hvd.Context(default)")
    elseif ctx.closed
        print(io, "Hvd.Context(closed process set of parent ranks ", ctx.members, ")")
    else
        print(io, "Hvd.Context(process set of parent ranks ", ctx.members, ")")
    end
end

# A new set's Julia object, registered for the exit hook.
function new_set(ptr::Ptr{Cvoid}, parent::Context)
    set = Context(ptr, parent, Int[], Dict{String,Int}(), Dict{String,Bool}(), false)
    lock(() -> (LIVE_SETS[set] = nothing), SETS_LOCK)
    set.members = parent_ranks(set)
    return set
end

# Integer arguments the library takes as int32: nothing for anything else
# (a non-integer, a Bool, a value out of range).
int32_or_nothing(x) =
    x isa Integer && !(x isa Bool) && typemin(Int32) <= x <= typemax(Int32) ? Int32(x) : nothing

"""
    Hvd.split(ctx, color; key = Hvd.rank(ctx)) -> Hvd.Context or nothing

MPI.jl's `MPI.Comm_split(comm, color, key)`: the ranks of `ctx` passing the
same `color >= 0` form one process set, their ranks in it ordered by
`(key, rank in ctx)`. Returns the set on its members and **`nothing`** on a
rank that passed `Hvd.UNDEFINED_COLOR` (where MPI.jl returns
`MPI.COMM_NULL`: `nothing` cannot be used as a context by mistake, and
`set === nothing` / `something` read as Julia does elsewhere).

Collective over `ctx`: every rank of it calls, in the same order as its
other `Hvd.split` / `Hvd.process_set` calls on `ctx`, from one task. A bad
color on any rank (below -1, not an integer) makes every rank throw an
`HvdError(HVD_ERR_INVALID_ARGUMENT)` naming that rank, and ranks mixing
`split` with `process_set` get `HVD_ERR_MISMATCH`; nothing is made then.
`ctx` must be the default context: sets of sets are refused
(`HVD_ERR_UNSUPPORTED`; split the default context instead). A set of more
than one rank needs a transport with point-to-point (gloo, mpi).
"""
function Base.split(ctx::Context, color; key = nothing)
    p = ctxptr(ctx, "Hvd.split")
    c = int32_or_nothing(color)
    k = key === nothing ? Int32(0) : int32_or_nothing(key)
    local_error = c === nothing ? "color $(repr(color)) is not an Int32 integer" :
                  k === nothing ? "key $(repr(key)) is not an Int32 integer" : nothing
    if local_error === nothing && key === nothing
        k = Int32(rank(ctx))
    end
    # A color or key the library cannot take still takes part (as a color it
    # refuses), so that every rank fails together rather than the others
    # waiting for this one.
    cc = local_error === nothing ? c : Int32(-2)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    st = hvd_context_split(p, cc, something(k, Int32(0)), out)
    if local_error !== nothing   # the library refused -2 (on every rank); ours is exact
        throw(ArgumentError("Hvd.split: $local_error (a color is >= 0 or Hvd.UNDEFINED_COLOR; " *
                            "every rank of the context failed with this rank named)"))
    end
    check_status(st)
    out[] == C_NULL && return nothing
    return new_set(out[], ctx)
end

"""
    Hvd.process_set(ctx, ranks) -> Hvd.Context or nothing

A process set of the ranks of `ctx` listed in `ranks` (ascending, no
duplicates, the same list on every rank, e.g. `[0, 2]` or `0:1`); rank `i`
of the set is `ranks[i+1]`. Returns the set on its members and `nothing` on
the other ranks of `ctx`.

Collective over `ctx`, as `Hvd.split`. A bad list on any rank (empty,
unsorted, a duplicate, a rank out of range, an entry that is not an integer)
makes every rank throw an `HvdError(HVD_ERR_INVALID_ARGUMENT)` naming that
rank and its list; lists that differ between ranks make every rank throw
`HVD_ERR_MISMATCH`. Nothing is made then. Sets of sets are refused
(`HVD_ERR_UNSUPPORTED`).
"""
function process_set(ctx::Context, ranks)
    p = ctxptr(ctx, "Hvd.process_set")
    list = Int32[]
    local_error = nothing
    if ranks isa Union{AbstractArray,Tuple}
        for (i, r) in enumerate(ranks)
            v = int32_or_nothing(r)
            if v === nothing
                local_error === nothing &&
                    (local_error = "the rank list $(repr(ranks)) has entry $i = $(repr(r)), which " *
                                   "is not an Int32 integer")
                v = Int32(-1)   # refused by the library on every rank
            end
            push!(list, v)
        end
    else
        local_error = "the ranks must be a vector, range or tuple of integers, got $(typeof(ranks))"
        push!(list, Int32(-1))
    end
    out = Ref{Ptr{Cvoid}}(C_NULL)
    st = GC.@preserve list hvd_process_set_create(p, Int32(length(list)), list, out)
    if local_error !== nothing   # the library refused the -1 (on every rank)
        throw(ArgumentError("Hvd.process_set: $local_error (every rank of the context failed " *
                            "with this rank named)"))
    end
    check_status(st)
    out[] == C_NULL && return nothing
    return new_set(out[], ctx)
end

"""
    Hvd.parent_ranks(ctx) -> Vector{Int}

The ranks in the parent context of `ctx`'s members, in `ctx`'s rank order
(`parent_ranks(set)[Hvd.rank(set) + 1] == Hvd.rank()`). For the default
context: `0:size-1`.
"""
function parent_ranks(ctx::Context)
    p = ctxptr(ctx, "Hvd.parent_ranks")
    n = size(ctx)
    out = zeros(Int32, n)
    @check hvd_context_parent_ranks(p, out, Int32(n))
    return Int.(out)
end

"""
    close(set::Hvd.Context)

Destroys a process set. Collective over the set's members: it returns once
every member has closed it (bounded by the stall inspector, as any
operation); operations still pending in the set complete with
`HvdError(HVD_ERR_ABORTED)`, and later uses of `set` throw that error at
once. Closing a closed set does nothing. The default context is ended with
`Hvd.shutdown()`, not `close`. Sets left open are freed at exit, after the
default context is shut down.
"""
function Base.close(ctx::Context)
    is_process_set(ctx) ||
        throw(ArgumentError("Hvd: close(ctx) closes process sets; the default context is ended " *
                            "with Hvd.shutdown()"))
    ctx.closed && return nothing
    p = ctx.ptr
    ctx.closed = true         # the library frees the set whatever it returns
    ctx.ptr = C_NULL
    lock(() -> delete!(LIVE_SETS, ctx), SETS_LOCK)
    @check hvd_context_destroy(p)
    return nothing
end

"""`isopen(ctx)`: `false` once a process set was closed."""
Base.isopen(ctx::Context) = !ctx.closed

# At exit: frees the sets the program left open. Called once the default
# context is shut down, so no destroy waits for other ranks.
function free_live_sets()
    sets = lock(() -> collect(keys(LIVE_SETS)), SETS_LOCK)
    for s in sets
        s.closed && continue
        p = s.ptr
        s.closed = true
        s.ptr = C_NULL
        hvd_context_destroy(p)
    end
    lock(() -> empty!(LIVE_SETS), SETS_LOCK)
end
