# The C layer: the one file that knows include/hvd.h.
#
# Constants, the two structs (hvd_tensor_t, hvd_params_t), and one Julia
# function per C function, each a `ccall` through a function pointer looked up
# when the library is loaded (`__init__` in Hvd.jl). Nothing else in the
# package calls the library directly. Calls that can fail go through `@check`,
# which turns a negative status into an `HvdError` carrying hvd_last_error(),
# read on the same thread right after the failing call (the library keeps that
# text per thread, and nothing between the two ccalls can switch tasks).

# The major version this binding was written against: a library with another
# major version is refused (its ABI may differ).
const BINDING_VERSION_MAJOR = 0

# ---------------------------------------------------------------------------
# Constants (numbers are frozen in hvd.h).
# ---------------------------------------------------------------------------
const HVD_OK = Cint(0)
const HVD_IN_PROGRESS = Cint(1)
const HVD_ERR_INVALID_ARGUMENT = Cint(-1)
const HVD_ERR_NOT_INITIALIZED = Cint(-2)
const HVD_ERR_NO_MEMORY = Cint(-3)
const HVD_ERR_TIMEOUT = Cint(-4)
const HVD_ERR_MISMATCH = Cint(-5)
const HVD_ERR_TRANSPORT = Cint(-6)
const HVD_ERR_UNSUPPORTED = Cint(-7)
const HVD_ERR_NOT_FOUND = Cint(-8)
const HVD_ERR_ABORTED = Cint(-9)
const HVD_ERR_DUPLICATE_NAME = Cint(-10)
const HVD_ERR_VERSION = Cint(-11)
const HVD_ERR_RENDEZVOUS = Cint(-12)
const HVD_ERR_INTERNAL = Cint(-13)
const HVD_ERR_MEMBERSHIP_CHANGED = Cint(-14)

const STATUS_NAMES = Dict{Cint,Symbol}(
    HVD_OK => :HVD_OK, HVD_IN_PROGRESS => :HVD_IN_PROGRESS,
    HVD_ERR_INVALID_ARGUMENT => :HVD_ERR_INVALID_ARGUMENT,
    HVD_ERR_NOT_INITIALIZED => :HVD_ERR_NOT_INITIALIZED,
    HVD_ERR_NO_MEMORY => :HVD_ERR_NO_MEMORY, HVD_ERR_TIMEOUT => :HVD_ERR_TIMEOUT,
    HVD_ERR_MISMATCH => :HVD_ERR_MISMATCH, HVD_ERR_TRANSPORT => :HVD_ERR_TRANSPORT,
    HVD_ERR_UNSUPPORTED => :HVD_ERR_UNSUPPORTED, HVD_ERR_NOT_FOUND => :HVD_ERR_NOT_FOUND,
    HVD_ERR_ABORTED => :HVD_ERR_ABORTED, HVD_ERR_DUPLICATE_NAME => :HVD_ERR_DUPLICATE_NAME,
    HVD_ERR_VERSION => :HVD_ERR_VERSION, HVD_ERR_RENDEZVOUS => :HVD_ERR_RENDEZVOUS,
    HVD_ERR_INTERNAL => :HVD_ERR_INTERNAL,
    HVD_ERR_MEMBERSHIP_CHANGED => :HVD_ERR_MEMBERSHIP_CHANGED)

const HVD_UINT8 = Cint(0)
const HVD_INT8 = Cint(1)
const HVD_UINT16 = Cint(2)
const HVD_INT16 = Cint(3)
const HVD_INT32 = Cint(4)
const HVD_INT64 = Cint(5)
const HVD_FLOAT16 = Cint(6)
const HVD_BFLOAT16 = Cint(7)   # no bfloat16 type in Base Julia 1.5: not mapped
const HVD_FLOAT32 = Cint(8)
const HVD_FLOAT64 = Cint(9)
const HVD_BOOL = Cint(10)

const HVD_DEVICE_CPU = Int32(-1)
const HVD_UNDEFINED_COLOR = Cint(-1)
const HVD_MAX_NDIM = 32

