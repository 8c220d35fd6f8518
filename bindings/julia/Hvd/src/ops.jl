# The collectives: an async form returning a Handle, and a blocking form that
# waits on it. Inputs go to the library as they are (no copies): they must be
# contiguous arrays of a supported element type (check_array). Results the
# library owns (allgather, alltoall, reducescatter) are copied once into a new
# Julia Array, which the caller then owns like any other; the library's
# memory is released with the handle.
#
# Dimensions: a Julia array of size (d1, ..., dn) is passed as the C tensor of
# shape (dn, ..., d1) -- the same bytes -- so the library's first dimension is
# the last Julia dimension, and result shapes are reversed back.
#
# Contexts: every operation takes an `Hvd.Context` as its last positional
# argument (MPI.jl's place for `comm`: `allreduce!(A, +, set)`); the forms
# without one run on the default context. Each public function has one method
# doing the work on a context, and thin methods that fill in the default.

# " in the process set of parent ranks [..]" for a set, "" for the default
# context: appended to what a Handle describes (timeouts name it).
where_text(ctx::Context) =
    is_process_set(ctx) ? " in the process set of parent ranks $(ctx.members)" : ""

const ScaleArg = Real

function check_scale(x, what)
    isfinite(x) || throw(ArgumentError("Hvd: $what must be finite, got $x"))
    return Float64(x)
end

function check_root(root)
    root isa Integer && !(root isa Bool) ||
        throw(ArgumentError("Hvd: root must be an integer rank, got $(repr(root))"))
    root isa Integer || throw(ArgumentError("Hvd: root must be an integer rank, got $(repr(root))"))
    typemin(Int32) <= root <= typemax(Int32) || throw(ArgumentError("Hvd: root $root out of range"))
    return Int32(root)
end

# The root of a broadcast given as a positional argument (`broadcast!(A, 1)`)
# or as MPI.jl's keyword (`broadcast!(A; root = 1)`); rank 0 when neither.
function pick_root(positional, keyword)
    if positional !== nothing && keyword !== nothing
        throw(ArgumentError("Hvd: root given twice (as an argument and as root = ...); pass one"))
    end
    return check_root(something(positional, keyword, 0))
end

# Dimensions of a result the handle owns, and a copy of its bytes.
function owned_result(raw::Ptr{Cvoid}, ::Type{T}) where {T}
    ndim = Ref{Int32}(0)
    dims = zeros(Int64, HVD_MAX_NDIM)
    @check hvd_handle_output_shape(raw, dims, Int32(HVD_MAX_NDIM), ndim)
    jdims = Tuple(Int.(reverse(dims[1:ndim[]])))
    out = Array{T}(undef, jdims)
    data = Ref{Ptr{Cvoid}}(C_NULL)
    nbytes = Ref{Csize_t}(0)
    @check hvd_handle_output(raw, data, nbytes)
    if nbytes[] != sizeof(out)
        throw(HvdError(Int(HVD_ERR_INTERNAL), "result has $(nbytes[]) bytes, but its shape " *
                       "$(jdims) of $T needs $(sizeof(out))"))
    end
    if nbytes[] > 0
        unsafe_copyto!(Ptr{UInt8}(pointer(out)), Ptr{UInt8}(data[]), nbytes[])
    end
    return out
end

function require_dims(A, what)
    ndims(A) >= 1 || throw(ArgumentError("Hvd: $what needs an array with at least one " *
                                         "dimension (it joins or splits the last); got a " *
                                         "0-dimensional array"))
end

# ---------------------------------------------------------------------------
# allreduce
# ---------------------------------------------------------------------------

"""
    allreduce_async!(A[, op][, ctx]; op=Hvd.Average, name=nothing, prescale=1, postscale=1) -> Handle

Starts an in-place allreduce of `A` over `ctx` (default: the default
context); `wait(h)` returns `A`. `A` must not be touched until then. `op` as
in `allreduce!`.
"""
function allreduce_async!(A::AbstractArray, ctx::Context; op = Average, name = nothing,
                          prescale::ScaleArg = 1, postscale::ScaleArg = 1)
    check_array(A, "allreduce! input")
    return submit_allreduce(ctx, A, A, reduce_op(op), op_name(ctx, "allreduce", name), prescale,
                            postscale)
