"""
    Hvd

Julia bindings for hvd, data-parallel collectives for deep-learning training
(libhvd.so through its C API, include/hvd.h).

```julia
using Hvd
Hvd.init()
g = rand(Float32, 10)
allreduce!(g)                      # average over the ranks, in place
broadcast_parameters!((W = W, b = b); root = 0)
Hvd.shutdown()
```

Arrays go to the library without copies when they are contiguous in memory
(`Array`s, contiguous views, reshapes) and of an element type the library
knows: `UInt8, Int8, UInt16, Int16, Int32, Int64, Float16, Float32, Float64,
Bool`. Julia is column-major, so a Julia array of size `(d1, ..., dn)` is the
C tensor of shape `(dn, ..., d1)`: the library's "first dimension" (along
which allgather concatenates and alltoall / reducescatter split) is the
**last** Julia dimension. A vector is gathered end to end; a matrix whose
columns are samples is gathered column-wise (`hcat` of the ranks' matrices).

Process sets (`Hvd.split(ctx, color)`, `Hvd.process_set(ctx, ranks)`) are
`Hvd.Context`s over some of the ranks; every collective takes one as its last
positional argument (`allreduce!(g, +, set)`), as MPI.jl takes `comm`.

See docs/julia.md for the whole guide.
"""
module Hvd

using Libdl

export HvdError, MembershipChanged, allreduce!, allreduce, grouped_allreduce!, allgather,
       alltoall, reducescatter, allreduce_gradients!, broadcast_parameters!, DistributedOptimizer

# Hvd.size, Hvd.join, Hvd.broadcast and Hvd.broadcast! are this module's own
# functions, not methods of Base's (Base.size(A) and Base.join(strings) are
# written out where those are meant).
function size end
function join end
function broadcast end
function broadcast! end

include("libhvd.jl")

# ---------------------------------------------------------------------------
# Loading the library.
# ---------------------------------------------------------------------------

# The repository root, when the package is used from a checkout
# (bindings/julia/Hvd/src/Hvd.jl).
const REPO_ROOT = normpath(joinpath(@__DIR__, "..", "..", "..", ".."))

"""
    library_candidates() -> Vector{String}

Where `__init__` looks for libhvd.so, in order: the repository's build trees
`build/lib`, then `build-*/lib` (newest library first); then the system's
default search (`LD_LIBRARY_PATH`, the ldconfig cache) by name. When
`HVD_LIBRARY_PATH` is set, it alone is used (see `library_from_env`).
"""
function library_candidates()
    names = ["libhvd." * Libdl.dlext, "libhvd." * Libdl.dlext * ".0"]
    out = String[]
    push!(out, joinpath(REPO_ROOT, "build", "lib", names[1]))
    trees = String[]
    if isdir(REPO_ROOT)
        for d in readdir(REPO_ROOT)
            startswith(d, "build-") || continue
            f = joinpath(REPO_ROOT, d, "lib", names[1])
            isfile(f) && push!(trees, f)
        end
    end
    sort!(trees; by = f -> mtime(f), rev = true)
    append!(out, trees)
    append!(out, names)   # default search
    return out
end

"""
    library_from_env(value) -> String

The library `HVD_LIBRARY_PATH=value` names: the file itself, or libhvd.so
(else libhvd.so.0) in the folder. A value that names nothing loadable is an
error, never a reason to look elsewhere: loading another library than the
one asked for would hide the mistake.
"""
function library_from_env(env::AbstractString)
    hint = "Set HVD_LIBRARY_PATH to libhvd.so or the folder holding it (e.g. build/lib), or " *
           "unset it to use the repository's build trees and then the system's search."
    if isdir(env)
        for n in ("libhvd." * Libdl.dlext, "libhvd." * Libdl.dlext * ".0")
            f = joinpath(env, n)
            isfile(f) && return f
        end
        error("Hvd: HVD_LIBRARY_PATH=$env is a folder without libhvd.$(Libdl.dlext). $hint")
    elseif !ispath(env)
        error("Hvd: HVD_LIBRARY_PATH=$env: no such file or folder. $hint")
    elseif !isfile(env)
        error("Hvd: HVD_LIBRARY_PATH=$env is neither a file nor a folder. $hint")
    end
    return env
end

