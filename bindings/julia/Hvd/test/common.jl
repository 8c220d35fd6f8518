# Shared by runtests.jl (one process) and mp_tests.jl (ranks under hvdrun).
#
# CountingTestSet: a Test.jl test set that counts passes and failures over
# all nested sets, prints each failure as it happens (with the rank, so the
# lines of several ranks can be told apart), and never throws at the end, so
# the script can print its closing "N passed, N failed" line and choose its
# exit code.

using Test

if Base.find_package("Hvd") === nothing
    push!(LOAD_PATH, normpath(joinpath(@__DIR__, "..", "..")))
end
using Hvd

mutable struct CountingTestSet <: Test.AbstractTestSet
    description::String
    passed::Int
    failed::Int
end
CountingTestSet(desc; kw...) = CountingTestSet(desc, 0, 0)

const TAG = Ref("")

Test.record(ts::CountingTestSet, ::Test.Pass) = (ts.passed += 1; nothing)
Test.record(ts::CountingTestSet, ::Test.Broken) = nothing
function Test.record(ts::CountingTestSet, r::Union{Test.Fail,Test.Error})
    ts.failed += 1
    println(stderr, TAG[], "FAILED in \"", ts.description, "\":")
    show(stderr, MIME("text/plain"), r)
    println(stderr)
    flush(stderr)
    nothing
end
function Test.record(ts::CountingTestSet, child::CountingTestSet)
    ts.passed += child.passed
    ts.failed += child.failed
    nothing
end
function Test.finish(ts::CountingTestSet)
    if Test.get_testset_depth() > 0
        Test.record(Test.get_testset(), ts)
    end
    ts
end

const SUPPORTED = (UInt8, Int8, UInt16, Int16, Int32, Int64, Float16, Float32, Float64, Bool)
const OPS = (Hvd.Sum, Hvd.Average, Hvd.Min, Hvd.Max, Hvd.Product)

# Deterministic data of rank r: small values, so that sums and products of a
# few ranks stay in range for every integer type (exact comparisons).
function rank_data(::Type{T}, r::Integer, dims...) where {T}
    n = prod(dims)
    v = if T === Bool
        [((i + r) % 3) != 0 for i in 1:n]
    elseif T <: Unsigned
        [T((i % 4) + r + 1) for i in 1:n]
    elseif T <: Signed
        [T((i % 5) - 2 + r) for i in 1:n]
    else
        [T(((i % 7) - 3 + r) / 4) for i in 1:n]
    end
    return reshape(v, dims...)
end

# What the library must produce for `op` over the ranks' data.
function expected_reduce(::Type{T}, op, datas) where {T}
    if T === Bool
        return op in (Hvd.Min, Hvd.Product) ? reduce((a, b) -> a .& b, datas) :
               reduce((a, b) -> a .| b, datas)
    end
    W = T <: Integer ? Int64 : Float64   # wide enough for a few small values
    wide = [W.(d) for d in datas]
    n = length(datas)
    r = if op == Hvd.Sum
        reduce(+, wide)
    elseif op == Hvd.Average
        T <: Integer ? div.(reduce(+, wide), n) : reduce(+, wide) ./ n
    elseif op == Hvd.Min
        reduce((a, b) -> min.(a, b), wide)
    elseif op == Hvd.Max
        reduce((a, b) -> max.(a, b), wide)
    else
        reduce((a, b) -> a .* b, wide)
    end
    return T.(r)
end

# Exact for integers and Bool; for floats a relative tolerance that covers the
# type's rounding (Float16 is reduced in Float32 and rounded back once).
tolerance(::Type{Float16}) = 1e-3
tolerance(::Type{Float32}) = 1e-6
tolerance(::Type{Float64}) = 1e-12
function same_values(::Type{T}, got, want) where {T}
    Base.size(got) == Base.size(want) || return false
    T <: AbstractFloat || return got == want
    return all(isapprox(Float64(g), Float64(w); rtol = tolerance(T), atol = tolerance(T))
               for (g, w) in zip(got, want))
end

# Runs f and returns the HvdError it throws (or nothing).
function hvd_error(f)
    try
        f()
    catch e
        e isa HvdError && return e
        rethrow()
    end
    return nothing
end