end
allreduce_async!(A::AbstractArray; kw...) = allreduce_async!(A, DEFAULT_CONTEXT; kw...)
allreduce_async!(A::AbstractArray, op; kw...) =
    allreduce_async!(A, DEFAULT_CONTEXT; merge_op(kw, op)...)
allreduce_async!(A::AbstractArray, op, ctx::Context; kw...) =
    allreduce_async!(A, ctx; merge_op(kw, op)...)

"""
    allreduce_async(A[, op][, ctx]; op=Hvd.Average, name=nothing, prescale=1, postscale=1) -> Handle

Starts an allreduce of `A` into a new `Array`; `wait(h)` returns it.
"""
function allreduce_async(A::AbstractArray, ctx::Context; op = Average, name = nothing,
                         prescale::ScaleArg = 1, postscale::ScaleArg = 1)
    check_array(A, "allreduce input")
    out = Array{eltype(A)}(undef, Base.size(A))
    return submit_allreduce(ctx, A, out, reduce_op(op), op_name(ctx, "allreduce", name), prescale,
                            postscale)
end
allreduce_async(A::AbstractArray; kw...) = allreduce_async(A, DEFAULT_CONTEXT; kw...)
allreduce_async(A::AbstractArray, op; kw...) =
    allreduce_async(A, DEFAULT_CONTEXT; merge_op(kw, op)...)
allreduce_async(A::AbstractArray, op, ctx::Context; kw...) =
    allreduce_async(A, ctx; merge_op(kw, op)...)

function submit_allreduce(ctx, A, out, op, name, prescale, postscale)
    pre = check_scale(prescale, "prescale")
    post = check_scale(postscale, "postscale")
    p = ctxptr(ctx, "Hvd.allreduce")
    shape = c_shape(A)
    raw = GC.@preserve A out shape begin
        t = Ref(tensor(A, shape))
        submit(hvd_allreduce_async, p, name, t, Ptr{Cvoid}(pointer(out)), Cint(op), pre, post)
    end
    return Handle(raw, (A, out), _ -> out, "allreduce '$name'" * where_text(ctx))
end

"""
    allreduce!(A; op=Hvd.Average, name=nothing, prescale=1, postscale=1) -> A
    allreduce!(A, op; ...) -> A
    allreduce!(A[, op], ctx; ...) -> A

Reduces `A` over all ranks, in place: afterwards every rank holds
`postscale * op(prescale * A on each rank)`. Every rank must pass the same
element type and size. With a context `ctx` (a process set, see
`Hvd.split`), over its ranks only.

`op` is `Hvd.Sum`, `Hvd.Average`, `Hvd.Min`, `Hvd.Max`, `Hvd.Product`, `Hvd.Adasum`, or
Julia's `+`, `*`, `min`, `max` (as in MPI.jl: `allreduce!(A, +)` sums).
**Without `op` the result is the average** (the sum divided by the number of
ranks, as Horovod does for gradients), not a sum.

`name` matches the operation across ranks (generated when omitted: then the
ranks must issue their unnamed allreduces in the same order).
"""
allreduce!(A::AbstractArray, ctx::Context; name = nothing, kw...) =
    run_blocking(n -> allreduce_async!(A, ctx; name = n, kw...), ctx, "allreduce", name)
allreduce!(A::AbstractArray; kw...) = allreduce!(A, DEFAULT_CONTEXT; kw...)
allreduce!(A::AbstractArray, op; kw...) = allreduce!(A, DEFAULT_CONTEXT; merge_op(kw, op)...)
allreduce!(A::AbstractArray, op, ctx::Context; kw...) = allreduce!(A, ctx; merge_op(kw, op)...)

"""
    allreduce(A; op=Hvd.Average, name=nothing, prescale=1, postscale=1) -> Array
    allreduce(A, op; ...) -> Array
    allreduce(x::Number[, op]; ...) -> Number
    allreduce(A or x[, op], ctx; ...)

Like `allreduce!`, into a new array (or for one number: a loss, a count).
The default op is `Hvd.Average`; `allreduce(x, +)` sums.
"""
allreduce(A::AbstractArray, ctx::Context; name = nothing, kw...) =
    run_blocking(n -> allreduce_async(A, ctx; name = n, kw...), ctx, "allreduce", name)