function load_library!()
    tried = String[]
    handle = C_NULL
    path = ""
    env = get(ENV, "HVD_LIBRARY_PATH", "")
    if !isempty(env)
        path = library_from_env(env)
        h = Libdl.dlopen(path, Libdl.RTLD_LAZY | Libdl.RTLD_LOCAL; throw_error = false)
        h === nothing && error("Hvd: HVD_LIBRARY_PATH=$env: cannot load $path: " *
                               dlerror_text())
        handle = h
    else
        for cand in library_candidates()
            # Paths that name a missing file are noted without a dlopen message.
            if occursin('/', cand) && !isfile(cand)
                push!(tried, "$cand (no such file)")
                continue
            end
            h = Libdl.dlopen(cand, Libdl.RTLD_LAZY | Libdl.RTLD_LOCAL; throw_error = false)
            if h === nothing
                push!(tried, "$cand (dlopen failed: $(dlerror_text()))")
                continue
            end
            handle = h
            path = occursin('/', cand) ? cand : something(Libdl.dlpath(h), cand)
            break
        end
    end
    if handle == C_NULL
        error("Hvd: cannot load libhvd. Tried, in order:\n  " * Base.join(tried, "\n  ") *
              "\nBuild the library (cmake --build build --target hvd) or set HVD_LIBRARY_PATH " *
              "to libhvd.so or its folder.")
    end
    absent = Symbol[]
    for (sym, ref) in SYMBOLS
        p = Libdl.dlsym(handle, sym; throw_error = false)
        if p === nothing
            ref[] = C_NULL
            sym in OPTIONAL_SYMBOLS || push!(absent, sym)
        else
            ref[] = p
        end
    end
    if !isempty(absent)
        Libdl.dlclose(handle)
        error("Hvd: $path lacks $(Base.join(absent, ", ")): not an hvd library this binding supports")
    end
    LIB_HANDLE[] = handle
    LIB_PATH[] = path
    major, minor, patch = Ref{Cint}(0), Ref{Cint}(0), Ref{Cint}(0)
    @check hvd_version(major, minor, patch)
    if major[] != BINDING_VERSION_MAJOR
        LIB_HANDLE[] = C_NULL
        error("Hvd: $path is hvd $(major[]).$(minor[]).$(patch[]), but this binding needs major " *
              "version $BINDING_VERSION_MAJOR")
    end
    LIB_VERSION[] = VersionNumber(major[], minor[], patch[])
    return path
end

function dlerror_text()
    p = ccall(:dlerror, Cstring, ())
    return p == C_NULL ? "unknown error" : unsafe_string(p)
end

const LIB_VERSION = Ref{VersionNumber}(v"0.0.0")

"""Path of the loaded libhvd.so."""
library_path() = LIB_PATH[]

"""Version of the loaded libhvd.so (hvd_version)."""
library_version() = LIB_VERSION[]

function __init__()
    load_library!()
    atexit(shutdown_at_exit)
end

# ---------------------------------------------------------------------------
# Element types and arrays.
# ---------------------------------------------------------------------------

"""Element types the library reduces and moves (BFloat16 has no Base type in Julia 1.5)."""
const SupportedEltype = Union{UInt8,Int8,UInt16,Int16,Int32,Int64,Float16,Float32,Float64,Bool}

hvd_dtype(::Type{UInt8}) = HVD_UINT8
hvd_dtype(::Type{Int8}) = HVD_INT8
hvd_dtype(::Type{UInt16}) = HVD_UINT16
hvd_dtype(::Type{Int16}) = HVD_INT16
hvd_dtype(::Type{Int32}) = HVD_INT32
hvd_dtype(::Type{Int64}) = HVD_INT64
hvd_dtype(::Type{Float16}) = HVD_FLOAT16
hvd_dtype(::Type{Float32}) = HVD_FLOAT32
hvd_dtype(::Type{Float64}) = HVD_FLOAT64
hvd_dtype(::Type{Bool}) = HVD_BOOL

const SUPPORTED_TEXT = "UInt8, Int8, UInt16, Int16, Int32, Int64, Float16, Float32, Float64, Bool"

"""
    iscontiguous(A) -> Bool

True when `A`'s elements lie densely in memory in column-major order, so its
pointer can go to the library as is: `Array`s, and strided views and reshapes
whose strides are those of a dense array.
"""
# The array at the bottom of A's wrappers (views, reshapes, reinterprets).
function storage_root(A)
    while true
        P = parent(A)
        P === A && return A
        A = P
    end
end

