# Multi-process tests: run by every rank of a job started with hvdrun.
#
#   hvdrun -np 2 julia --project=bindings/julia/Hvd bindings/julia/Hvd/test/mp_tests.jl
#   HVD_JULIA_TEST_TRANSPORT=ucx HVD_SHM=0 hvdrun -np 2 julia ... mp_tests.jl
#
# Written for any number of ranks >= 2 (run_tests.sh uses 2). Every rank runs
# the same sequence of collectives (a test that fails on one rank must not
# leave the others waiting: expected values are checked after the collective,
# never before submitting it). Each rank prints "rank R: N passed, N failed";
# rank 0 then prints the job's total as the closing line "N passed, N failed".
# Exit code 1 on any failure on any rank.

include("common.jl")

# HVD_JULIA_TEST_TRANSPORT=ucx (run_tests.sh): the transport asked for by
# name in Hvd.init, as a user would, and checked to be the one in use.
const WANT_TRANSPORT = get(ENV, "HVD_JULIA_TEST_TRANSPORT", "")
isempty(WANT_TRANSPORT) ? Hvd.init() : Hvd.init(transport = WANT_TRANSPORT)
const R = Hvd.rank()
const N = Hvd.size()
TAG[] = "[rank $R] "
N >= 2 || error("mp_tests.jl needs at least 2 ranks (run it under hvdrun -np 2)")

mutable struct Net                 # a model as a struct
    W::Matrix{Float64}
    b::Vector{Float64}
    act::Function
end