const HVD_PARAM_RANK = UInt64(1) << 0
const HVD_PARAM_SIZE = UInt64(1) << 1
const HVD_PARAM_LOCAL_RANK = UInt64(1) << 2
const HVD_PARAM_LOCAL_SIZE = UInt64(1) << 3
const HVD_PARAM_CROSS_RANK = UInt64(1) << 4
const HVD_PARAM_CROSS_SIZE = UInt64(1) << 5
const HVD_PARAM_TRANSPORT = UInt64(1) << 6
const HVD_PARAM_RENDEZVOUS_ADDR = UInt64(1) << 7
const HVD_PARAM_SECRET = UInt64(1) << 8
const HVD_PARAM_OOB = UInt64(1) << 9
const HVD_PARAM_FUSION_THRESHOLD = UInt64(1) << 10
const HVD_PARAM_CYCLE_TIME = UInt64(1) << 11
const HVD_PARAM_CACHE_CAPACITY = UInt64(1) << 12
const HVD_PARAM_STALL_WARNING = UInt64(1) << 13
const HVD_PARAM_STALL_SHUTDOWN = UInt64(1) << 14
const HVD_PARAM_START_TIMEOUT = UInt64(1) << 15
const HVD_PARAM_TIMELINE = UInt64(1) << 16
const HVD_PARAM_LOG_FN = UInt64(1) << 17
const HVD_PARAM_LOG_LEVEL = UInt64(1) << 18
const HVD_PARAM_NETWORK_INTERFACE = UInt64(1) << 19
const HVD_PARAM_MPI_COMM = UInt64(1) << 20
const HVD_PARAM_TRANSPORT_TIMEOUT = UInt64(1) << 21
const HVD_PARAM_AUTOTUNE = UInt64(1) << 22
const HVD_PARAM_TRANSPORT_PATH = UInt64(1) << 23
const HVD_PARAM_ALL_ = (UInt64(1) << 24) - 1

# ---------------------------------------------------------------------------
# Structs. Julia lays out an isbits struct with C's alignment rules, so these
# match hvd.h field for field (sizes checked in the tests: 40 and 184 bytes
# on x86_64).
# ---------------------------------------------------------------------------
struct HvdTensor
    data::Ptr{Cvoid}
    dtype::Cint
    ndim::Int32
    shape::Ptr{Int64}
    device::Int32
    stream::Ptr{Cvoid}
end

struct HvdParams
    struct_size::Csize_t
    mask::UInt64
    rank::Int32
    size::Int32
    local_rank::Int32
    local_size::Int32
    cross_rank::Int32
    cross_size::Int32
    transport::Ptr{UInt8}
    rendezvous_addr::Ptr{UInt8}
    secret::Ptr{UInt8}
    oob_allgather::Ptr{Cvoid}
    oob_user::Ptr{Cvoid}
    fusion_threshold_bytes::Int64
    cycle_time_ms::Cdouble
    cache_capacity::Int32
    stall_warning_s::Cdouble
    stall_shutdown_s::Cdouble
    start_timeout_s::Cdouble
    timeline_path::Ptr{UInt8}
    log_fn::Ptr{Cvoid}
    log_user::Ptr{Cvoid}
    log_level::Int32
    network_interface::Ptr{UInt8}
    mpi_comm::Ptr{Cvoid}
    transport_timeout_s::Cdouble
    autotune::Int32
    transport_path::Ptr{UInt8}
end

struct HvdMembership   # hvd_membership_t (24 bytes)
    struct_size::Csize_t
    elastic::Int32
    hosts_updated::Int32
    epoch::Int64
end

# ---------------------------------------------------------------------------
# Errors.
# ---------------------------------------------------------------------------
"""
    HvdError(status, message)

A failed hvd call. `status` is the library's `hvd_status_t` code (negative;
`Hvd.status_name(e.status)` gives its name, e.g. `:HVD_ERR_MISMATCH`) and
`message` the library's text for this failure (`hvd_last_error()`).
"""
struct HvdError <: Exception
    status::Int
    message::String
end

status_name(status::Integer) = get(STATUS_NAMES, Cint(status), Symbol("HVD_STATUS_", status))

function Base.showerror(io::IO, e::HvdError)
    print(io, "HvdError(", status_name(e.status), "): ", e.message)
end

"""
    MembershipChanged(status, message)

`HVD_ERR_MEMBERSHIP_CHANGED`: the membership of an elastic job changed under
this call (a peer died, stopped or was cut off, the context is being reset,
or the launcher ended this worker's part in the job). Thrown instead of an
`HvdError` for that status; it has the same fields (`status` is always
`Hvd.HVD_ERR_MEMBERSHIP_CHANGED`, -14). The context stays stopped until
`Hvd.reset!` forms the job again; `Hvd.Elastic.run` does that after restoring
the last committed state (docs/elastic.md).
"""
struct MembershipChanged <: Exception
    status::Int
    message::String