# A GPU package's array (CUDA.jl's CuArray and the others derive from
# GPUArrays' AbstractGPUArray), known by its supertypes' names so that the
# package needs no GPU package to tell.
function is_device_array(A)
    T = typeof(storage_root(A))
    while T !== Any
        nameof(T) === :AbstractGPUArray && return true
        T = supertype(T)
    end
    return false
end

function iscontiguous(A::AbstractArray)
    A isa Array && return true
    A isa StridedArray || return false
    expected = 1
    for (d, s) in zip(Base.size(A), strides(A))
        d == 1 && continue
        s == expected || return false
        expected *= d
    end
    return true
end

# Validates an array for the library; throws ArgumentError naming `what`.
function check_array(A, what::AbstractString)
    if !(A isa AbstractArray)
        throw(ArgumentError("Hvd: $what must be an array, got $(typeof(A))"))
    end
    T = eltype(A)
    if !(T <: SupportedEltype) || !isconcretetype(T)
        throw(ArgumentError("Hvd: $what has element type $T, which hvd does not support " *
                            "(supported: $SUPPORTED_TEXT)"))
    end
    if A isa BitArray
        throw(ArgumentError("Hvd: $what is a BitArray (packed bits); convert it with Array{Bool}(A)"))
    end
    if is_device_array(A)
        throw(ArgumentError("Hvd: $what is a $(typeof(storage_root(A)).name) in device memory; " *
                            "this package passes host arrays only: copy it with Array(A) and " *
                            "back (hvd's C API takes CUDA memory, hvd_tensor_t.device and " *
                            ".stream, which a CUDA.jl extension of this package would fill " *
                            "from the array's device pointer, CUDA.device() and CUDA.stream())"))
    end
    if !iscontiguous(A)
        throw(ArgumentError("Hvd: $what ($(typeof(A).name)) is not contiguous in memory, so it " *
                            "cannot be passed without a copy; pass copy(A) (or collect(A)) and " *
                            "copy the result back"))
    end
    if ndims(A) > HVD_MAX_NDIM
        throw(ArgumentError("Hvd: $what has $(ndims(A)) dimensions; at most $HVD_MAX_NDIM"))
    end
    return A
end

# The C shape of a Julia array: its dimensions reversed (column-major Julia
# array of size (d1,...,dn) == row-major C tensor of shape (dn,...,d1)).
c_shape(A::AbstractArray) = Int64[reverse(Base.size(A))...]

tensor(A::AbstractArray, shape::Vector{Int64}) =
    HvdTensor(Ptr{Cvoid}(pointer(A)), hvd_dtype(eltype(A)), Int32(length(shape)),
              pointer(shape), HVD_DEVICE_CPU, C_NULL)

# ---------------------------------------------------------------------------
# Reduce ops.
# ---------------------------------------------------------------------------

"""
Reduction operations: `Hvd.Sum`, `Hvd.Average` (sum / size; integers round
toward zero), `Hvd.Min`, `Hvd.Max`, `Hvd.Product`. For `Bool`, `Sum` and
`Max` are logical or, `Min` and `Product` logical and, and `Average` is
refused by the library (`HvdError(HVD_ERR_UNSUPPORTED)`). `Hvd.Adasum` is
Horovod's adaptive summation, per array (see `HVD_ADASUM` in hvd.h): `Float16`,
`Float32`, `Float64` only, allreduce and grouped allreduce only.
"""
@enum ReduceOp::Cint Sum = 0 Average = 1 Min = 2 Max = 3 Product = 4 Adasum = 5

"""
    Hvd.reduce_op(op) -> ReduceOp

The reduction an `op` argument names: an `Hvd.ReduceOp`, or one of Julia's
`+`, `*`, `min`, `max` (as MPI.jl takes them), which mean `Sum`, `Product`,
`Min`, `Max`. Anything else is an `ArgumentError`.
"""
reduce_op(op::ReduceOp) = op
reduce_op(::typeof(+)) = Sum
reduce_op(::typeof(*)) = Product
reduce_op(::typeof(min)) = Min
reduce_op(::typeof(max)) = Max
reduce_op(op) =
    throw(ArgumentError("Hvd: op = $(repr(op)) is not a reduction hvd has; pass +, *, min or " *
                        "max, or Hvd.Sum, Hvd.Average, Hvd.Min, Hvd.Max, Hvd.Product, " *
                        "Hvd.Adasum (the mean is Hvd.Average)"))

