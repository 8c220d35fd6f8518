# Process sets, in real processes: run by every rank of a job started with
# hvdrun at 3 or 4 ranks (bindings/julia/run_tests.sh runs both).
#
#   hvdrun -np 4 julia --project=bindings/julia/Hvd bindings/julia/Hvd/test/process_set_tests.jl
#
# Every rank runs the same sequence of collective calls on the default
# context (split, process_set) and, within each set, its members the same
# sequence of operations; expected values are checked after the collectives,
# never before submitting them, so a failing check on one rank leaves no
# other rank waiting. Results: integers and Bool exactly, floats within the
# relative tolerance of common.jl's `tolerance` (Float16 1e-3, Float32 1e-6,
# Float64 1e-12). Every wait is bounded: handles are awaited with a timeout
# and the stall inspector ends a blocking call some rank never makes (60 s).
# Each rank prints "rank R: N passed, N failed"; rank 0 then prints the
# job's total as the closing line "N passed, N failed".

include("common.jl")

Hvd.init(stall_shutdown_s = 60)
const R = Hvd.rank()
const N = Hvd.size()
const W = Hvd.default_context()
const WAIT_S = 60          # the limit of every wait on a handle
TAG[] = "[rank $R] "
3 <= N <= 8 || error("process_set_tests.jl needs 3 to 8 ranks (hvdrun -np 3 or -np 4)")

# Data of parent rank r in the set of offset `off` (rank_data, but small
# factors for Product: a product over 4 ranks stays within Int8 and UInt8).
const OFFSET = Dict(:W => 0, :A => 1, :B => 2, :P => 3, :Q => 4, :S => 5)
function set_data(::Type{T}, op, x, dims...) where {T}
    (op == Hvd.Product && T !== Bool) || return rank_data(T, x, dims...)
    return reshape([T(1 + (i + x) % 2) for i in 1:prod(dims)], dims...)
end

# Waits on a handle with a limit.
await(h) = wait(h; timeout = WAIT_S)

# The set's members (parent ranks, in set order) and this rank's place.
members(set) = Hvd.parent_ranks(set)

# The HvdError or ArgumentError f() throws (or nothing).
function thrown(f)
    try
        f()
    catch e
        e isa Union{HvdError,ArgumentError} && return e
        rethrow()
    end
    return nothing
end