end
MembershipChanged(message::AbstractString) =
    MembershipChanged(Int(HVD_ERR_MEMBERSHIP_CHANGED), String(message))

function Base.showerror(io::IO, e::MembershipChanged)
    print(io, "MembershipChanged(HVD_ERR_MEMBERSHIP_CHANGED): ", e.message)
end

"""
    Hvd.launcher_ended(e::MembershipChanged) -> Bool

True when the launcher ended this worker's part in the job (fewer workers
than --min-np, the reset limit, a worker no longer wanted): resetting again
cannot succeed.
"""
launcher_ended(e::MembershipChanged) = occursin("the launcher ends this worker", e.message)

# ---------------------------------------------------------------------------
# Function pointers, filled in by load_library!().
# ---------------------------------------------------------------------------
const LIB_HANDLE = Ref{Ptr{Cvoid}}(C_NULL)
const LIB_PATH = Ref{String}("")
const SYMBOLS = Pair{Symbol,Base.RefValue{Ptr{Cvoid}}}[]

# `@cfunc name(arg::T, ...)::R` defines `name(args...)` as a ccall through a
# pointer looked up at load time.
macro cfunc(sig)
    sig.head === :(::) || error("@cfunc needs a return type")
    call, rettype = sig.args
    fname = call.args[1]
    args = call.args[2:end]
    argnames = [a.args[1] for a in args]
    argtypes = [a.args[2] for a in args]
    ptr = Symbol("_fp_", fname)
    quote
        const $(esc(ptr)) = Ref{Ptr{Cvoid}}(C_NULL)
        push!(SYMBOLS, $(QuoteNode(fname)) => $(esc(ptr)))
        @inline $(esc(fname))($(map(esc, argnames)...)) =
            ccall($(esc(ptr))[], $(esc(rettype)), ($(map(esc, argtypes)...),), $(map(esc, argnames)...))
    end
end

@cfunc hvd_version(major::Ptr{Cint}, minor::Ptr{Cint}, patch::Ptr{Cint})::Cint
@cfunc hvd_status_string(status::Cint)::Cstring
@cfunc hvd_last_error()::Cstring
@cfunc hvd_clear_last_error()::Cvoid
@cfunc hvd_dtype_size(dtype::Cint, out::Ptr{Csize_t})::Cint

@cfunc hvd_init(params::Ptr{HvdParams})::Cint
@cfunc hvd_shutdown()::Cint
@cfunc hvd_is_initialized(out::Ptr{Cint})::Cint
@cfunc hvd_default_context(out::Ptr{Ptr{Cvoid}})::Cint
@cfunc hvd_rank(out::Ptr{Cint})::Cint
@cfunc hvd_size(out::Ptr{Cint})::Cint
@cfunc hvd_local_rank(out::Ptr{Cint})::Cint
@cfunc hvd_local_size(out::Ptr{Cint})::Cint
@cfunc hvd_cross_rank(out::Ptr{Cint})::Cint
@cfunc hvd_cross_size(out::Ptr{Cint})::Cint
@cfunc hvd_context_transport(ctx::Ptr{Cvoid}, out::Ptr{Ptr{UInt8}})::Cint
@cfunc hvd_metrics(ctx::Ptr{Cvoid}, format::Cint, buf::Ptr{UInt8}, len::Csize_t,
                   needed::Ptr{Csize_t})::Cint
@cfunc hvd_context_destroy(ctx::Ptr{Cvoid})::Cint
@cfunc hvd_context_rank(ctx::Ptr{Cvoid}, out::Ptr{Cint})::Cint
@cfunc hvd_context_size(ctx::Ptr{Cvoid}, out::Ptr{Cint})::Cint
@cfunc hvd_context_local_rank(ctx::Ptr{Cvoid}, out::Ptr{Cint})::Cint
@cfunc hvd_context_local_size(ctx::Ptr{Cvoid}, out::Ptr{Cint})::Cint
@cfunc hvd_context_cross_rank(ctx::Ptr{Cvoid}, out::Ptr{Cint})::Cint
@cfunc hvd_context_cross_size(ctx::Ptr{Cvoid}, out::Ptr{Cint})::Cint