ts = @testset CountingTestSet "Hvd multi-process" begin

    @testset "topology" begin
        @test 0 <= R < N
        @test N == parse(Int, ENV["HVD_SIZE"])
        @test R == parse(Int, ENV["HVD_RANK"])
        @test Hvd.local_rank() == parse(Int, ENV["HVD_LOCAL_RANK"])
        @test Hvd.local_size() == parse(Int, ENV["HVD_LOCAL_SIZE"])
        @test Hvd.cross_rank() == parse(Int, ENV["HVD_CROSS_RANK"])
        @test Hvd.cross_size() == parse(Int, ENV["HVD_CROSS_SIZE"])
        @test Hvd.transport() != "local"
        isempty(WANT_TRANSPORT) || @test Hvd.transport() == WANT_TRANSPORT
        @test allgather(R) == collect(0:N-1)
    end

    @testset "allreduce $T $op" for T in SUPPORTED, op in OPS
        datas = [rank_data(T, r, 5, 3) for r in 0:N-1]
        if T === Bool && op == Hvd.Average          # refused by the library, on every rank
            e = hvd_error(() -> allreduce(datas[R+1]; op = op))
            @test e isa HvdError && e.status == Hvd.HVD_ERR_UNSUPPORTED
            continue
        end
        want = expected_reduce(T, op, datas)
        # out of place, in place, a 1-element and a longer vector
        got = allreduce(datas[R+1]; op = op, name = "ar.$T.$op")
        @test got isa Matrix{T}
        @test same_values(T, got, want)
        A = copy(datas[R+1])
        allreduce!(A; op = op, name = "ar!.$T.$op")
        @test same_values(T, A, want)
        long = [rank_data(T, r, 1001) for r in 0:N-1]
        got = allreduce(long[R+1]; op = op)          # generated name
        @test same_values(T, got, expected_reduce(T, op, long))
        s = allreduce(rank_data(T, R, 1)[1]; op = op)
        @test same_values(T, [s], expected_reduce(T, op, [rank_data(T, r, 1) for r in 0:N-1]))
    end

    @testset "allreduce scaling" begin
        x = fill(Float64(R + 1), 4)
        total = sum(1:N)
        @test allreduce(x; op = Hvd.Sum, prescale = 2, postscale = 0.5) ≈ fill(total, 4)
        @test allreduce(x; op = Hvd.Average, postscale = 3) ≈ fill(3 * total / N, 4)
        y = fill(Float32(R + 1), 3)
        @test allreduce(y; op = Hvd.Sum, prescale = 0.25) ≈ fill(Float32(total / 4), 3)
        z = fill(Int32(R + 1), 2)
        @test allreduce(z; op = Hvd.Sum, postscale = 2) == fill(Int32(2 * total), 2)
    end

    @testset "allreduce Adasum" begin
        v = [0.25, -3.0, 7.5]                   # identical on every rank: the vector
        @test allreduce(v; op = Hvd.Adasum) == v
        e = zeros(Float32, N + 1); e[R + 1] = R + 1   # orthogonal: the sum
        @test allreduce(e; op = Hvd.Adasum) == Float32[1:N; 0]
        a = R == 0 ? [1.0, 0.0] : R == 1 ? [1.0, 1.0] : [0.0, 0.0]
        # (1,0) and (1,1): a.b = 1 -> 0.5 a + 0.75 b; zero vectors leave it as is
        @test allreduce(a; op = Hvd.Adasum) == [1.25, 0.75]
        @test_throws HvdError allreduce(Int32[1, 2]; op = Hvd.Adasum)
    end

    @testset "MPI.jl forms: +, *, min, max; root keyword" begin
        A = Int64[R + 1, -(R + 2), 3(R + 1)]
        rows = [Int64[r + 1, -(r + 2), 3(r + 1)] for r in 0:N-1]
        sums = reduce(+, rows)
        prods = reduce((a, b) -> a .* b, rows)
        mins = reduce((a, b) -> min.(a, b), rows)
        maxs = reduce((a, b) -> max.(a, b), rows)
        @test Hvd.allreduce!(copy(A), +) == sums
        @test allreduce!(copy(A); op = +) == sums
        @test allreduce(A, *) == prods
        @test allreduce(A; op = *) == prods
        @test allreduce(A, min) == mins
        @test allreduce(A; op = max) == maxs
        @test allreduce(R + 1, +) === sum(1:N)
        @test allreduce(Int32(R + 2), *) === Int32(prod(2:N+1))
        @test allreduce(-R, min) === -(N - 1) && allreduce(R, max) === N - 1
        # the default is the average, not the sum (integers round toward zero)
        @test allreduce(A) == div.(sums, N)
        @test allreduce!(fill(Int16(2R), 2)) == fill(Int16(div(2 * sum(0:N-1), N)), 2)
        # the same op through the other entry points
        @test wait(Hvd.allreduce_async!(copy(A), +; name = "mpi.async")) == sums
        @test reducescatter(repeat(A, N), +) == sums
        xs = [copy(A), fill(R, 2)]
        @test grouped_allreduce!(xs, max) === xs && xs[1] == maxs && xs[2] == fill(N - 1, 2)
        g = (w = copy(A),)
        @test allreduce_gradients!(g; op = +, name = "mpi.grads").w == sums
        # root as a keyword (MPI.jl's Bcast!(A, comm; root)) or as an argument
        for root in (0, N - 1)
            B = fill(10R, 2, 2)
            @test Hvd.broadcast!(B; root = root) === B
            @test B == fill(10root, 2, 2)
            @test Hvd.broadcast([R, 2R]; root = root) == [root, 2root]
            @test wait(Hvd.broadcast_async!([R]; root = root)) == [root]
            p = (w = fill(R, 3),)
            @test broadcast_parameters!(p; root = root).w == fill(root, 3)
            @test broadcast_parameters!([fill(R, 1)], root) == [fill(root, 1)]
        end
        # refused before anything reaches the library, on every rank alike
        @test_throws ArgumentError allreduce!(copy(A), -)
        @test_throws ArgumentError Hvd.broadcast!(copy(A), 0; root = 0)
        @test allreduce([1], +; name = "mpi.after") == [N]
    end

    @testset "unnamed blocking calls reuse one name" begin
        # Shapes, types and ops change from call to call under the same
        # fixed name (the response cache renegotiates); results stay exact.
        for i in 1:6, T in (Int32, Float64, Int64)
            x = fill(T(R + i), i, 2)
            @test allreduce(x; op = Hvd.Sum) == fill(T(sum(r + i for r in 0:N-1)), i, 2)
            @test allreduce!(copy(x), max) == fill(T(N - 1 + i), i, 2)
            @test allgather(fill(T(R), R + i)) == reduce(vcat, [fill(T(r), r + i) for r in 0:N-1])
            @test Hvd.broadcast!(copy(x); root = i % N) == fill(T(i % N + i), i, 2)
        end
        @test Hvd.BLOCKING_BUSY["allreduce"] == false
    end

    @testset "grouped allreduce" begin
        xs = [fill(Float32(R), 3), fill(Float32(R + 1), 2, 2), fill(Float32(1), 5)]
        @test grouped_allreduce!(xs; op = Hvd.Sum, name = "grp") === xs
        @test xs[1] == fill(Float32(sum(0:N-1)), 3)
        @test xs[2] == fill(Float32(sum(1:N)), 2, 2)
        @test xs[3] == fill(Float32(N), 5)
        h = Hvd.grouped_allreduce_async!((fill(R, 2), fill(2R, 3)); op = Hvd.Max)
        a, b = wait(h)
        @test a == fill(N - 1, 2) && b == fill(2(N - 1), 3)
        # a group shares one element type (refused at submission, on every rank)
        e = hvd_error(() -> grouped_allreduce!((zeros(Float32, 2), zeros(Float64, 2))))
        @test e isa HvdError && e.status == Hvd.HVD_ERR_INVALID_ARGUMENT
        x = zeros(2)
        @test_throws ArgumentError grouped_allreduce!([x, x])
    end

    @testset "async, any submission order" begin
        names = ["order.$i" for i in 1:8]
        order = R % 2 == 0 ? (1:8) : reverse(1:8)     # ranks submit in different orders
        arrays = Dict(i => fill(Float64(i * (R + 1)), 100 * i) for i in 1:8)
        handles = Dict(i => Hvd.allreduce_async!(arrays[i]; op = Hvd.Sum, name = names[i])
                       for i in order)
        for i in 1:8
            @test wait(handles[i]) === arrays[i]
            @test arrays[i] == fill(Float64(i * sum(1:N)), 100 * i)
        end
        h = Hvd.allgather_async(fill(R, 2))
        t0 = time()
        while !isready(h) && time() - t0 < 60
            yield()
        end
        @test isready(h)
        @test wait(h) == repeat(0:N-1, inner = 2)
        @test Hvd.barrier() === nothing
    end

    @testset "broadcast $T" for T in SUPPORTED
        for root in (0, N - 1)
            A = rank_data(T, R, 4, 2)
            @test Hvd.broadcast!(A, root; name = "bc.$T.$root") === A
            @test A == rank_data(T, root, 4, 2)
        end
        B = rank_data(T, R, 3)
        C = Hvd.broadcast(B, 1)
        @test C == rank_data(T, 1, 3) && B == rank_data(T, R, 3)
    end

    @testset "broadcast into a contiguous view" begin
        P = fill(Float64(R), 3, 4)
        Hvd.broadcast!(view(P, :, 2:3), 1; name = "bcview")
        @test P[:, 2:3] == fill(1.0, 3, 2)
        @test P[:, 1] == fill(Float64(R), 3) && P[:, 4] == fill(Float64(R), 3)
    end

    @testset "allgather, differing last dimension" begin
        # vectors: end to end
        v = fill(R, R + 1)
        got = allgather(v; name = "ag.vec")
        @test got == reduce(vcat, [fill(r, r + 1) for r in 0:N-1])
        # matrices, samples as columns: column-wise (hcat)
        M = Float32[10R + i + 100j for i in 1:3, j in 1:R+1]
        got = allgather(M; name = "ag.mat")
        @test got isa Matrix{Float32}
        @test Base.size(got) == (3, sum(r + 1 for r in 0:N-1))
        @test got == reduce(hcat, [Float32[10r + i + 100j for i in 1:3, j in 1:r+1] for r in 0:N-1])
        # 3-d: along the third dimension
        X = fill(Int16(R), 2, 2, R + 2)
        got = allgather(X; name = "ag.3d")
        @test Base.size(got) == (2, 2, sum(r + 2 for r in 0:N-1))
        @test got == cat([fill(Int16(r), 2, 2, r + 2) for r in 0:N-1]...; dims = 3)
        # a rank contributing nothing
        e = R == 0 ? Float64[] : fill(Float64(R), R)
        got = allgather(e; name = "ag.empty")
        @test got == reduce(vcat, [r == 0 ? Float64[] : fill(Float64(r), r) for r in 0:N-1])
        # every element type
        for T in SUPPORTED
            got = allgather(rank_data(T, R, 2, R + 1); name = "ag.$T")
            @test got == reduce(hcat, [rank_data(T, r, 2, r + 1) for r in 0:N-1])
        end
        # other dimensions must agree: an error on every rank
        bad = zeros(R + 1, 2)
        err = hvd_error(() -> allgather(bad; name = "ag.bad"))
        @test err isa HvdError && err.status == Hvd.HVD_ERR_MISMATCH
    end

    @testset "alltoall" begin
        # even split of the last dimension: slice j goes to rank j
        A = [100R + 10j + i for i in 1:2, j in 0:N-1]       # column j for rank j
        got = alltoall(A; name = "a2a.even")
        @test got == [100r + 10R + i for i in 1:2, r in 0:N-1]
        # explicit splits: rank r sends j+1 elements to rank j
        splits = [j + 1 for j in 0:N-1]
        v = Float64[1000R + k for k in 1:sum(splits)]
        got, recv = alltoall(v, splits; name = "a2a.splits")
        @test recv == fill(R + 1, N)
        offset = sum(splits[1:R])
        @test got == reduce(vcat, [Float64[1000r + offset + k for k in 1:R+1] for r in 0:N-1])
        # an uneven total without splits is refused
        e = hvd_error(() -> alltoall(zeros(N + 1); name = "a2a.bad"))
        @test e isa HvdError
    end

    @testset "reducescatter" begin
        # 2N+1 elements: the first rank gets one more
        n = 2N + 1
        x = Float64[R + k for k in 1:n]
        got = reducescatter(x; op = Hvd.Sum, name = "rs.vec")
        full = [sum(r + k for r in 0:N-1) for k in 1:n]
        counts = [div(n, N) + (r < n % N ? 1 : 0) for r in 0:N-1]
        start = sum(counts[1:R]) + 1
        @test got == full[start:start+counts[R+1]-1]
        # matrices split by columns
        M = fill(Float32(R + 1), 3, 2N)
        got = reducescatter(M; name = "rs.mat")              # Average
        @test got == fill(Float32(sum(1:N) / N), 3, 2)
    end

    @testset "gradient helpers" begin
        # allreduce_gradients! over a nested NamedTuple (nothing skipped)
        g = (layers = ((weight = fill(Float32(R), 2, 3), bias = fill(Float32(2R), 3)),
                       (weight = fill(Float64(R + 1), 1, 2), bias = nothing)),
             σ = nothing)
        allreduce_gradients!(g)
        mean0 = sum(0:N-1) / N
        @test g.layers[1].weight == fill(Float32(mean0), 2, 3)
        @test g.layers[1].bias == fill(Float32(2mean0), 3)
        @test g.layers[2].weight ≈ fill(mean0 + 1, 1, 2)
        # over a vector of arrays and a Dict
        vs = [fill(Float64(R), 4), fill(Float64(R), 2, 2)]
        allreduce_gradients!(vs; op = Hvd.Sum, name = "vecgrads")
        @test vs[1] == fill(Float64(sum(0:N-1)), 4) && vs[2] == fill(Float64(sum(0:N-1)), 2, 2)
        d = Dict(:a => fill(1.0 * R, 3), :b => fill(2.0 * R, 1))
        allreduce_gradients!(d; name = "dictgrads")
        @test d[:a] ≈ fill(mean0, 3) && d[:b] ≈ fill(2mean0, 1)

        # broadcast_parameters! on a struct and on a NamedTuple
        net = Net(fill(Float64(R), 2, 2), fill(Float64(R), 2), tanh)
        broadcast_parameters!(net; root = 0)
        @test net.W == zeros(2, 2) && net.b == zeros(2)
        nt = (W = fill(R, 3), inner = (c = fill(1.5R, 2),))
        broadcast_parameters!(nt; root = N - 1)
        @test nt.W == fill(N - 1, 3) && nt.inner.c == fill(1.5(N - 1), 2)

        # DistributedOptimizer: rank-specific gradients, identical results
        params = (W = [1.0 2.0; 3.0 4.0], b = [0.0, 0.0])
        for step in 1:3
            grads = (W = fill(Float64(R + step), 2, 2), b = [Float64(R), -Float64(R)])
            Hvd.update!(DistributedOptimizer(Hvd.Descent(0.1)), params, grads)
        end
        gmean(step) = sum(r + step for r in 0:N-1) / N
        @test params.W ≈ [1.0 2.0; 3.0 4.0] .- 0.1 * sum(gmean(s) for s in 1:3)
        @test params.b ≈ [-0.3 * mean0, 0.3 * mean0]
        # identical on every rank: max == min
        flat = vcat(vec(params.W), params.b)
        @test allreduce(flat; op = Hvd.Max) == allreduce(flat; op = Hvd.Min)
        # implicit style, momentum
        p = [1.0, 2.0]
        mom = DistributedOptimizer(Hvd.Momentum(0.1, 0.9))
        Hvd.update!(mom, [p], IdDict{Any,Any}(p => fill(Float64(R), 2)))
        @test p ≈ [1.0, 2.0] .- 0.1 * mean0
    end

    @testset "errors on every rank" begin
        # shapes that differ across ranks
        e = hvd_error(() -> allreduce!(zeros(3 + R); name = "mm.shape"))
        @test e isa HvdError && e.status == Hvd.HVD_ERR_MISMATCH
        @test e !== nothing && occursin("mm.shape", e.message)
        # element types that differ
        x = R == 0 ? zeros(Float32, 3) : zeros(Float64, 3)
        e = hvd_error(() -> allreduce(x; name = "mm.dtype"))
        @test e isa HvdError && e.status == Hvd.HVD_ERR_MISMATCH
        # ops that differ
        e = hvd_error(() -> allreduce(ones(2); op = R == 0 ? Hvd.Sum : Hvd.Max, name = "mm.op"))
        @test e isa HvdError && e.status == Hvd.HVD_ERR_MISMATCH
        # broadcast roots that differ
        e = hvd_error(() -> Hvd.broadcast!(zeros(2), R == 0 ? 0 : 1; name = "mm.root"))
        @test e isa HvdError && e.status == Hvd.HVD_ERR_MISMATCH
        # gradient structures whose sizes differ
        e = hvd_error(() -> allreduce_gradients!((w = zeros(2 + R),); name = "mm.grads"))
        @test e isa HvdError && e.status == Hvd.HVD_ERR_MISMATCH
        # Julia-side refusals (nothing reaches the library, on any rank)
        @test_throws ArgumentError allreduce!(zeros(ComplexF32, 2))
        @test_throws ArgumentError allreduce!(view(zeros(4, 4), 1, :))
        @test_throws ArgumentError allgather(PermutedDimsArray(zeros(2, 3), (2, 1)))
        @test_throws ArgumentError alltoall(zeros(4), [4])
        # and the context is still usable
        @test allreduce(fill(1.0, 2); op = Hvd.Sum, name = "after.errors") == fill(Float64(N), 2)
    end

    @testset "a name in flight is refused" begin
        # Rank k submits "dup.k" and its duplicate before the barrier, the
        # others after it, so "dup.k" is still in flight at rank k's check.
        handles = []
        for k in 0:N-1
            if R == k
                push!(handles, Hvd.allreduce_async!(ones(2); op = Hvd.Sum, name = "dup.$k"))
                e = hvd_error(() -> Hvd.allreduce_async!(ones(2); name = "dup.$k"))
                @test e isa HvdError && e.status == Hvd.HVD_ERR_DUPLICATE_NAME
            end
            Hvd.barrier()
            R == k || push!(handles, Hvd.allreduce_async!(ones(2); op = Hvd.Sum, name = "dup.$k"))
        end
        @test all(wait(h) == fill(Float64(N), 2) for h in handles)
    end

    @testset "a wait that runs out names the ranks not yet there" begin
        # Rank 0 waits, with a limit, on a tensor the others submit only after
        # the barrier.
        if R == 0
            h = Hvd.allreduce_async!(ones(2); op = Hvd.Sum, name = "late.x")
            e = hvd_error(() -> wait(h; timeout = 1.5))
            want = "ranks [" * join(1:N-1, ", ") * "] have not submitted 'late.x'"
            @test e isa HvdError && e.status == Hvd.HVD_ERR_TIMEOUT && occursin(want, e.message)
            Hvd.barrier()
        else
            Hvd.barrier()
            h = Hvd.allreduce_async!(ones(2); op = Hvd.Sum, name = "late.x")
        end
        @test wait(h) == fill(Float64(N), 2)
    end

    @testset "dropped handles keep their arrays alive" begin
        arrays = [fill(Float64(R), 256) for _ in 1:10]
        let
            for (i, a) in enumerate(arrays)
                Hvd.allreduce_async!(a; op = Hvd.Sum, name = "dropped.$i")
            end
        end
        GC.gc(); GC.gc()
        Hvd.barrier()
        want = fill(Float64(sum(0:N-1)), 256)
        t0 = time()
        while !all(a == want for a in arrays) && time() - t0 < 60
            sleep(0.01); GC.gc()
        end
        @test all(a == want for a in arrays)
    end

    @testset "elastic loop outside an elastic job" begin
        @test Hvd.membership() == Hvd.Membership(false, false, 0)
        e = hvd_error(Hvd.reset!)
        @test e isa HvdError && e.status == Hvd.HVD_ERR_UNSUPPORTED
        # sync! hands rank 0's state to the others (bytes of any length);
        # commits cost no collective outside an elastic job.
        state = Hvd.Elastic.ObjectState((step = 0, w = R == 0 ? [1.0, 2.0] : fill(-7.0, 5),
                                         tag = repeat("x", 1000 + 37 * R)))
        got = Hvd.Elastic.run(state) do s
            while s[].step < 3
                g = allreduce([R + 1.0, 0.0]; op = Hvd.Sum, name = "elastic.grad")
                s[] = (step = s[].step + 1, w = s[].w .- 0.5 .* g, tag = s[].tag)
                Hvd.Elastic.commit!(s)
            end
            s[]
        end
        k = N * (N + 1) / 2
        @test got.step == 3
        @test got.w == [1.0 - 1.5 * k, 2.0]
        @test length(got.tag) == 1000
    end

    @testset "join" begin
        # rank 0 has one batch more than the others: after the others join,
        # their zeros count in its allreduce and Average still divides by N
        if R == 0
            @test allreduce(fill(Float64(N), 3); name = "join.extra") == fill(1.0, 3)
        end
        @test Hvd.join() === nothing
        @test Hvd.barrier() === nothing
    end
end

# Totals over the job; rank 0 prints the closing line.
println("rank $R: ", ts.passed, " passed, ", ts.failed, " failed")
flush(stdout)
local_counts = [ts.passed, ts.failed]
totals = try
    allreduce(local_counts; op = Hvd.Sum, name = "mp_tests.totals")
catch err
    println(stderr, TAG[], "could not add up the counts: ", sprint(showerror, err))
    [ts.passed, ts.failed + 1]
end
Hvd.shutdown()
if R == 0
    println(totals[1], " passed, ", totals[2], " failed")
end
flush(stdout)
exit(totals[2] == 0 ? 0 : 1)