ts = @testset CountingTestSet "Hvd process sets, $N ranks" begin

    @testset "split by color, with keys, and UNDEFINED_COLOR" begin
        @test Hvd.UNDEFINED_COLOR == -1 == Hvd.HVD_UNDEFINED_COLOR
        @test !Hvd.is_process_set(W) && Hvd.parent_ranks(W) == collect(0:N-1)
        @test Hvd.rank(W) == R && Hvd.size(W) == N
        # parity: ranks ordered by parent rank (key = parent rank by default)
        half = Hvd.split(W, R % 2)
        mine = [r for r in 0:N-1 if r % 2 == R % 2]
        @test half isa Hvd.Context && Hvd.is_process_set(half) && isopen(half)
        @test Hvd.size(half) == length(mine)
        @test Hvd.rank(half) == div(R, 2)
        @test members(half) == mine
        @test half.members == mine
        # one host: every member is local, one cross rank
        @test Hvd.local_rank(half) == Hvd.rank(half) && Hvd.local_size(half) == length(mine)
        @test Hvd.cross_rank(half) == 0 && Hvd.cross_size(half) == 1
        @test Hvd.transport(half) == Hvd.transport()
        @test occursin("process set of parent ranks $mine", sprint(show, half))
        @test sprint(show, W) == "Hvd.Context(default)"
        # keys reverse the order
        rev = Hvd.split(W, 3; key = N - R)
        @test Hvd.rank(rev) == N - 1 - R
        @test members(rev) == collect(N-1:-1:0)
        # equal keys: parent rank breaks the tie
        tie = Hvd.split(W, 0; key = 7)
        @test Hvd.rank(tie) == R && members(tie) == collect(0:N-1)
        # UNDEFINED_COLOR: nothing on rank 0, a set of the others
        rest = Hvd.split(W, R == 0 ? Hvd.UNDEFINED_COLOR : 5)
        if R == 0
            @test rest === nothing
        else
            @test Hvd.rank(rest) == R - 1 && members(rest) == collect(1:N-1)
        end
        # several colors at once: three sets (for N = 3: one rank each)
        tri = Hvd.split(W, R % 3; key = -R)
        want = reverse([r for r in 0:N-1 if r % 3 == R % 3])
        @test members(tri) == want && Hvd.rank(tri) == findfirst(==(R), want) - 1
        # within each: a sum over exactly its members
        @test allreduce(R + 1, +, tri) == sum(want) + length(want)
        @test allreduce(R + 1, +, half) == sum(mine) + length(mine)
        @test allreduce(R + 1, +, rev) == sum(1:N)
        for s in (half, rev, tie, tri)
            close(s)
        end
        rest === nothing || close(rest)
    end

    # Sets made by list, overlapping and disjoint, and a set of one. For
    # N = 3: A = [0,1,2], B = [1,2], P = [0,1], Q = [2], S = [2].
    A = Hvd.process_set(W, collect(0:min(N, 4)-1))
    B = Hvd.process_set(W, 1:N-1)                      # overlaps A
    P = Hvd.process_set(W, [0, 1])                     # disjoint from Q
    Q = Hvd.process_set(W, (2:N-1...,))
    S = Hvd.process_set(W, [N - 1])                    # a set of one
    sets = (A = A, B = B, P = P, Q = Q, S = S)
    lists = (A = collect(0:min(N, 4)-1), B = collect(1:N-1), P = [0, 1], Q = collect(2:N-1),
             S = [N - 1])

    @testset "process_set lists" begin
        for (k, s) in pairs(sets)
            if R in lists[k]
                @test s isa Hvd.Context
                @test members(s) == lists[k]
                @test Hvd.rank(s) == findfirst(==(R), lists[k]) - 1
                @test Hvd.size(s) == length(lists[k])
            else
                @test s === nothing
            end
        end
        S === nothing || @test Hvd.size(S) == 1
    end

    @testset "allreduce $T $op in overlapping sets, same names at once" for T in SUPPORTED,
                                                                             op in OPS
        if T === Bool && op == Hvd.Average     # refused at submission, in a set too
            if A !== nothing
                e = thrown(() -> Hvd.allreduce_async!(rank_data(T, R, 2), op, A))
                @test e isa HvdError && e.status == Hvd.HVD_ERR_UNSUPPORTED
            end
            continue
        end
        # Every rank submits, under one name, in the default context and in
        # each set it belongs to, in an order that differs between ranks.
        name = "ar.$T.$op"
        subs = [(:W, W, collect(0:N-1))]
        for k in (:A, :B, :P, :Q, :S)
            R in lists[k] && push!(subs, (k, sets[k], lists[k]))
        end
        R % 2 == 1 && reverse!(subs)
        # data depends on the set and on the rank, so a result from the wrong
        # set or over the wrong members cannot pass
        hs = [(mem, k, Hvd.allreduce_async(set_data(T, op, R + OFFSET[k], 3, 2), op, ctx; name = name))
              for (k, ctx, mem) in subs]
        for (mem, k, h) in hs
            got = await(h)
            want = expected_reduce(T, op, [set_data(T, op, r + OFFSET[k], 3, 2) for r in mem])
            @test same_values(T, got, want)
        end
    end

    @testset "every operation in every set ($k)" for k in (:A, :B, :P, :Q, :S)
        R in lists[k] || continue
        s = sets[k]
        mem = lists[k]
        n = length(mem)
        sr = Hvd.rank(s)
        # allreduce, in place and into a new array, exact
        x = Int64[R, 2R + 1, -R]
        @test allreduce!(copy(x), +, s) == sum(Int64[r, 2r + 1, -r] for r in mem)
        @test allreduce(x, max, s; name = "ar.max") == Int64[maximum(mem), 2maximum(mem) + 1,
                                                              -minimum(mem)]
        @test allreduce(Float64.(x), s) ≈ sum(Float64[r, 2r + 1, -r] for r in mem) ./ n
        @test allreduce(x, s) == div.(sum(Int64[r, 2r + 1, -r] for r in mem), n)
        @test allreduce(Float32(R) / 3, +, s) ≈ Float32(sum(mem) / 3) rtol = 1e-6
        @test allreduce(fill(Float64(R + 1), 4), s; op = Hvd.Sum, prescale = 2, postscale = 0.5) ==
              fill(Float64(sum(mem) + n), 4)
        # grouped
        xs = [fill(Int32(R), 3), fill(Int32(2R), 2, 2)]
        @test grouped_allreduce!(xs, +, s) === xs
        @test xs[1] == fill(Int32(sum(mem)), 3) && xs[2] == fill(Int32(2sum(mem)), 2, 2)
        g = await(Hvd.grouped_allreduce_async!((fill(R, 2), fill(-R, 1)), min, s))
        @test g[1] == fill(minimum(mem), 2) && g[2] == [-maximum(mem)]
        # broadcast: roots are ranks within the set
        for root in 0:n-1
            M = fill(Float64(R), 2, 3)
            @test Hvd.broadcast!(M, root, s) === M && M == fill(Float64(mem[root+1]), 2, 3)
            @test Hvd.broadcast([R, -R], s; root = root) == [mem[root+1], -mem[root+1]]
            @test await(Hvd.broadcast_async!([R], s; root = root)) == [mem[root+1]]
        end
        # a root outside the set (parent rank N-1 is no set rank in a smaller set)
        if n < N
            e = thrown(() -> Hvd.broadcast!([R], n, s; name = "bc.badroot"))
            @test e isa HvdError && e.status == Hvd.HVD_ERR_INVALID_ARGUMENT
        end
        # allgather: last dimension differing by rank, in set order
        @test allgather(R, s) == mem
        got = allgather(fill(Int16(R), 2, R + 1), s; name = "ag")
        @test got == reduce(hcat, [fill(Int16(r), 2, r + 1) for r in mem])
        @test await(Hvd.allgather_async(Float32[R], s)) == Float32.(mem)
        # alltoall, even and with splits (set ranks)
        E = [100R + j for j in 0:n-1]
        @test alltoall(E, s) == [100r + sr for r in mem]
        splits = [j + 1 for j in 0:n-1]
        v = [1000R + k for k in 1:sum(splits)]
        got, recv = alltoall(v, splits, s; name = "a2a.splits")
        @test recv == fill(sr + 1, n)
        off = sum(splits[1:sr])
        @test got == reduce(vcat, [[1000r + off + k for k in 1:sr+1] for r in mem])
        got2, recv2 = await(Hvd.alltoall_async(v, splits, s))
        @test got2 == got && recv2 == recv
        @test_throws ArgumentError alltoall(zeros(N + 1), fill(1, N + 1), s)
        # reducescatter: 2n+1 elements, the first rank one more
        m = 2n + 1
        y = Int64[R + k for k in 1:m]
        full = [sum(r + k for r in mem) for k in 1:m]
        counts = [div(m, n) + (j < m % n ? 1 : 0) for j in 0:n-1]
        st = sum(counts[1:sr]) + 1
        @test reducescatter(y, +, s) == full[st:st+counts[sr+1]-1]
        @test await(Hvd.reducescatter_async(Float64.(y), Hvd.Sum, s)) ≈
              Float64.(full[st:st+counts[sr+1]-1]) rtol = 1e-12
        # barrier and async allreduce
        @test Hvd.barrier(s) === nothing
        @test await(Hvd.barrier_async(s)) === nothing
        z = fill(UInt8(R + 1), 5)
        @test await(Hvd.allreduce_async!(z, +, s)) === z && z == fill(UInt8(sum(mem) + n), 5)
        # training helpers over the set
        grads = (w = fill(Float64(R), 2), b = [Float64(-R)])
        allreduce_gradients!(grads, s; op = +)
        @test grads.w == fill(Float64(sum(mem)), 2) && grads.b == [-Float64(sum(mem))]
        params = (w = fill(R, 3),)
        @test broadcast_parameters!(params, n - 1, s).w == fill(mem[end], 3)
        p = [1.0, 2.0]
        opt = DistributedOptimizer(Hvd.Descent(0.5), s)
        Hvd.update!(opt, [p], [fill(Float64(R), 2)])
        @test p ≈ [1.0, 2.0] .- 0.5 * sum(mem) / n rtol = 1e-12
    end

    @testset "every element type in a set: allgather, broadcast, reducescatter" begin
        if A !== nothing
            mem = lists[:A]
            n = length(mem)
            for T in SUPPORTED
                @test allgather(rank_data(T, R, 2, R + 1), A; name = "ag.$T") ==
                      reduce(hcat, [rank_data(T, r, 2, r + 1) for r in mem])
                X = rank_data(T, R, 3)
                @test Hvd.broadcast!(X, n - 1, A; name = "bc.$T") == rank_data(T, mem[end], 3)
                T === Bool && continue
                want = expected_reduce(T, Hvd.Sum, [rank_data(T, r, 2, n) for r in mem])
                got = reducescatter(rank_data(T, R, 2, n), Hvd.Sum, A; name = "rs.$T")
                @test same_values(T, got, want[:, Hvd.rank(A)+1:Hvd.rank(A)+1])
            end
        end
    end

    @testset "unnamed operations: each context counts its own names" begin
        # Ranks of B (all but rank 0) make unnamed async calls there that
        # rank 0 does not see; the next unnamed call in the default context
        # must still get the same name on every rank (a shared counter would
        # leave the ranks waiting on different names until the wait's limit).
        if B !== nothing
            for i in 1:3
                @test await(Hvd.allreduce_async!([R], +, B)) == [sum(lists[:B])]
            end
        end
        h = Hvd.allreduce_async!([1], +)
        e = thrown(() -> wait(h; timeout = 20))
        @test e === nothing
        @test e === nothing && h.result == [N]
        @test Hvd.op_name(W, "x", nothing) == "x.noname.0"
        # a set has its own counters, from 0
        if S !== nothing
            @test Hvd.op_name(S, "fresh", nothing) == "fresh.noname.0"
            @test Hvd.op_name(S, "fresh", nothing) == "fresh.noname.1"
            @test Hvd.op_name(W, "fresh", nothing) == "fresh.noname.0"
        end
        # blocking unnamed calls in a set and in the default context at once
        if P !== nothing
            t = @async allreduce([R], +, P)
            @test allreduce([R], +) == [sum(0:N-1)]
            @test fetch(t) == [1]
        else
            @test allreduce([R], +) == [sum(0:N-1)]
        end
    end

    @testset "a mismatch in one set beside a working one" begin
        if P !== nothing
            e = thrown(() -> allreduce(zeros(2 + R), +, P; name = "mm"))
            @test e isa HvdError && e.status == Hvd.HVD_ERR_MISMATCH
            @test e !== nothing && occursin("mm", e.message)
            @test allreduce([1], +, P; name = "mm.after") == [2]
        else
            @test allreduce(fill(R, 2), +, Q; name = "mm") == fill(sum(lists[:Q]), 2)
        end
        @test allreduce([1], +; name = "mm.world") == [N]
    end

    @testset "bad lists and colors raise on every rank" begin
        INV = Hvd.HVD_ERR_INVALID_ARGUMENT
        for (bad, why) in (([1, 0], "not sorted ascending"), ([0, 0], "twice"),
                           ([0, N], "out of range"), ([-1], "out of range"), (Int[], "empty"))
            # only the last rank passes the bad list
            e = thrown(() -> Hvd.process_set(W, R == N - 1 ? bad : [0, 1]))
            @test e isa HvdError && e.status == INV
            @test e !== nothing && occursin("rank $(N-1) passed the process-set rank list", e.message) &&
                  occursin(why, e.message)
        end
        # every rank passes the same bad list
        e = thrown(() -> Hvd.process_set(W, [2, 1]))
        @test e isa HvdError && e.status == INV && occursin("rank 0 passed", e.message)
        # lists that differ
        e = thrown(() -> Hvd.process_set(W, R == 0 ? [0, 1] : [0, 2]))
        @test e isa HvdError && e.status == Hvd.HVD_ERR_MISMATCH
        @test e !== nothing && occursin("rank 0 listed [0, 1]", e.message)
        # an entry that is not an integer, on rank 1: an ArgumentError there,
        # the library's refusal naming rank 1 everywhere else
        e = thrown(() -> Hvd.process_set(W, R == 1 ? [0, 1.5] : [0, 1]))
        if R == 1
            @test e isa ArgumentError && occursin("[0.0, 1.5] has entry 1 = 0.0", e.msg)
        else
            @test e isa HvdError && e.status == INV && occursin("rank 1 passed", e.message)
        end
        e = thrown(() -> Hvd.process_set(W, R == 2 ? 3 : [0, 1]))
        @test R == 2 ? e isa ArgumentError : (e isa HvdError && occursin("rank 2 passed", e.message))
        # a color below -1, and a color that is no integer
        e = thrown(() -> Hvd.split(W, R == 0 ? -5 : 1))
        @test e isa HvdError && e.status == INV
        @test e !== nothing && occursin("rank 0 passed color -5 to Hvd.split", e.message)
        e = thrown(() -> Hvd.split(W, R == N - 1 ? 0.5 : 1))
        @test R == N - 1 ? e isa ArgumentError && occursin("0.5", e.msg) :
              e isa HvdError && e.status == INV && occursin("rank $(N-1)", e.message)
        e = thrown(() -> Hvd.split(W, 1; key = R == 0 ? 2^40 : 0))
        @test R == 0 ? e isa ArgumentError && occursin("key", e.msg) : e isa HvdError
        # one rank splits while the others create
        e = thrown(() -> R == 1 ? Hvd.split(W, 0) : Hvd.process_set(W, [0, 1]))
        @test e isa HvdError && e.status == Hvd.HVD_ERR_MISMATCH
        @test e !== nothing && occursin("Hvd.split", e.message) && occursin("Hvd.process_set", e.message)
        # sets of sets are refused (on the members, at once)
        if A !== nothing
            e = thrown(() -> Hvd.split(A, 0))
            @test e isa HvdError && e.status == Hvd.HVD_ERR_UNSUPPORTED
            e = thrown(() -> Hvd.process_set(A, [0]))
            @test e isa HvdError && e.status == Hvd.HVD_ERR_UNSUPPORTED
        end
        # nothing was made, and everything still works
        @test allreduce([R], +; name = "after.bad") == [sum(0:N-1)]
        A === nothing || @test allreduce([1], +, A; name = "after.bad") == [length(lists[:A])]
    end

    @testset "closing sets" begin
        # a pending operation in a set completes with HVD_ERR_ABORTED when the
        # set is closed (its other member never submits it)
        if P !== nothing
            h = R == 0 ? Hvd.allreduce_async!([1.0], +, P; name = "never") : nothing
            close(P)
            @test !isopen(P) && occursin("closed", sprint(show, P))
            if R == 0
                e = thrown(() -> wait(h; timeout = WAIT_S))
                @test e isa HvdError && e.status == Hvd.HVD_ERR_ABORTED
            end
            # a closed set is refused at once, and closing again does nothing
            for f in (() -> allreduce([1], P), () -> Hvd.barrier(P), () -> Hvd.rank(P),
                      () -> Hvd.parent_ranks(P), () -> Hvd.split(P, 0), () -> allgather(1, P))
                e = thrown(f)
                @test e isa HvdError && e.status == Hvd.HVD_ERR_ABORTED && occursin("closed", e.message)
            end
            @test close(P) === nothing
        end
        e = thrown(() -> close(W))
        @test e isa ArgumentError && occursin("Hvd.shutdown()", e.msg)
        for s in (A, B, Q, S)
            s === nothing || close(s)
        end
        @test isempty(Hvd.LIVE_SETS)
        # make and close sets again and again: the slots are reused
        for i in 1:25
            s = Hvd.process_set(W, i % 2 == 0 ? [0, N - 1] : collect(0:N-1))
            if s !== nothing
                @test allreduce([i], +, s; name = "cycle") == [i * Hvd.size(s)]
                close(s)
            end
        end
        @test allreduce([R], +; name = "after.cycles") == [sum(0:N-1)]
    end

    @testset "a set left open is freed at exit" begin
        # kept open on purpose: shutdown_at_exit frees it after the default
        # context (the exit code below tells whether that went well)
        left = Hvd.split(W, 0)
        @test Hvd.size(left) == N && haskey(Hvd.LIVE_SETS, left)
    end
end

# Totals over the job; rank 0 prints the closing line.
println("rank $R: ", ts.passed, " passed, ", ts.failed, " failed")
flush(stdout)
totals = try
    allreduce([ts.passed, ts.failed], +; name = "process_set_tests.totals")
catch err
    println(stderr, TAG[], "could not add up the counts: ", sprint(showerror, err))
    [ts.passed, ts.failed + 1]
end
if R == 0
    println(totals[1], " passed, ", totals[2], " failed")
end
flush(stdout)
exit(totals[2] == 0 ? 0 : 1)
