# Handles of pending operations.
#
# Memory rule (hvd.h): the tensor descriptor is read during the *_async call
# only, but data buffers must stay valid until the operation completes. A
# Handle therefore holds every array it handed to the library (`keep`) until
# the operation is over, and the submitting call holds them with GC.@preserve
# while the C call runs. A Handle dropped while its operation still runs is
# not released by its finalizer: the finalizer registers itself again, so the
# Handle -- and the arrays it holds -- survive until a later collection finds
# the operation finished.

# How long one hvd_handle_wait call may block before control returns to Julia
# (so other tasks, Ctrl-C and `timeout` are honoured); the operation itself
# is not delayed: the wait returns as soon as it completes.
const WAIT_SLICE_S = 0.2

"""
    Hvd.Handle

A pending collective, returned by the `*_async` functions. `wait(h)` waits and
returns the operation's result (or throws its `HvdError`); `isready(h)` tells
without blocking whether it has completed.
"""
mutable struct Handle
    raw::Ptr{Cvoid}
    keep::Any          # arrays the library reads or writes until completion
    finish::Any        # raw handle -> result, called once on success
    state::Int         # 0 pending, 1 done, 2 failed
    result::Any
    error::Any
    what::String
    lock::ReentrantLock
    function Handle(raw::Ptr{Cvoid}, keep, finish, what::String)
        h = new(raw, keep, finish, 0, nothing, nothing, what, ReentrantLock())
        finalizer(finalize_handle, h)
        return h
    end
end

function finalize_handle(h::Handle)
    raw = h.raw
    (raw == C_NULL || LIB_HANDLE[] == C_NULL) && return
    if hvd_handle_poll(raw) == HVD_IN_PROGRESS
        finalizer(finalize_handle, h)   # still running: keep the buffers alive
    else
        h.raw = C_NULL
        hvd_handle_release(raw)
    end
    return
end

function Base.show(io::IO, h::Handle)
    state = h.state == 0 ? (isready(h) ? "completed, not waited" : "pending") :
            h.state == 1 ? "done" : "failed"
    print(io, "Hvd.Handle(", h.what, ", ", state, ")")
end

"""
    isready(h::Hvd.Handle) -> Bool

`true` once the operation has completed, successfully or not (`wait(h)` then
returns at once).
"""
Base.isready(h::Handle) = h.state != 0 || hvd_handle_poll(h.raw) != HVD_IN_PROGRESS

"""
    wait(h::Hvd.Handle; timeout=nothing)

Waits for the operation and returns its result: the array for `allreduce!`,
`broadcast!` and the other in-place forms, the new array for the others,
`nothing` for `barrier` and `join`. Throws the operation's `HvdError`, again
on every later `wait`. With `timeout` (seconds) it throws
`HvdError(HVD_ERR_TIMEOUT)` when the operation is still pending then, and the
handle stays usable.
"""
function Base.wait(h::Handle; timeout::Union{Nothing,Real} = nothing)
    lock(h.lock) do
        h.state == 0 && complete!(h, timeout)
    end
    h.state == 2 && throw(h.error)
    return h.result
end

"""`fetch(h)` is `wait(h)`."""
Base.fetch(h::Handle) = wait(h)

"""`Hvd.synchronize(h)`: Horovod's name for `wait(h)`."""
synchronize(h::Handle) = wait(h)

# The part of a timed-out wait's library message that names the ranks that
# have not submitted the tensor ("; ranks [2] have not submitted 'x'"), or "".
function waiting_on(message::AbstractString)
    m = match(r"ranks \[[0-9, ]*\] have not submitted '.*'$", message)
    return m === nothing ? "" : "; " * m.match
end

function complete!(h::Handle, timeout)
    deadline = timeout === nothing ? Inf : time() + Float64(timeout)
    local st::Cint
    while true
        slice = min(WAIT_SLICE_S, max(0.0, deadline - time()))
        st = hvd_handle_wait(h.raw, slice)
        if st == HVD_ERR_TIMEOUT
            # Our slice ran out, or the operation itself timed out: ask.
            waiting = waiting_on(last_error())
            st = hvd_handle_poll(h.raw)
            if st == HVD_IN_PROGRESS
                if time() >= deadline
                    throw(HvdError(Int(HVD_ERR_TIMEOUT),
                                   "$(h.what) did not complete within $(timeout) s " *
                                   "(still pending; wait again)" * waiting))
                end
                yield()
                continue
            end
        end
        break
    end
    # The status's text must be read before any other hvd call on this thread.
    err = st < 0 ? hvd_error_now(st) : nothing
    raw = h.raw
    try
        if st < 0
            h.error = err
            h.state = 2
        else
            try
                h.result = h.finish(raw)
                h.state = 1
            catch e
                h.error = e
                h.state = 2
            end
        end
    finally
        h.raw = C_NULL
        h.keep = nothing
        h.finish = nothing
        hvd_handle_release(raw)
    end
    return
end

# Submits one *_async call; returns the raw handle.
function submit(f, args...)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    @check f(args..., out)
    return out[]
end

"""
    Hvd.wait_all(handles) -> Vector

Waits for every handle (even after one fails, so no operation is left
running unobserved) and returns their results; throws the first error.
"""
function wait_all(handles)
    results = Vector{Any}(undef, length(handles))
    first_error = nothing
    for (i, h) in enumerate(handles)
        try
            results[i] = wait(h)
        catch e
            first_error === nothing && (first_error = e)
            results[i] = nothing
        end
    end
    first_error === nothing || throw(first_error)
    return results
end
