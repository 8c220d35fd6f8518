# Training helpers for Flux-style loops, on Julia's standard library only.
#
# They take parameters and gradients the way such loops hold them:
#   - any iterable of arrays (a Vector, a Tuple, what Flux.params(model) yields),
#   - NamedTuples (explicit-style gradients, nested as the model is; `nothing`
#     entries -- fields without a gradient -- are skipped),
#   - Dicts keyed by Symbols, strings or integers,
#   - plain structs holding arrays (a model; fields that are not arrays or
#     containers, such as activation functions, are skipped).
# Each array ("leaf") gets a path ("", ".W", ".layers.1.weight", ...) from
# where it sits; the operations are named after the paths, so the names are
# the same on every rank and from step to step (which lets the core's response
# cache skip the negotiation round in steady state).

# A leaf is (path, array).
const Leaf = Tuple{String,AbstractArray}

function leaves(x, what::AbstractString)
    out = Leaf[]
    collect_leaves!(out, "", x, false, what)
    return out
end

function collect_leaves!(out, path, x, in_struct::Bool, what)
    if x === nothing
        return
    elseif x isa AbstractArray
        if eltype(x) <: Number
            push!(out, (path, x))
        else
            for (i, v) in enumerate(x)
                collect_leaves!(out, "$path.$i", v, false, what)
            end
        end
    elseif x isa NamedTuple
        for k in keys(x)
            collect_leaves!(out, "$path.$k", x[k], false, what)
        end
    elseif x isa Tuple
        for (i, v) in enumerate(x)
            collect_leaves!(out, "$path.$i", v, false, what)
        end
    elseif x isa AbstractDict
        ks = collect(keys(x))
        for k in ks
            k isa Union{Symbol,AbstractString,Integer} ||
                throw(ArgumentError("Hvd: $what: a Dict keyed by $(typeof(k)) has no names that " *
                                    "agree across ranks; key it by Symbols or strings, or pass " *
                                    "the arrays as a vector (e.g. [grads[p] for p in params])"))
        end
        for k in sort(ks; by = string)
            collect_leaves!(out, "$path.$k", x[k], false, what)
        end
    elseif x isa Union{Function,Symbol,AbstractString,Type,Module}
        return
    elseif x isa Number
        in_struct && return   # a hyperparameter of a model, not a parameter
        throw(ArgumentError("Hvd: $what: the number at $(display_path(path)) cannot be updated " *
                            "in place; hold it in an array (fill(x)) or leave it out"))
    elseif hasmethod(iterate, Tuple{typeof(x)})
        for (i, v) in enumerate(x)
            collect_leaves!(out, "$path.$i", v, false, what)
        end
    elseif isstructtype(typeof(x))
        for f in fieldnames(typeof(x))
            isdefined(x, f) || continue
            collect_leaves!(out, "$path.$f", getfield(x, f), true, what)
        end
    else
        throw(ArgumentError("Hvd: $what: cannot find arrays in a $(typeof(x))"))
    end
    return
end

display_path(path) = isempty(path) ? "the top level" : path[2:end]

# Submits every distinct array (each array once, however often it appears),
# then waits for all, so the core can fuse them into few transfers.
function submit_all(leaves::Vector{Leaf}, what::AbstractString, submit_one)
    seen = IdDict{Any,Nothing}()
    unique = Leaf[]
    for (path, A) in leaves
        haskey(seen, A) && continue
        seen[A] = nothing
        check_array(A, "$what: array at $(display_path(path))")
        push!(unique, (path, A))
    end
    handles = Handle[]
    try
        for (path, A) in unique
            push!(handles, submit_one(path, A))
        end
    catch
        # Let what was submitted finish before reporting the failure.
        try
            wait_all(handles)
        catch
        end
        rethrow()
    end
    wait_all(handles)
    return
end

"""
    allreduce_gradients!(grads[, ctx]; op=Hvd.Average, name="allreduce_gradients", prescale=1, postscale=1) -> grads

Allreduces every gradient array in `grads` in place (averages them over the
ranks by default; `op` as in `allreduce!`, e.g. `op = +` to sum), over `ctx`
when given (a process set) or the default context. `grads` is an iterable of arrays, a (nested) NamedTuple,
a Dict keyed by names, or a struct holding arrays. All operations are
submitted before any is awaited, so the core fuses them. The ranks must pass
the same structure with the same sizes; each array is named
`name * path` (e.g. `"allreduce_gradients.W"`).
"""
function allreduce_gradients!(grads, ctx::Context = DEFAULT_CONTEXT; op = Average,
                              name = "allreduce_gradients", prescale::ScaleArg = 1,
                              postscale::ScaleArg = 1)
    op = reduce_op(op)
    ls = leaves(grads, "allreduce_gradients!")
    base = string(name)
    submit_all(ls, "allreduce_gradients!", (path, A) ->
        allreduce_async!(A, ctx; op = op, name = base * path, prescale = prescale,
                         postscale = postscale))
    return grads
end

"""
    broadcast_parameters!(params; root=0, name="broadcast_parameters") -> params
    broadcast_parameters!(params, root; name="broadcast_parameters") -> params
    broadcast_parameters!(params[, root], ctx; ...) -> params

Copies rank `root`'s parameter arrays into every rank's, in place, so all
ranks start from the same model (the ranks of `ctx` when given; `root` is
then a rank within it). `params` is any of what `allreduce_gradients!` takes
(a model struct too).
"""
function broadcast_parameters!(params, pos_root, ctx::Context; root = nothing,
                               name = "broadcast_parameters")
    r = pick_root(pos_root, root)
    ls = leaves(params, "broadcast_parameters!")
    base = string(name)
    submit_all(ls, "broadcast_parameters!", (path, A) ->
        broadcast_async!(A, ctx; root = r, name = base * path))
    return params