allreduce(A::AbstractArray; kw...) = allreduce(A, DEFAULT_CONTEXT; kw...)
allreduce(A::AbstractArray, op; kw...) = allreduce(A, DEFAULT_CONTEXT; merge_op(kw, op)...)
allreduce(A::AbstractArray, op, ctx::Context; kw...) = allreduce(A, ctx; merge_op(kw, op)...)
allreduce(x::SupportedEltype, ctx::Context; kw...) = allreduce!(fill(x), ctx; kw...)[]
allreduce(x::Number, ctx::Context; kw...) =
    throw(ArgumentError("Hvd: element type $(typeof(x)) is not supported " *
                        "(supported: $SUPPORTED_TEXT)"))
allreduce(x::Number; kw...) = allreduce(x, DEFAULT_CONTEXT; kw...)
allreduce(x::Number, op; kw...) = allreduce(x, DEFAULT_CONTEXT; merge_op(kw, op)...)
allreduce(x::Number, op, ctx::Context; kw...) = allreduce(x, ctx; merge_op(kw, op)...)

"""
    grouped_allreduce_async!(arrays[, op][, ctx]; op=Hvd.Average, name=nothing, prescale=1, postscale=1) -> Handle

Starts in-place allreduces of several arrays that are negotiated and fused as
one unit (none starts before all are ready on every rank); `wait(h)` returns
the collection. The arrays must be distinct and share one element type (the
library's rule for a group).
"""
function grouped_allreduce_async!(arrays, ctx::Context; op = Average, name = nothing,
                                  prescale::ScaleArg = 1, postscale::ScaleArg = 1)
    rop = reduce_op(op)
    As = collect(arrays)
    isempty(As) && throw(ArgumentError("Hvd: grouped_allreduce! needs at least one array"))
    for (i, A) in enumerate(As)
        check_array(A, "grouped_allreduce! input $i")
    end
    distinct_or_throw(As, "grouped_allreduce!")
    pre = check_scale(prescale, "prescale")
    post = check_scale(postscale, "postscale")
    p = ctxptr(ctx, "Hvd.grouped_allreduce!")
    base = op_name(ctx, "grouped_allreduce", name)
    names = ["$base.$i" for i in 1:length(As)]
    shapes = [c_shape(A) for A in As]
    raw = GC.@preserve As names shapes begin
        ts = [tensor(A, s) for (A, s) in zip(As, shapes)]
        name_ptrs = [pointer(n) for n in names]
        outs = Ptr{Cvoid}[Ptr{Cvoid}(pointer(A)) for A in As]
        submit(hvd_grouped_allreduce_async, p, Int32(length(As)), name_ptrs, ts, outs,
               Cint(rop), pre, post)
    end
    return Handle(raw, As, _ -> arrays, "grouped allreduce '$base'" * where_text(ctx))
end
grouped_allreduce_async!(arrays; kw...) = grouped_allreduce_async!(arrays, DEFAULT_CONTEXT; kw...)
grouped_allreduce_async!(arrays, op; kw...) =
    grouped_allreduce_async!(arrays, DEFAULT_CONTEXT; merge_op(kw, op)...)
grouped_allreduce_async!(arrays, op, ctx::Context; kw...) =
    grouped_allreduce_async!(arrays, ctx; merge_op(kw, op)...)

"""
    grouped_allreduce!(arrays[, op][, ctx]; op=Hvd.Average, name=nothing, ...) -> arrays

Blocking form of `grouped_allreduce_async!`.
"""
grouped_allreduce!(arrays, ctx::Context; name = nothing, kw...) =
    run_blocking(n -> grouped_allreduce_async!(arrays, ctx; name = n, kw...), ctx,
                 "grouped_allreduce", name)
grouped_allreduce!(arrays; kw...) = grouped_allreduce!(arrays, DEFAULT_CONTEXT; kw...)
grouped_allreduce!(arrays, op; kw...) =
    grouped_allreduce!(arrays, DEFAULT_CONTEXT; merge_op(kw, op)...)