# Process sets (hvd.h "Process sets").
@cfunc hvd_context_split(parent::Ptr{Cvoid}, color::Cint, key::Cint,
                         child::Ptr{Ptr{Cvoid}})::Cint
@cfunc hvd_process_set_create(parent::Ptr{Cvoid}, n::Int32, ranks::Ptr{Int32},
                              child::Ptr{Ptr{Cvoid}})::Cint
@cfunc hvd_context_parent_ranks(ctx::Ptr{Cvoid}, ranks::Ptr{Int32}, n::Int32)::Cint

# Elastic jobs (hvd.h "Elastic jobs"). Optional: a library from before them
# still loads, and these calls then throw HvdError(HVD_ERR_UNSUPPORTED).
@cfunc hvd_context_reset(ctx::Ptr{Cvoid})::Cint
@cfunc hvd_context_membership(ctx::Ptr{Cvoid}, out::Ptr{HvdMembership})::Cint
const OPTIONAL_SYMBOLS = (:hvd_context_reset, :hvd_context_membership)

@cfunc hvd_allreduce_async(ctx::Ptr{Cvoid}, name::Cstring, input::Ptr{HvdTensor},
                           output::Ptr{Cvoid}, op::Cint, prescale::Cdouble,
                           postscale::Cdouble, handle::Ptr{Ptr{Cvoid}})::Cint
@cfunc hvd_grouped_allreduce_async(ctx::Ptr{Cvoid}, count::Int32, names::Ptr{Ptr{UInt8}},
                                   inputs::Ptr{HvdTensor}, outputs::Ptr{Ptr{Cvoid}}, op::Cint,
                                   prescale::Cdouble, postscale::Cdouble,
                                   handle::Ptr{Ptr{Cvoid}})::Cint
@cfunc hvd_allgather_async(ctx::Ptr{Cvoid}, name::Cstring, input::Ptr{HvdTensor},
                           handle::Ptr{Ptr{Cvoid}})::Cint
@cfunc hvd_broadcast_async(ctx::Ptr{Cvoid}, name::Cstring, input::Ptr{HvdTensor},
                           output::Ptr{Cvoid}, root::Int32, handle::Ptr{Ptr{Cvoid}})::Cint
@cfunc hvd_alltoall_async(ctx::Ptr{Cvoid}, name::Cstring, input::Ptr{HvdTensor},
                          splits::Ptr{Int64}, handle::Ptr{Ptr{Cvoid}})::Cint
@cfunc hvd_reducescatter_async(ctx::Ptr{Cvoid}, name::Cstring, input::Ptr{HvdTensor},
                               op::Cint, prescale::Cdouble, postscale::Cdouble,
                               handle::Ptr{Ptr{Cvoid}})::Cint
@cfunc hvd_barrier_async(ctx::Ptr{Cvoid}, handle::Ptr{Ptr{Cvoid}})::Cint
@cfunc hvd_join_async(ctx::Ptr{Cvoid}, handle::Ptr{Ptr{Cvoid}})::Cint

@cfunc hvd_handle_wait(handle::Ptr{Cvoid}, timeout_s::Cdouble)::Cint
@cfunc hvd_handle_poll(handle::Ptr{Cvoid})::Cint
@cfunc hvd_handle_release(handle::Ptr{Cvoid})::Cint
@cfunc hvd_handle_output(handle::Ptr{Cvoid}, data::Ptr{Ptr{Cvoid}}, bytes::Ptr{Csize_t})::Cint
@cfunc hvd_handle_output_shape(handle::Ptr{Cvoid}, shape::Ptr{Int64}, max_ndim::Int32,
                               ndim::Ptr{Int32})::Cint
@cfunc hvd_handle_recv_splits(handle::Ptr{Cvoid}, splits::Ptr{Int64}, n::Int32)::Cint

# ---------------------------------------------------------------------------
# Checking.
# ---------------------------------------------------------------------------
"""The calling thread's last hvd error text ("" when none)."""
last_error() = LIB_HANDLE[] == C_NULL ? "" : unsafe_string(hvd_last_error())

"""Constant text for a status code."""
status_string(status::Integer) = unsafe_string(hvd_status_string(Cint(status)))

"""Throws an `HvdError` for a negative status; returns the status otherwise."""
@inline function check_status(status::Cint)
    status < 0 && throw_hvd_error(status)
    return status
end

@noinline function throw_hvd_error(status::Cint)
    throw(hvd_error_now(status))
end