# Merges a positional op (MPI.jl's `Allreduce!(A, +, comm)` order) with the op
# keyword; giving both is an error.
function merge_op(kw, op)
    haskey(kw, :op) &&
        throw(ArgumentError("Hvd: op given twice (as an argument and as op = ...); pass one"))
    return (; kw..., op = op)
end

# ---------------------------------------------------------------------------
# Names: deterministic across ranks as long as the ranks issue their unnamed
# operations in the same order (which unnamed operations need anyway).
#
#   - An async call without a name gets "<kind>.noname.<n>" from a counter
#     per operation kind and per context, the default context's reset when
#     it is created (the Python binding's scheme); a process set starts its
#     own at 0.
#   - A blocking call without a name (allreduce!, allreduce, broadcast!, ...)
#     uses one fixed name per kind, "<kind>.noname.blocking", call after call:
#     the operation is over before the call returns, so the name is free
#     again, and reusing it lets the core's response cache skip negotiation
#     (a fresh name costs a full negotiation round every time). While that
#     name is still in flight (another task's blocking call, or a wait that
#     was interrupted), a blocking call takes a counter name instead.
#     Names are scoped to their context in the library too, so the same
#     fixed name in a set and in the default context never clash.
# ---------------------------------------------------------------------------
const NAME_COUNTERS = Dict{String,Int}()
const BLOCKING_BUSY = Dict{String,Bool}()
const NAME_LOCK = ReentrantLock()

include("contexts.jl")

# The counters and busy flags are per context (Context.names, .busy): the
# default context's are NAME_COUNTERS and BLOCKING_BUSY.
op_name(kind::String, name) = op_name(DEFAULT_CONTEXT, kind, name)
function op_name(ctx::Context, kind::String, name)
    if name !== nothing
        s = string(name)
        isempty(s) && throw(ArgumentError("Hvd: name must not be empty"))
        Base.containsnul(s) && throw(ArgumentError("Hvd: name must not contain NUL characters"))
        return s
    end
    lock(NAME_LOCK) do
        n = get(ctx.names, kind, 0)
        ctx.names[kind] = n + 1
        return "$kind.noname.$n"
    end
end

reset_names!() = lock(() -> (empty!(NAME_COUNTERS); empty!(BLOCKING_BUSY)), NAME_LOCK)

"""
    run_blocking(start, [ctx,] kind, name)

Runs a blocking collective on `ctx` (default: the default context):
`start(n)` submits it under name `n` and returns its Handle, which is then
awaited. Without a `name`, the kind's fixed name is used while it is free
in `ctx` (see the naming notes above).
"""
run_blocking(start, kind::String, name) = run_blocking(start, DEFAULT_CONTEXT, kind, name)
function run_blocking(start, ctx::Context, kind::String, name)
    name === nothing || return wait(start(name))
    busy = ctx.busy
    fixed = lock(NAME_LOCK) do
        get(busy, kind, false) && return nothing
        busy[kind] = true
        return kind * ".noname.blocking"
    end
    fixed === nothing && return wait(start(nothing))
    h = nothing
    try
        h = start(fixed)
        return wait(h)
    finally
        # The name is free once the operation is over -- not when the wait
        # was interrupted while the operation still runs.
        if h === nothing || h.state != 0
            lock(() -> (busy[kind] = false), NAME_LOCK)
        end
    end
end

# ---------------------------------------------------------------------------
# Life cycle and topology.
# ---------------------------------------------------------------------------
const INIT_REFS = Ref(0)
const LIFECYCLE_LOCK = ReentrantLock()