grouped_allreduce!(arrays, op, ctx::Context; kw...) =
    grouped_allreduce!(arrays, ctx; merge_op(kw, op)...)

function distinct_or_throw(As, what)
    seen = IdDict{Any,Nothing}()
    for A in As
        haskey(seen, A) && throw(ArgumentError("Hvd: $what got the same array twice"))
        seen[A] = nothing
    end
end

# ---------------------------------------------------------------------------
# broadcast
# ---------------------------------------------------------------------------

"""
    broadcast_async!(A[, root][, ctx]; root=0, name=nothing) -> Handle

Starts copying `root`'s `A` into every other rank's `A`; `wait(h)` returns
`A`. In a process set `root` is a rank within the set.
"""
function broadcast_async!(A::AbstractArray, pos_root, ctx::Context; root = nothing,
                          name = nothing)
    r = pick_root(pos_root, root)
    check_array(A, "broadcast! input")
    p = ctxptr(ctx, "Hvd.broadcast")
    n = op_name(ctx, "broadcast", name)
    shape = c_shape(A)
    raw = GC.@preserve A shape begin
        t = Ref(tensor(A, shape))
        submit(hvd_broadcast_async, p, n, t, Ptr{Cvoid}(pointer(A)), r)
    end
    return Handle(raw, (A,), _ -> A, "broadcast '$n'" * where_text(ctx))
end
broadcast_async!(A::AbstractArray, ctx::Context; kw...) = broadcast_async!(A, nothing, ctx; kw...)
broadcast_async!(A::AbstractArray, pos_root = nothing; kw...) =
    broadcast_async!(A, pos_root, DEFAULT_CONTEXT; kw...)

"""
    Hvd.broadcast!(A; root=0, name=nothing) -> A
    Hvd.broadcast!(A, root; name=nothing) -> A
    Hvd.broadcast!(A[, root], ctx; ...) -> A

Copies rank `root`'s `A` into `A` on every rank (in place). All ranks pass an
array of the same element type and size. The root is a keyword (MPI.jl's
`Bcast!(A, comm; root = 0)`) or the second argument; in a process set `ctx`
it is a rank within the set.
"""
broadcast!(A::AbstractArray, root, ctx::Context; name = nothing, kw...) =
    run_blocking(n -> broadcast_async!(A, root, ctx; name = n, kw...), ctx, "broadcast", name)
broadcast!(A::AbstractArray, ctx::Context; kw...) = broadcast!(A, nothing, ctx; kw...)
broadcast!(A::AbstractArray, root = nothing; kw...) = broadcast!(A, root, DEFAULT_CONTEXT; kw...)

"""
    Hvd.broadcast(A; root=0, name=nothing) -> Array
    Hvd.broadcast(A, root; name=nothing) -> Array
    Hvd.broadcast(A[, root], ctx; ...) -> Array

Like `Hvd.broadcast!`, on a copy of `A`.
"""
function broadcast(A::AbstractArray, root, ctx::Context; kw...)
    check_array(A, "broadcast input")
    return broadcast!(copyto!(Array{eltype(A)}(undef, Base.size(A)), A), root, ctx; kw...)
end
broadcast(A::AbstractArray, ctx::Context; kw...) = broadcast(A, nothing, ctx; kw...)
broadcast(A::AbstractArray, root = nothing; kw...) = broadcast(A, root, DEFAULT_CONTEXT; kw...)

# ---------------------------------------------------------------------------
# allgather
# ---------------------------------------------------------------------------

"""
    allgather_async(A[, ctx]; name=nothing) -> Handle

Starts an allgather; `wait(h)` returns the new array (see `allgather`).
"""
function allgather_async(A::AbstractArray, ctx::Context; name = nothing)
    check_array(A, "allgather input")
    require_dims(A, "allgather")
    p = ctxptr(ctx, "Hvd.allgather")
    n = op_name(ctx, "allgather", name)
    T = eltype(A)
    shape = c_shape(A)
    raw = GC.@preserve A shape begin
        t = Ref(tensor(A, shape))
        submit(hvd_allgather_async, p, n, t)
    end
    return Handle(raw, (A,), r -> owned_result(r, T), "allgather '$n'" * where_text(ctx))