end
broadcast_parameters!(params, ctx::Context; kw...) =
    broadcast_parameters!(params, nothing, ctx; kw...)
broadcast_parameters!(params, pos_root = nothing; kw...) =
    broadcast_parameters!(params, pos_root, DEFAULT_CONTEXT; kw...)

# ---------------------------------------------------------------------------
# Optimisers.
# ---------------------------------------------------------------------------

"""
    Hvd.apply!(opt, x, Δ) -> step

The update-rule protocol (Flux's `apply!`): returns the step to subtract from
parameter `x` given its gradient `Δ` (and may overwrite `Δ` with it). Hvd
defines it for `Hvd.Descent` and `Hvd.Momentum`; add methods for your own
rules, or hand `DistributedOptimizer` another function (`apply = Flux.Optimise.apply!`).
"""
function apply! end

"""`Hvd.Descent(η=0.1)`: plain gradient descent, step `η .* Δ`."""
mutable struct Descent
    eta::Float64
end
Descent() = Descent(0.1)

apply!(o::Descent, x, Δ) = (Δ .*= o.eta; Δ)

"""`Hvd.Momentum(η=0.01, ρ=0.9)`: gradient descent with momentum (velocity per parameter)."""
mutable struct Momentum
    eta::Float64
    rho::Float64
    velocity::IdDict{Any,Any}
end
Momentum(eta = 0.01, rho = 0.9) = Momentum(eta, rho, IdDict{Any,Any}())

function apply!(o::Momentum, x, Δ)
    v = get!(() -> zero(x), o.velocity, x)
    v .= o.rho .* v .+ o.eta .* Δ
    Δ .= v
    return Δ
end

"""
    DistributedOptimizer(opt[, ctx]; apply=Hvd.apply!, op=Hvd.Average, name="DistributedOptimizer")

(`op` as in `allreduce!`: the gradients are averaged unless told otherwise;
over the ranks of `ctx` when given, e.g. a process set of model replicas.)

Wraps an update rule so that `Hvd.update!(dopt, params, grads)` first
allreduces (averages) the gradients over the ranks -- all submitted, then all
awaited, so they are fused -- and then applies `opt` to every parameter:
`x .-= apply(opt, x, Δ)`. With the same starting parameters on every rank
(`broadcast_parameters!`), the ranks then stay identical.
"""
struct DistributedOptimizer{O,F}
    opt::O
    apply::F
    op::ReduceOp
    name::String
    ctx::Context
end
DistributedOptimizer(opt, ctx::Context = DEFAULT_CONTEXT; apply = apply!, op = Average,
                     name = "DistributedOptimizer") =
    DistributedOptimizer(opt, apply, reduce_op(op), string(name), ctx)

Base.show(io::IO, d::DistributedOptimizer) = print(io, "DistributedOptimizer(", d.opt, ")")

"""
    Hvd.update!(dopt::DistributedOptimizer, params, grads) -> params

Averages `grads` over the ranks (of the optimizer's context) in place, then updates every parameter
with the wrapped rule. `params` and `grads` have the same structure (same
NamedTuple keys, same order of arrays), or `grads` is a dictionary keyed by
the parameter arrays themselves (Flux's implicit style, an `IdDict`).
Parameters without a gradient (`nothing`, or absent from the dictionary) are
left alone.
"""
function update!(d::DistributedOptimizer, params, grads)
    ps = leaves(params, "update! params")
    pairs = Tuple{String,AbstractArray,AbstractArray}[]
    if grads isa AbstractDict && !(params isa AbstractDict) && !isempty(grads) &&
       first(keys(grads)) isa AbstractArray
        for (path, p) in ps
            g = get(grads, p, nothing)
            g === nothing && continue
            g isa AbstractArray || throw(ArgumentError("Hvd: update!: the gradient of the " *
                                                       "parameter at $(display_path(path)) is a $(typeof(g))"))
            push!(pairs, (path, p, g))
        end
    else
        gs = Dict{String,AbstractArray}(leaves(grads, "update! grads"))
        known = Set(first.(ps))
        for path in keys(gs)
            path in known || throw(ArgumentError("Hvd: update!: the gradient at " *
                                                 "$(display_path(path)) has no parameter"))
        end
        for (path, p) in ps
            g = get(gs, path, nothing)
            g === nothing && continue
            Base.size(g) == Base.size(p) ||
                throw(DimensionMismatch("Hvd: update!: parameter at $(display_path(path)) has " *
                                        "size $(Base.size(p)), its gradient $(Base.size(g))"))
            push!(pairs, (path, p, g))
        end
    end
    # A parameter that appears twice (tied weights) is updated once.
    seen = IdDict{Any,Nothing}()
    pairs = filter(t -> haskey(seen, t[2]) ? false : (seen[t[2]] = nothing; true), pairs)
    base = d.name
    submit_all(Leaf[(path, g) for (path, _, g) in pairs], "update!", (path, G) ->
        allreduce_async!(G, d.ctx; op = d.op, name = base * path))
    for (_, p, g) in pairs
        p .-= d.apply(d.opt, p, g)
    end
    return params
end