"""
    Hvd.init(; rank, size, local_rank, local_size, cross_rank, cross_size,
             transport, rendezvous_addr, secret, fusion_threshold_bytes,
             cycle_time_ms, cache_capacity, stall_warning_s, stall_shutdown_s,
             start_timeout_s, timeline_path, log_level, network_interface,
             transport_timeout_s, autotune, transport_path)

Creates the default context (collective over the job's ranks). Every keyword
is optional: what is not given comes from the `HVD_*` environment (hvdrun sets
it), mpirun/Slurm variables, then defaults; with none of them the process is a
world of one. Calls are reference counted: each `init` needs a `shutdown`, and
only the first call's keywords count.

`autotune::Bool` switches the autotuner on or off over `HVD_AUTOTUNE` (its knobs
stay `HVD_AUTOTUNE_*` variables); `transport_path` (':'-separated folders, searched
for transport plugins before libhvd's own; `""` = libhvd's only) wins over
`HVD_TRANSPORT_PATH`.
"""
function init(; kw...)
    lock(LIFECYCLE_LOCK) do
        was = is_initialized()
        strs = String[]   # keeps the C strings alive during hvd_init
        mask = UInt64(0)
        f = Dict{Symbol,Any}()
        str(s) = (push!(strs, string(s)); pointer(strs[end]))
        for (k, v) in kw
            v === nothing && continue
            if k in (:rank, :size, :local_rank, :local_size, :cross_rank, :cross_size)
                f[k] = Int32(v)
                mask |= Dict(:rank => HVD_PARAM_RANK, :size => HVD_PARAM_SIZE,
                             :local_rank => HVD_PARAM_LOCAL_RANK,
                             :local_size => HVD_PARAM_LOCAL_SIZE,
                             :cross_rank => HVD_PARAM_CROSS_RANK,
                             :cross_size => HVD_PARAM_CROSS_SIZE)[k]
            elseif k === :transport
                f[k] = str(v); mask |= HVD_PARAM_TRANSPORT
            elseif k === :rendezvous_addr
                f[k] = str(v); mask |= HVD_PARAM_RENDEZVOUS_ADDR
            elseif k === :secret
                f[k] = str(v); mask |= HVD_PARAM_SECRET
            elseif k === :timeline_path
                f[k] = str(v); mask |= HVD_PARAM_TIMELINE
            elseif k === :network_interface
                f[k] = str(v); mask |= HVD_PARAM_NETWORK_INTERFACE
            elseif k === :transport_path
                f[k] = str(v); mask |= HVD_PARAM_TRANSPORT_PATH
            elseif k === :autotune
                # Bool, or an integer the library checks (0 or 1)
                v isa Union{Bool,Integer} ||
                    throw(ArgumentError("Hvd.init: autotune must be a Bool, got $(repr(v))"))
                f[k] = Int32(v); mask |= HVD_PARAM_AUTOTUNE
            elseif k === :fusion_threshold_bytes
                f[k] = Int64(v); mask |= HVD_PARAM_FUSION_THRESHOLD
            elseif k === :cache_capacity
                f[k] = Int32(v); mask |= HVD_PARAM_CACHE_CAPACITY
            elseif k === :log_level
                f[k] = Int32(v); mask |= HVD_PARAM_LOG_LEVEL
            elseif k in (:cycle_time_ms, :stall_warning_s, :stall_shutdown_s, :start_timeout_s,
                         :transport_timeout_s)
                f[k] = Float64(v)
                mask |= Dict(:cycle_time_ms => HVD_PARAM_CYCLE_TIME,
                             :stall_warning_s => HVD_PARAM_STALL_WARNING,
                             :stall_shutdown_s => HVD_PARAM_STALL_SHUTDOWN,
                             :start_timeout_s => HVD_PARAM_START_TIMEOUT,
                             :transport_timeout_s => HVD_PARAM_TRANSPORT_TIMEOUT)[k]
            else
                throw(ArgumentError("Hvd.init: unknown keyword $k"))
            end
        end
        g(k, d) = get(f, k, d)
        p = HvdParams(sizeof(HvdParams), mask,
                      g(:rank, Int32(0)), g(:size, Int32(0)), g(:local_rank, Int32(0)),
                      g(:local_size, Int32(0)), g(:cross_rank, Int32(0)), g(:cross_size, Int32(0)),
                      g(:transport, C_NULL), g(:rendezvous_addr, C_NULL), g(:secret, C_NULL),
                      C_NULL, C_NULL,
                      g(:fusion_threshold_bytes, Int64(0)), g(:cycle_time_ms, 0.0),
                      g(:cache_capacity, Int32(0)), g(:stall_warning_s, 0.0),
                      g(:stall_shutdown_s, 0.0), g(:start_timeout_s, 0.0),
                      g(:timeline_path, C_NULL), C_NULL, C_NULL, g(:log_level, Int32(0)),
                      g(:network_interface, C_NULL), C_NULL, g(:transport_timeout_s, 0.0),
                      g(:autotune, Int32(0)), g(:transport_path, C_NULL))
        GC.@preserve strs begin
            @check hvd_init(Ref(p))
        end
        INIT_REFS[] += 1
        was || reset_names!()
    end
    return nothing
end