end
allgather_async(A::AbstractArray; kw...) = allgather_async(A, DEFAULT_CONTEXT; kw...)

"""
    allgather(A[, ctx]; name=nothing) -> Array
    allgather(x::Number[, ctx]; name=nothing) -> Vector

Concatenates every rank's `A`, in rank order, along the **last** dimension
(the library's first): vectors end to end (`vcat`), matrices column-wise
(`hcat`: with samples as columns, the gathered samples), N-d arrays along
dimension N. The last dimension may differ between ranks; the others must
agree. A number gives the vector of every rank's number.
"""
allgather(A::AbstractArray, ctx::Context; name = nothing) =
    run_blocking(n -> allgather_async(A, ctx; name = n), ctx, "allgather", name)
allgather(A::AbstractArray; kw...) = allgather(A, DEFAULT_CONTEXT; kw...)
allgather(x::SupportedEltype, ctx::Context; kw...) = allgather([x], ctx; kw...)
allgather(x::Number, ctx::Context; kw...) =
    throw(ArgumentError("Hvd: element type $(typeof(x)) is not supported " *
                        "(supported: $SUPPORTED_TEXT)"))
allgather(x::Number; kw...) = allgather(x, DEFAULT_CONTEXT; kw...)

# ---------------------------------------------------------------------------
# alltoall
# ---------------------------------------------------------------------------

"""
    alltoall_async(A[, splits][, ctx]; name=nothing) -> Handle

Starts an alltoall; `wait(h)` returns what `alltoall` returns.
"""
function alltoall_async(A::AbstractArray, splits, ctx::Context; name = nothing)
    check_array(A, "alltoall input")
    require_dims(A, "alltoall")
    p = ctxptr(ctx, "Hvd.alltoall")
    n = op_name(ctx, "alltoall", name)
    T = eltype(A)
    world = size(ctx)
    sp = nothing
    if splits !== nothing
        length(splits) == world ||
            throw(ArgumentError("Hvd: alltoall splits has $(length(splits)) entries; it needs one " *
                                "per rank ($world)"))
        all(s -> s isa Integer, splits) ||
            throw(ArgumentError("Hvd: alltoall splits must be integers"))
        sp = Int64[s for s in splits]
    end
    shape = c_shape(A)
    raw = GC.@preserve A shape sp begin
        t = Ref(tensor(A, shape))
        submit(hvd_alltoall_async, p, n, t, sp === nothing ? Ptr{Int64}(C_NULL) : pointer(sp))
    end
    finish = function (r)
        out = owned_result(r, T)
        splits === nothing && return out
        recv = zeros(Int64, world)
        @check hvd_handle_recv_splits(r, recv, Int32(world))
        return (out, Int.(recv))
    end
    return Handle(raw, (A, sp), finish, "alltoall '$n'" * where_text(ctx))
end
alltoall_async(A::AbstractArray, ctx::Context; kw...) = alltoall_async(A, nothing, ctx; kw...)
alltoall_async(A::AbstractArray, splits = nothing; kw...) =
    alltoall_async(A, splits, DEFAULT_CONTEXT; kw...)

"""
    alltoall(A[, ctx]; name=nothing) -> Array
    alltoall(A, splits[, ctx]; name=nothing) -> (Array, received_splits)

Sends slices of `A` along its **last** dimension to the ranks in order and
returns what every rank sent here, concatenated in rank order along the last
dimension. Without `splits`, the last dimension is split evenly (it must be
divisible by the number of ranks); with `splits` (one count per rank, summing
to `size(A)[end]`), rank `j` gets `splits[j+1]` slices, and the counts
received from each rank come back too. In a process set the ranks are the
set's.
"""
alltoall(A::AbstractArray, ctx::Context; name = nothing) =
    run_blocking(n -> alltoall_async(A, nothing, ctx; name = n), ctx, "alltoall", name)
alltoall(A::AbstractArray, splits, ctx::Context; name = nothing) =
    run_blocking(n -> alltoall_async(A, splits, ctx; name = n), ctx, "alltoall", name)