# The HvdError for a status just returned on this thread (its text read at
# once, before any other hvd call), in the Julia API's words.
function hvd_error_now(status::Integer)
    msg = last_error()
    isempty(msg) && (msg = status_string(status))
    status == HVD_ERR_MEMBERSHIP_CHANGED && return MembershipChanged(Int(status), julia_message(msg))
    return HvdError(Int(status), julia_message(msg))
end

# The Julia call behind each C function whose name the library's messages
# carry.
const JULIA_CALLS = Dict{String,String}(
    "hvd_init" => "Hvd.init()", "hvd_shutdown" => "Hvd.shutdown()",
    "hvd_is_initialized" => "Hvd.is_initialized()",
    "hvd_rank" => "Hvd.rank()", "hvd_size" => "Hvd.size()",
    "hvd_local_rank" => "Hvd.local_rank()", "hvd_local_size" => "Hvd.local_size()",
    "hvd_cross_rank" => "Hvd.cross_rank()", "hvd_cross_size" => "Hvd.cross_size()",
    "hvd_context_transport" => "Hvd.transport()",
    "hvd_context_rank" => "Hvd.rank(ctx)", "hvd_context_size" => "Hvd.size(ctx)",
    "hvd_context_local_rank" => "Hvd.local_rank(ctx)",
    "hvd_context_local_size" => "Hvd.local_size(ctx)",
    "hvd_context_cross_rank" => "Hvd.cross_rank(ctx)",
    "hvd_context_cross_size" => "Hvd.cross_size(ctx)",
    "hvd_context_split" => "Hvd.split", "hvd_process_set_create" => "Hvd.process_set",
    "hvd_context_parent_ranks" => "Hvd.parent_ranks", "hvd_context_destroy" => "close(set)",
    "hvd_context_reset" => "Hvd.reset!", "hvd_context_membership" => "Hvd.membership",
    "hvd_allreduce_async" => "Hvd.allreduce", "hvd_grouped_allreduce_async" => "Hvd.grouped_allreduce!",
    "hvd_allgather_async" => "Hvd.allgather", "hvd_broadcast_async" => "Hvd.broadcast",
    "hvd_alltoall_async" => "Hvd.alltoall", "hvd_reducescatter_async" => "Hvd.reducescatter",
    "hvd_barrier_async" => "Hvd.barrier()", "hvd_join_async" => "Hvd.join()",
    "hvd_handle_wait" => "wait(handle)", "hvd_handle_poll" => "isready(handle)")

const NOT_INITIALIZED_C =
    r"^(hvd_\w+): ctx is NULL \(the default context\) and hvd_init has not been called"
const SHUTDOWN_NOT_INITIALIZED_C = "hvd_shutdown: not initialized"

"""
    julia_message(msg) -> String

The library's error text in the Julia API's words: "not initialized" names the
Julia call and `Hvd.init()` (not `hvd_init` and C contexts), C function names
become the Julia calls (`hvd_shutdown` -> `Hvd.shutdown()`), and
`params.<field>` the `Hvd.init` keyword of that name.
"""
function julia_message(msg::AbstractString)
    m = match(NOT_INITIALIZED_C, msg)
    if m !== nothing
        return julia_call(m.captures[1]) * ": not initialized; call Hvd.init() first"
    end
    if startswith(msg, SHUTDOWN_NOT_INITIALIZED_C)
        return "Hvd.shutdown(): not initialized (Hvd.init() was not called, or every " *
               "Hvd.init() was already matched by an Hvd.shutdown())"
    end
    occursin("hvd_", msg) || occursin("params.", msg) || return String(msg)
    s = replace(msg, r"\bhvd_[a-z_]+\b" => julia_call)
    s = replace(s, "HVD_UNDEFINED_COLOR" => "Hvd.UNDEFINED_COLOR")
    s = replace(s, r"\bparams\.([a-z_]+)" => m -> "keyword " * m[8:end])
    s = replace(s, r"\bparams: " => "")
    return s
end

julia_call(c::AbstractString) = get(JULIA_CALLS, c, String(c))

"""
    @check hvd_call(args...)

Calls a C function and throws `HvdError(status, hvd_last_error())` when it
returns a negative status; evaluates to the status otherwise.
"""
macro check(call)
    :(check_status($(esc(call))))
end

"""Reads an `int` out-parameter of a getter such as hvd_rank."""
function get_int(f)
    out = Ref{Cint}(0)
    @check f(out)
    return Int(out[])
end