"""
    Hvd.shutdown()

Releases one `init` reference; the last one destroys the default context
(operations still pending complete with `HvdError(HVD_ERR_ABORTED)`).
"""
function shutdown()
    lock(LIFECYCLE_LOCK) do
        @check hvd_shutdown()
        INIT_REFS[] = max(0, INIT_REFS[] - 1)
    end
    return nothing
end

# The library does not tear down a default context left at exit: do it, so
# its background thread stops before Julia does.
function shutdown_at_exit()
    LIB_HANDLE[] == C_NULL && return
    while INIT_REFS[] > 0
        INIT_REFS[] -= 1
        hvd_shutdown() < 0 && break
    end
    # Process sets left open: their parent has stopped, so destroying them
    # only frees memory (and lets the parent's connections close).
    free_live_sets()
end

"""`true` while the default context exists."""
function is_initialized()
    out = Ref{Cint}(0)
    @check hvd_is_initialized(out)
    return out[] != 0
end

"""
    Hvd.rank([ctx]) -> Int

This process's rank (0-based) in the default context, or in `ctx` (a
process set: its rank within the set).
"""
rank() = get_int(hvd_rank)
"""`Hvd.size([ctx])`: number of ranks in the default context, or in `ctx`."""
size() = get_int(hvd_size)
"""`Hvd.local_rank([ctx])`: rank among the processes (of `ctx`) on this host."""
local_rank() = get_int(hvd_local_rank)
"""`Hvd.local_size([ctx])`: number of ranks (of `ctx`) on this host."""
local_size() = get_int(hvd_local_size)
"""
`Hvd.cross_rank([ctx])`: index of this host among the hosts with a rank (of
`ctx`) of the same local rank.
"""
cross_rank() = get_int(hvd_cross_rank)
"""`Hvd.cross_size([ctx])`: number of hosts with a rank (of `ctx`) of this local rank."""
cross_size() = get_int(hvd_cross_size)

rank(ctx::Context) = get_int(out -> hvd_context_rank(ctxptr(ctx, "Hvd.rank"), out))
size(ctx::Context) = get_int(out -> hvd_context_size(ctxptr(ctx, "Hvd.size"), out))
local_rank(ctx::Context) = get_int(out -> hvd_context_local_rank(ctxptr(ctx, "Hvd.local_rank"), out))
local_size(ctx::Context) = get_int(out -> hvd_context_local_size(ctxptr(ctx, "Hvd.local_size"), out))
cross_rank(ctx::Context) = get_int(out -> hvd_context_cross_rank(ctxptr(ctx, "Hvd.cross_rank"), out))
cross_size(ctx::Context) = get_int(out -> hvd_context_cross_size(ctxptr(ctx, "Hvd.cross_size"), out))

"""
`Hvd.transport([ctx])`: name of the default context's (or `ctx`'s) transport
(`"local"`, `"gloo"`, ...); a process set's is its parent's.
"""
function transport(ctx::Context = DEFAULT_CONTEXT)
    out = Ref{Ptr{UInt8}}(C_NULL)
    @check hvd_context_transport(ctxptr(ctx, "Hvd.transport"), out)
    return unsafe_string(out[])
end

"""
    metrics(ctx = default; format = :json) -> String

This rank's metrics (docs/metrics.md): the library's JSON report (`"version": 1`)
of the job context and its live process sets, or with `format = :prometheus`
Prometheus' text format.
"""
function metrics(ctx::Context = DEFAULT_CONTEXT; format::Symbol = :json)
    format in (:json, :prometheus) || throw(ArgumentError("Hvd.metrics: format must be :json or :prometheus"))
    f = Cint(format === :json ? 0 : 1)
    p = ctxptr(ctx, "Hvd.metrics")
    needed = Ref{Csize_t}(0)
    @check hvd_metrics(p, f, C_NULL, Csize_t(0), needed)
    for _ in 1:8  # the counters may grow between the calls: room to spare
        buf = Vector{UInt8}(undef, needed[] + 4096)
        rc = hvd_metrics(p, f, pointer(buf), Csize_t(length(buf)), needed)
        if rc != HVD_ERR_INVALID_ARGUMENT || needed[] <= length(buf)
            check_status(rc)
            return String(buf[1:needed[]-1])
        end
    end
    throw(HvdError(HVD_ERR_INTERNAL, "Hvd.metrics: the report kept growing"))
end

include("handles.jl")
include("ops.jl")
include("training.jl")
include("elastic.jl")

end # module