alltoall(A::AbstractArray; kw...) = alltoall(A, DEFAULT_CONTEXT; kw...)
alltoall(A::AbstractArray, splits; kw...) = alltoall(A, splits, DEFAULT_CONTEXT; kw...)

# ---------------------------------------------------------------------------
# reducescatter
# ---------------------------------------------------------------------------

"""
    reducescatter_async(A[, op][, ctx]; op=Hvd.Average, name=nothing, prescale=1, postscale=1) -> Handle

Starts a reducescatter; `wait(h)` returns this rank's block.
"""
function reducescatter_async(A::AbstractArray, ctx::Context; op = Average, name = nothing,
                             prescale::ScaleArg = 1, postscale::ScaleArg = 1)
    rop = reduce_op(op)
    check_array(A, "reducescatter input")
    require_dims(A, "reducescatter")
    pre = check_scale(prescale, "prescale")
    post = check_scale(postscale, "postscale")
    p = ctxptr(ctx, "Hvd.reducescatter")
    n = op_name(ctx, "reducescatter", name)
    T = eltype(A)
    shape = c_shape(A)
    raw = GC.@preserve A shape begin
        t = Ref(tensor(A, shape))
        submit(hvd_reducescatter_async, p, n, t, Cint(rop), pre, post)
    end
    return Handle(raw, (A,), r -> owned_result(r, T), "reducescatter '$n'" * where_text(ctx))
end
reducescatter_async(A::AbstractArray; kw...) = reducescatter_async(A, DEFAULT_CONTEXT; kw...)
reducescatter_async(A::AbstractArray, op; kw...) =
    reducescatter_async(A, DEFAULT_CONTEXT; merge_op(kw, op)...)
reducescatter_async(A::AbstractArray, op, ctx::Context; kw...) =
    reducescatter_async(A, ctx; merge_op(kw, op)...)

"""
    reducescatter(A; op=Hvd.Average, name=nothing, prescale=1, postscale=1) -> Array
    reducescatter(A, op; ...) -> Array
    reducescatter(A[, op], ctx; ...) -> Array

Reduces `A` over the ranks (`op` as in `allreduce!`; the default averages),
then rank `r` keeps its block of the **last** dimension: split as evenly as
possible, the first `size(A)[end] % size()` ranks getting one extra slice.
"""
reducescatter(A::AbstractArray, ctx::Context; name = nothing, kw...) =
    run_blocking(n -> reducescatter_async(A, ctx; name = n, kw...), ctx, "reducescatter", name)
reducescatter(A::AbstractArray; kw...) = reducescatter(A, DEFAULT_CONTEXT; kw...)
reducescatter(A::AbstractArray, op; kw...) =
    reducescatter(A, DEFAULT_CONTEXT; merge_op(kw, op)...)
reducescatter(A::AbstractArray, op, ctx::Context; kw...) = reducescatter(A, ctx; merge_op(kw, op)...)

# ---------------------------------------------------------------------------
# barrier, join
# ---------------------------------------------------------------------------

"""
`Hvd.barrier_async([ctx]) -> Handle`: completes once every rank (of `ctx`)
has called it.
"""
barrier_async(ctx::Context = DEFAULT_CONTEXT) =
    Handle(submit(hvd_barrier_async, ctxptr(ctx, "Hvd.barrier()")), nothing, _ -> nothing,
           "barrier" * where_text(ctx))

"""`Hvd.barrier([ctx])`: returns once every rank (of `ctx`) has called it."""
barrier(ctx::Context = DEFAULT_CONTEXT) = wait(barrier_async(ctx))

"""
`Hvd.join_async([ctx]) -> Handle`: marks this rank as out of data (uneven
inputs); see `Hvd.join`.
"""
join_async(ctx::Context = DEFAULT_CONTEXT) =
    Handle(submit(hvd_join_async, ctxptr(ctx, "Hvd.join()")), nothing, _ -> nothing,
           "join" * where_text(ctx))

"""
    Hvd.join([ctx])

Marks this rank as out of data and returns once every rank (of `ctx`) has
joined. Until then a joined rank takes part in the other ranks' allreduces
with zeros (`Average` still divides by the number of ranks); its other
collectives fail.
"""
join(ctx::Context = DEFAULT_CONTEXT) = wait(join_async(ctx))
