# Single-process tests of the Hvd package (a world of one: no launcher).
#
#   julia --project=bindings/julia/Hvd bindings/julia/Hvd/test/runtests.jl
#
# The library comes from HVD_LIBRARY_PATH or the repository's build trees.
# Prints a closing line "N passed, N failed"; exits 1 on any failure.
# The multi-process tests are in mp_tests.jl (bindings/julia/run_tests.sh
# runs both).

include("common.jl")

for k in ("HVD_RANK", "HVD_SIZE", "HVD_RENDEZVOUS_ADDR", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")
    haskey(ENV, k) && error("runtests.jl is the single-process suite; unset $k (or run mp_tests.jl under hvdrun)")
end

# `cmd` with one more environment variable (Base.addenv is Julia 1.6+).
addenv_(cmd::Cmd, p::Pair) = setenv(cmd, merge(Dict(ENV), Dict(p)))

# A stand-in for a GPU package's array (CUDA.jl's CuArray derives from
# GPUArrays' AbstractGPUArray, a DenseArray): host data here, but the
# package must refuse it as device memory.
abstract type AbstractGPUArray{T,N} <: DenseArray{T,N} end
struct FakeGPUArray{T,N} <: AbstractGPUArray{T,N}
    data::Array{T,N}
end
Base.size(A::FakeGPUArray) = size(A.data)
Base.getindex(A::FakeGPUArray, i::Int...) = A.data[i...]
Base.strides(A::FakeGPUArray) = strides(A.data)

struct TinyModel          # a model as a plain struct: arrays, a function, a number
    W::Matrix{Float64}
    b::Vector{Float64}
    act::Function
    scale::Float64
end

ts = @testset CountingTestSet "Hvd single process" begin

    @testset "library" begin
        @test isfile(Hvd.library_path()) || !occursin('/', Hvd.library_path())
        @test Hvd.library_version().major == Hvd.BINDING_VERSION_MAJOR
        @test sizeof(Hvd.HvdTensor) == 40          # sizeof(hvd_tensor_t) on x86_64
        @test sizeof(Hvd.HvdParams) == 200         # sizeof(hvd_params_t) on x86_64
        @test fieldoffset(Hvd.HvdParams, 16) == 96   # cache_capacity
        @test fieldoffset(Hvd.HvdParams, 23) == 152  # log_level
        @test fieldoffset(Hvd.HvdParams, 26) == 176  # transport_timeout_s
        @test fieldname(Hvd.HvdParams, 27) === :autotune && fieldoffset(Hvd.HvdParams, 27) == 184
        @test fieldname(Hvd.HvdParams, 28) === :transport_path &&
              fieldoffset(Hvd.HvdParams, 28) == 192
        @test Hvd.HVD_PARAM_AUTOTUNE == UInt64(1) << 22
        @test Hvd.HVD_PARAM_TRANSPORT_PATH == UInt64(1) << 23
        @test Hvd.HVD_PARAM_ALL_ == (UInt64(1) << 24) - 1
        @test Hvd.status_string(0) isa String && !isempty(Hvd.status_string(-5))
        @test Hvd.status_name(-5) === :HVD_ERR_MISMATCH
        c = Hvd.library_candidates()
        @test c[1] == joinpath(Hvd.REPO_ROOT, "build", "lib", "libhvd.so")
        @test c[end] in ("libhvd.so", "libhvd.so.0")
        # HVD_LIBRARY_PATH names one library: a file, or libhvd.so in a folder.
        libdir = dirname(Hvd.library_path())
        if isfile(joinpath(libdir, "libhvd.so"))
            @test Hvd.library_from_env(libdir) == joinpath(libdir, "libhvd.so")
        end
        @test Hvd.library_from_env(Hvd.library_path()) == Hvd.library_path()
        mktempdir() do dir
            for (bad, what) in ((joinpath(dir, "nowhere"), "no such file or folder"),
                                (dir, "is a folder without libhvd.so"))
                e = try Hvd.library_from_env(bad); nothing catch err; err end
                @test e isa ErrorException
                @test e !== nothing && occursin("HVD_LIBRARY_PATH=$bad", e.msg) &&
                      occursin(what, e.msg) && occursin("unset it", e.msg)
            end
        end
        # A bad HVD_LIBRARY_PATH fails `using Hvd` in this very checkout (whose
        # build trees hold a library it could fall back to, and must not).
        mktempdir() do dir
            notlib = joinpath(dir, "libhvd.so")
            write(notlib, "not a library")
            for (bad, what) in ((joinpath(dir, "nowhere"), "no such file or folder"),
                                (joinpath(dir, "empty"), "is a folder without libhvd.so"),
                                (notlib, "cannot load"),
                                (dir, "cannot load"))
                bad == joinpath(dir, "empty") && mkpath(bad)
                errfile = joinpath(dir, "err.txt")
                pkgdir = joinpath(Hvd.REPO_ROOT, "bindings", "julia", "Hvd")
                cmd = `$(Base.julia_cmd()) --startup-file=no --project=$pkgdir
                       -e "using Hvd; println(Hvd.library_path())"`
                out = IOBuffer()
                ok = success(pipeline(addenv_(cmd, "HVD_LIBRARY_PATH" => bad);
                                      stdout = out, stderr = errfile))
                msg = read(errfile, String)
                @test !ok
                @test isempty(String(take!(out)))          # nothing loaded instead
                @test occursin("HVD_LIBRARY_PATH=$bad", msg) && occursin(what, msg)
            end
        end
        # A copy of the package outside any checkout, with nothing to find:
        # loading fails and the error lists every place tried.
        mktempdir() do dir
            copy_dir = joinpath(dir, "a", "b", "Hvd")
            mkpath(dirname(copy_dir))
            cp(normpath(joinpath(@__DIR__, "..")), copy_dir)
            errfile = joinpath(dir, "err.txt")
            cmd = `$(Base.julia_cmd()) --startup-file=no --compiled-modules=no --project=$copy_dir -e "using Hvd"`
            env = copy(ENV)
            delete!(env, "HVD_LIBRARY_PATH")
            env["LD_LIBRARY_PATH"] = join(filter(p -> !occursin("hvd", p) || occursin("julia", p),
                                                 split(get(ENV, "LD_LIBRARY_PATH", ""), ':')), ':')
            ok = success(pipeline(setenv(cmd, env); stdout = devnull, stderr = errfile))
            msg = read(errfile, String)
            @test !ok
            @test occursin("cannot load libhvd", msg)
            @test occursin(joinpath(dir, "build", "lib"), msg)
            @test occursin("HVD_LIBRARY_PATH", msg)
        end
        # The library's dtype sizes agree with Julia's.
        for T in SUPPORTED
            out = Ref{Csize_t}(0)
            @test Hvd.hvd_dtype_size(Hvd.hvd_dtype(T), out) == 0 && out[] == sizeof(T)
        end
    end

    @testset "before init" begin
        @test !Hvd.is_initialized()
        e = hvd_error(Hvd.rank)
        @test e isa HvdError && e.status == Hvd.HVD_ERR_NOT_INITIALIZED
        @test e !== nothing && !isempty(e.message)
        @test occursin("HVD_ERR_NOT_INITIALIZED", sprint(showerror, e))
        # The messages speak of the Julia calls, not of C's.
        for (f, call) in ((Hvd.rank, "Hvd.rank()"), (Hvd.size, "Hvd.size()"),
                          (Hvd.local_rank, "Hvd.local_rank()"), (Hvd.transport, "Hvd.transport()"),
                          (() -> allreduce!(zeros(3)), "Hvd.allreduce"),
                          (() -> allgather(zeros(3)), "Hvd.allgather"),
                          (() -> Hvd.broadcast!(zeros(3)), "Hvd.broadcast"),
                          (Hvd.barrier, "Hvd.barrier()"),
                          (() -> Hvd.rank(Hvd.default_context()), "Hvd.rank(ctx)"),
                          (() -> Hvd.split(Hvd.default_context(), 0; key = 0), "Hvd.split"),
                          (() -> Hvd.process_set(Hvd.default_context(), [0]), "Hvd.process_set"),
                          (() -> allreduce!(zeros(3), +, Hvd.default_context()), "Hvd.allreduce"))
            e = hvd_error(f)
            @test e isa HvdError && e.status == Hvd.HVD_ERR_NOT_INITIALIZED
            @test e !== nothing && e.message == "$call: not initialized; call Hvd.init() first"
        end
        e = hvd_error(Hvd.shutdown)
        @test e isa HvdError && e.status == Hvd.HVD_ERR_NOT_INITIALIZED
        @test e !== nothing && startswith(e.message, "Hvd.shutdown(): not initialized (Hvd.init() was not called")
        @test e !== nothing && !occursin("hvd_", e.message)
        # The translation itself, on the library's texts.
        @test Hvd.julia_message("hvd_rank: ctx is NULL (the default context) and hvd_init has " *
                                "not been called; call hvd_init first or pass a context from " *
                                "hvd_context_create") == "Hvd.rank(): not initialized; call Hvd.init() first"
        @test Hvd.julia_message("hvd_init: params.autotune is 2; it must be 0 (off) or 1 (on)") ==
              "Hvd.init(): keyword autotune is 2; it must be 0 (off) or 1 (on)"
        @test Hvd.julia_message("hvd_init: params: set both rank and size, or neither") ==
              "Hvd.init(): set both rank and size, or neither"
        @test Hvd.julia_message("allreduce 'x': shapes differ") == "allreduce 'x': shapes differ"
        @test Hvd.julia_message("libhvd_transport_x.so was not found") == "libhvd_transport_x.so was not found"
    end

    @testset "init keywords" begin
        @test_throws ArgumentError Hvd.init(no_such_option = 1)
        @test !Hvd.is_initialized()
        # Explicit (invalid) settings reach the library and are refused.
        e = hvd_error(() -> Hvd.init(cycle_time_ms = -1))
        @test e isa HvdError && e.status == Hvd.HVD_ERR_INVALID_ARGUMENT
        @test e !== nothing && occursin("cycle time", e.message)
        e = hvd_error(() -> Hvd.init(rank = 0))          # rank without size
        @test e isa HvdError && e.status == Hvd.HVD_ERR_INVALID_ARGUMENT
        @test e !== nothing && startswith(e.message, "Hvd.init(): ") && !occursin("hvd_", e.message) &&
              !occursin("params", e.message)
        @test !Hvd.is_initialized()
    end

    @testset "init autotune and transport_path" begin
        e = hvd_error(() -> Hvd.init(autotune = 2))
        @test e isa HvdError && e.status == Hvd.HVD_ERR_INVALID_ARGUMENT
        @test e !== nothing && e.message == "Hvd.init(): keyword autotune is 2; it must be 0 (off) or 1 (on)"
        @test_throws ArgumentError Hvd.init(autotune = "yes")
        # The keyword wins over HVD_AUTOTUNE, which is then not even parsed.
        withenv("HVD_AUTOTUNE" => "not-a-switch") do
            e = hvd_error(() -> Hvd.init())
            @test e isa HvdError && occursin("HVD_AUTOTUNE", e.message)
            Hvd.init(autotune = true)
            @test Hvd.is_initialized()
            Hvd.shutdown()
        end
        # A transport asked for by name is looked up in transport_path, even where
        # a world of one runs on "local": "alias" exists only in a temporary folder.
        libdir = dirname(realpath(Hvd.library_path()))
        gloo = joinpath(libdir, "libhvd_transport_gloo.so")
        if isfile(gloo)
            mktempdir() do dir
                symlink(gloo, joinpath(dir, "libhvd_transport_alias.so"))
                Hvd.init(transport = "alias", transport_path = dir)
                @test Hvd.transport() == "local"
                Hvd.shutdown()
                withenv("HVD_TRANSPORT_PATH" => dir) do
                    e = hvd_error(() -> Hvd.init(transport = "alias",
                                                 transport_path = "/nonexistent/hvd-plugins"))
                    @test e isa HvdError && e.status == Hvd.HVD_ERR_NOT_FOUND
                    @test e !== nothing && occursin("/nonexistent/hvd-plugins", e.message) &&
                          occursin("libhvd_transport_alias.so", e.message)
                    e = hvd_error(() -> Hvd.init(transport = "alias", transport_path = ""))
                    @test e isa HvdError && e.status == Hvd.HVD_ERR_NOT_FOUND
                end
            end
            Hvd.init(transport = "gloo", transport_path = libdir)
            @test Hvd.size() == 1
            Hvd.shutdown()
        end
        @test !Hvd.is_initialized()
    end

    Hvd.init(cycle_time_ms = 1.0)

    @testset "topology, world of one" begin
        @test Hvd.is_initialized()
        @test Hvd.rank() == 0
        @test Hvd.size() == 1
        @test Hvd.local_rank() == 0
        @test Hvd.local_size() == 1
        @test Hvd.cross_rank() == 0
        @test Hvd.cross_size() == 1
        @test Hvd.transport() isa String
    end

    @testset "metrics" begin
        for _ in 1:3
            Hvd.allreduce(ones(Float32, 16); op = Hvd.Sum, name = "jl.metrics")
        end
        j = Hvd.metrics()
        @test startswith(j, "{\"version\":1,")
        @test occursin("\"allreduce\":{\"count\":3,\"bytes\":192,", j)
        @test occursin("# TYPE hvd_allreduce_bytes_total counter", Hvd.metrics(format = :prometheus))
        @test_throws ArgumentError Hvd.metrics(format = :xml)
    end

    @testset "process sets, world of one" begin
        W = Hvd.default_context()
        @test W === Hvd.default_context() && !Hvd.is_process_set(W) && isopen(W)
        @test Hvd.rank(W) == 0 && Hvd.size(W) == 1 && Hvd.local_rank(W) == 0 &&
              Hvd.local_size(W) == 1 && Hvd.cross_rank(W) == 0 && Hvd.cross_size(W) == 1
        @test Hvd.transport(W) == Hvd.transport() && Hvd.parent_ranks(W) == [0]
        @test Hvd.UNDEFINED_COLOR == -1
        @test Hvd.split(W, Hvd.UNDEFINED_COLOR) === nothing
        @test isempty(Hvd.LIVE_SETS)
        s = Hvd.split(W, 4)
        @test s isa Hvd.Context && Hvd.is_process_set(s) && haskey(Hvd.LIVE_SETS, s)
        @test Hvd.rank(s) == 0 && Hvd.size(s) == 1 && Hvd.parent_ranks(s) == [0]
        @test Hvd.local_size(s) == 1 && Hvd.cross_size(s) == 1
        @test sprint(show, s) == "Hvd.Context(process set of parent ranks [0])"
        # every operation on a set of one: the identity, under names the
        # default context uses at the same time
        h1 = Hvd.allreduce_async([1.5, 2.5], +, s; name = "same")
        h2 = Hvd.allreduce_async([7], +, W; name = "same")
        @test wait(h1) == [1.5, 2.5] && wait(h2) == [7]
        @test allreduce!([3, 4], s) == [3, 4] && allreduce(5, max, s) == 5
        @test grouped_allreduce!([[1.0], [2.0]], +, s) == [[1.0], [2.0]]
        @test Hvd.broadcast!([9], 0, s) == [9] && Hvd.broadcast([8], s; root = 0) == [8]
        @test allgather([1, 2], s) == [1, 2] && allgather(3, s) == [3]
        @test alltoall([1, 2], s) == [1, 2] && alltoall([1, 2], [2], s) == ([1, 2], [2])
        @test reducescatter([1.0, 2.0], +, s) == [1.0, 2.0]
        @test Hvd.barrier(s) === nothing && wait(Hvd.barrier_async(s)) === nothing
        @test allreduce_gradients!((w = [2.0],), s).w == [2.0]
        @test broadcast_parameters!([ones(2)], 0, s) == [ones(2)]
        # Julia-side refusals in a set, as in the default context
        @test_throws ArgumentError alltoall([1, 2], [1, 1], s)
        @test_throws ArgumentError allreduce!(copy([1]), -, s)
        e = hvd_error(() -> Hvd.broadcast!([1], 1, s))
        @test e isa HvdError && e.status == Hvd.HVD_ERR_INVALID_ARGUMENT
        # sets of sets are refused
        e = hvd_error(() -> Hvd.split(s, 0))
        @test e isa HvdError && e.status == Hvd.HVD_ERR_UNSUPPORTED && occursin("split the parent", e.message)
        e = hvd_error(() -> Hvd.process_set(s, [0]))
        @test e isa HvdError && e.status == Hvd.HVD_ERR_UNSUPPORTED
        # bad lists and colors
        for bad in ([1], [0, 0], Int[], [-3])
            e = hvd_error(() -> Hvd.process_set(W, bad))
            @test e isa HvdError && e.status == Hvd.HVD_ERR_INVALID_ARGUMENT &&
                  occursin("rank 0 passed the process-set rank list", e.message)
        end
        e = hvd_error(() -> Hvd.split(W, -2))
        @test e isa HvdError && e.status == Hvd.HVD_ERR_INVALID_ARGUMENT &&
              occursin("Hvd.split", e.message) && occursin("Hvd.UNDEFINED_COLOR", e.message)
        @test_throws ArgumentError Hvd.split(W, 1.5)
        @test_throws ArgumentError Hvd.split(W, 0; key = "a")
        @test_throws ArgumentError Hvd.process_set(W, [0.0])
        @test_throws ArgumentError Hvd.process_set(W, 0)
        @test_throws ArgumentError Hvd.process_set(W, [true])
        # by list; closing
        t = Hvd.process_set(W, 0:0)
        @test Hvd.parent_ranks(t) == [0]
        close(t)
        @test !isopen(t) && close(t) === nothing
        e = hvd_error(() -> allreduce([1], t))
        @test e isa HvdError && e.status == Hvd.HVD_ERR_ABORTED && occursin("closed", e.message)
        @test_throws ArgumentError close(W)
        @test haskey(Hvd.LIVE_SETS, s) && !haskey(Hvd.LIVE_SETS, t)
        close(s)
        @test isempty(Hvd.LIVE_SETS)
        # the default context carries on
        @test allreduce([1], +; name = "same") == [1]
        # a set outliving the default context: its operations then fail with
        # HVD_ERR_ABORTED, and closing it only frees it
        u = Hvd.split(W, 0)
        @test allreduce([2], u) == [2]
        Hvd.shutdown()
        @test !Hvd.is_initialized()
        e = hvd_error(() -> allreduce([2], u; name = "after.parent"))
        @test e isa HvdError && e.status == Hvd.HVD_ERR_ABORTED
        @test close(u) === nothing && isempty(Hvd.LIVE_SETS)
        Hvd.init(cycle_time_ms = 1.0)
        @test allreduce([3], +, W) == [3]
    end

    @testset "no ambiguous methods" begin
        @test isempty(Test.detect_ambiguities(Hvd))
    end

    @testset "allreduce $T $op" for T in SUPPORTED, op in OPS
        A = rank_data(T, 0, 3, 4)
        if T === Bool && op == Hvd.Average      # the library refuses it
            e = hvd_error(() -> allreduce(A; op = op))
            @test e isa HvdError && e.status == Hvd.HVD_ERR_UNSUPPORTED
            continue
        end
        want = expected_reduce(T, op, [A])
        B = copy(A)
        @test allreduce!(B; op = op) === B
        @test same_values(T, B, want)
        C = allreduce(A; op = op)
        @test C isa Matrix{T} && C !== A
        @test same_values(T, C, want)
        @test A == rank_data(T, 0, 3, 4)             # input untouched
    end

    @testset "MPI.jl forms: op functions, root keyword" begin
        @test Hvd.reduce_op(+) == Hvd.Sum && Hvd.reduce_op(*) == Hvd.Product
        @test Hvd.reduce_op(min) == Hvd.Min && Hvd.reduce_op(max) == Hvd.Max
        @test Hvd.reduce_op(Hvd.Average) == Hvd.Average
        A = [1, -2, 3]
        @test Hvd.allreduce!(copy(A), +) == A
        @test allreduce!(copy(A); op = *) == A
        @test allreduce(A, min) == A && allreduce(A; op = max) == A
        @test allreduce(7, +) === 7 && allreduce(2.5; op = *) === 2.5
        @test allreduce(Float32[1, 2], +) isa Vector{Float32}
        @test reducescatter([1, 2], +) == [1, 2]
        @test grouped_allreduce!([[1], [2]], max) == [[1], [2]]
        @test wait(Hvd.allreduce_async!([5], +)) == [5] && wait(Hvd.allreduce_async([6], *)) == [6]
        @test allreduce_gradients!((w = [1, 2],); op = +).w == [1, 2]
        @test DistributedOptimizer(Hvd.Descent(); op = +).op == Hvd.Sum
        for bad in (-, sum, identity, :+, "+", 0)
            e = try allreduce!([1], bad); nothing catch err; err end
            @test e isa ArgumentError && occursin("not a reduction", e.msg)
            @test_throws ArgumentError allreduce([1]; op = bad)
        end
        @test_throws ArgumentError allreduce!([1], +; op = +)          # op twice
        @test_throws ArgumentError DistributedOptimizer(Hvd.Descent(); op = -)
        B = [4, 5]
        @test Hvd.broadcast!(B; root = 0) === B && B == [4, 5]
        @test Hvd.broadcast!(B, 0) === B
        @test Hvd.broadcast(B; root = 0) == B
        @test wait(Hvd.broadcast_async!(B; root = 0)) === B
        @test broadcast_parameters!((w = B,); root = 0).w === B
        @test broadcast_parameters!([B], 0) == [B]
        e = try Hvd.broadcast!(B, 0; root = 0); nothing catch err; err end
        @test e isa ArgumentError && occursin("root given twice", e.msg)
        @test_throws ArgumentError broadcast_parameters!([B], 0; root = 0)
        @test_throws ArgumentError Hvd.broadcast!(B; root = 1.5)
        @test_throws ArgumentError Hvd.broadcast!(B; root = true)
        e = hvd_error(() -> Hvd.broadcast!(B; root = 1))                 # no rank 1
        @test e isa HvdError && e.status == Hvd.HVD_ERR_INVALID_ARGUMENT
    end

    @testset "allreduce shapes and scalars" begin
        @test allreduce(Float32[]) == Float32[]
        @test allreduce(fill(2.5)) == fill(2.5)        # 0-dimensional
        @test allreduce(3; op = Hvd.Sum) === 3
        @test allreduce(true; op = Hvd.Max) === true
        @test hvd_error(() -> allreduce(true)) isa HvdError    # Average of Bool: unsupported
        @test allreduce(1.5f0) === 1.5f0
        x = collect(1.0:1000.0)
        @test allreduce(x; prescale = 2, postscale = 0.5) == x
        @test allreduce(x; op = Hvd.Sum, postscale = 3) == 3 .* x
        big = rand(Float32, 64, 64, 8)
        @test allreduce(big) == big
        @test_throws ArgumentError allreduce(x; prescale = NaN)
    end

    @testset "contiguous views are zero-copy" begin
        P = reshape(collect(1.0:12.0), 3, 4)
        v = view(P, :, 2:3)                           # whole columns: contiguous
        @test Hvd.iscontiguous(v)
        allreduce!(v; op = Hvd.Sum, postscale = 10)
        @test P[:, 2:3] == 10 .* reshape(collect(4.0:9.0), 3, 2)
        @test P[:, 1] == [1.0, 2.0, 3.0]
        r = reshape(P, 12)
        @test Hvd.iscontiguous(r)
        allreduce!(r; op = Hvd.Sum, postscale = 0.1)
        @test P[1] ≈ 0.1
        @test Hvd.iscontiguous(view(collect(1:10), 3:7))
        @test Hvd.iscontiguous(reinterpret(Int32, zeros(Float32, 4)))
    end

    @testset "unsupported element types and layouts" begin
        e = try allreduce!(zeros(ComplexF64, 3)); nothing catch err; err end
        @test e isa ArgumentError
        @test e !== nothing && occursin("Complex", e.msg) && occursin("Float32", e.msg)
        @test_throws ArgumentError allreduce!(Any[1.0, 2.0])
        @test_throws ArgumentError allreduce(BigFloat[1])
        @test_throws ArgumentError allreduce(Union{Missing,Float64}[1.0])
        @test_throws ArgumentError allreduce(UInt32[1])
        @test_throws ArgumentError allreduce(Int128(1))
        @test_throws ArgumentError allreduce(trues(4))            # BitArray
        # A GPU package's array (its supertype named as GPUArrays names it):
        # refused with what to do, before any pointer reaches the library.
        e = try allreduce!(FakeGPUArray(zeros(Float32, 4))); nothing catch err; err end
        @test e isa ArgumentError && occursin("device memory", e.msg) && occursin("Array(A)", e.msg)
        e = try allreduce(view(FakeGPUArray(zeros(Float32, 4)), 1:2)); nothing catch err; err end
        @test e isa ArgumentError && occursin("device memory", e.msg)
        M = rand(4, 4)
        for bad in (view(M, 1:2, :), view(M, 1, :), view(M, :, [1, 3]), PermutedDimsArray(M, (2, 1)),
                    transpose(M), 1:4, view(collect(1:10), 1:2:9))
            @test !Hvd.iscontiguous(bad)
            e = try allreduce(bad); nothing catch err; err end
            @test e isa ArgumentError && occursin("not contiguous", e.msg)
            @test_throws ArgumentError allreduce!(bad)
            @test_throws ArgumentError allgather(bad)
            @test_throws ArgumentError Hvd.broadcast!(bad, 0)
        end
        @test_throws ArgumentError allgather(fill(1.0))         # 0-dimensional
        @test_throws ArgumentError allreduce!(zeros(ntuple(_ -> 1, 33)))
        @test_throws ArgumentError allreduce!(zeros(2); name = "a\0b")
        @test_throws ArgumentError allreduce!(zeros(2); name = "")
    end

    @testset "broadcast, allgather, alltoall, reducescatter" begin
        A = rank_data(Int16, 0, 2, 3)
        @test Hvd.broadcast!(copy(A), 0) == A
        @test Hvd.broadcast(A) == A
        @test hvd_error(() -> Hvd.broadcast!(copy(A), 1)) isa HvdError    # no rank 1
        @test allgather([1, 2, 3]) == [1, 2, 3]
        G = allgather(reshape(Float32.(1:6), 2, 3))
        @test G isa Matrix{Float32} && G == reshape(Float32.(1:6), 2, 3)
        @test allgather(7) == [7]
        @test allgather(Bool[]) == Bool[]
        @test alltoall(collect(1:4)) == collect(1:4)
        out, recv = alltoall(reshape(1:6 |> collect, 2, 3), [3])
        @test out == reshape(1:6 |> collect, 2, 3) && recv == [3]
        @test_throws ArgumentError alltoall(collect(1:4), [2, 2])     # one split per rank
        @test reducescatter(Float64[1, 2, 3]; op = Hvd.Sum) == [1.0, 2.0, 3.0]
        @test reducescatter(reshape(Float64.(1:6), 3, 2)) == reshape(Float64.(1:6), 3, 2)
        @test Hvd.barrier() === nothing
    end

    @testset "handles" begin
        x = Float64[1, 2, 3]
        h = Hvd.allreduce_async!(x; op = Hvd.Sum, name = "h1")
        t0 = time()
        while !isready(h) && time() - t0 < 30
            sleep(0.001)
        end
        @test isready(h)
        @test wait(h) === x
        @test wait(h) === x                       # waiting again gives the result again
        @test fetch(h) === x
        @test occursin("h1", sprint(show, h))
        hs = [Hvd.allreduce_async(fill(Float32(i), 10); name = "many.$i") for i in 1:20]
        @test all(wait(h) == fill(Float32(i), 10) for (i, h) in enumerate(hs))
        g = Hvd.allgather_async(collect(1:5))
        @test Hvd.synchronize(g) == collect(1:5)
        @test wait(Hvd.barrier_async()) === nothing
        # A failed operation: its error comes from wait, every time.
        # An operation refused at submission throws there; no handle is made.
        e = hvd_error(() -> Hvd.broadcast_async!(zeros(2), 3))
        @test e isa HvdError && e.status == Hvd.HVD_ERR_INVALID_ARGUMENT
        # A handle dropped while its operation runs keeps its array alive.
        let
            for i in 1:50
                Hvd.allreduce_async!(rand(1000); name = "dropped.$i")
            end
        end
        GC.gc(); GC.gc()
        @test Hvd.barrier() === nothing
        # The same name while in flight is refused: mp_tests.jl checks that
        # (one rank cannot hold an op in flight). Once done, the name is free.
        @test wait(Hvd.allreduce_async!(zeros(4); name = "dup")) == zeros(4)
        @test wait(Hvd.allreduce_async!(ones(4); name = "dup")) == ones(4)
    end

    @testset "generated names" begin
        Hvd.reset_names!()
        @test Hvd.op_name("allreduce", nothing) == "allreduce.noname.0"
        @test Hvd.op_name("allreduce", nothing) == "allreduce.noname.1"
        @test Hvd.op_name("allgather", nothing) == "allgather.noname.0"
        @test Hvd.op_name("allreduce", :given) == "given"
        @test allreduce!(ones(2)) == ones(2)            # unnamed ops still run
    end

    @testset "names of blocking calls" begin
        seen = String[]
        x = ones(2)
        start(n) = (push!(seen, something(n, "counter")); Hvd.allreduce_async!(x; op = Hvd.Sum, name = n))
        Hvd.run_blocking(start, "allreduce", nothing)
        Hvd.run_blocking(start, "allreduce", nothing)
        @test seen == ["allreduce.noname.blocking", "allreduce.noname.blocking"]
        # while the fixed name is in flight, a blocking call takes a counter name
        empty!(seen)
        Hvd.run_blocking(n -> (Hvd.run_blocking(start, "allreduce", nothing); start(n)),
                         "allreduce", nothing)
        @test seen == ["counter", "allreduce.noname.blocking"]
        Hvd.run_blocking(start, "allreduce", "mine")
        @test seen[end] == "mine"
        @test Hvd.BLOCKING_BUSY["allreduce"] == false
        # a call that fails frees the name
        @test_throws ArgumentError allreduce!(zeros(ComplexF64, 2))
        @test hvd_error(() -> Hvd.broadcast!(zeros(2), 3)) isa HvdError
        @test Hvd.BLOCKING_BUSY["allreduce"] == false && Hvd.BLOCKING_BUSY["broadcast"] == false
        # the fixed name serves calls of other shapes and types, one after another
        for i in 1:5, T in (Float32, Int64)
            @test allreduce(fill(T(i), i); op = Hvd.Sum) == fill(T(i), i)
            @test allgather(fill(T(i), i)) == fill(T(i), i)
        end
    end

    @testset "training helpers, world of one" begin
        g = (W = ones(2, 2), b = [1.0, 2.0], inner = (c = fill(3.0), skip = nothing))
        @test allreduce_gradients!(g) === g
        @test g.b == [1.0, 2.0]
        v = [ones(3), ones(Float32, 2)]
        @test allreduce_gradients!(v; op = Hvd.Sum) === v
        d = Dict(:w => ones(2), "b" => zeros(1))
        @test allreduce_gradients!(d) === d
        w = ones(2)
        @test allreduce_gradients!([w, w]) == [w, w]           # the same array once
        @test_throws ArgumentError allreduce_gradients!((a = 1.0,))
        @test_throws ArgumentError allreduce_gradients!(IdDict(ones(2) => ones(2)))
        @test_throws ArgumentError allreduce_gradients!([view(rand(3, 3), 1, :)])
        m = TinyModel(ones(2, 2), zeros(2), tanh, 2.0)
        @test broadcast_parameters!(m) === m
        @test broadcast_parameters!((m = m, extra = [ones(1)])) isa NamedTuple
        leaves = Hvd.leaves((layers = ((weight = ones(1), bias = nothing),), σ = identity), "t")
        @test [p for (p, _) in leaves] == [".layers.1.weight"]

        # DistributedOptimizer with the built-in rules.
        params = (W = [1.0 2.0; 3.0 4.0], b = [0.5, -0.5])
        grads = (W = [1.0 1.0; 1.0 1.0], b = [2.0, 2.0])
        opt = DistributedOptimizer(Hvd.Descent(0.1))
        @test Hvd.update!(opt, params, grads) === params
        @test params.W ≈ [0.9 1.9; 2.9 3.9]
        @test params.b ≈ [0.3, -0.7]
        mom = DistributedOptimizer(Hvd.Momentum(0.1, 0.5))
        p = [1.0]
        Hvd.update!(mom, [p], [[1.0]])
        @test p ≈ [0.9]
        Hvd.update!(mom, [p], [[1.0]])
        @test p ≈ [0.9 - (0.5 * 0.1 + 0.1)]
        # Implicit style: gradients keyed by the parameter arrays.
        q = [1.0, 1.0]
        Hvd.update!(opt, [q], IdDict{Any,Any}(q => [1.0, 2.0]))
        @test q ≈ [0.9, 0.8]
        # A custom rule through `apply`.
        sgd_half(o, x, Δ) = Δ ./ 2
        r = [4.0]
        Hvd.update!(DistributedOptimizer(nothing; apply = sgd_half), (r = r,), (r = [2.0],))
        @test r == [3.0]
        @test_throws ArgumentError Hvd.update!(opt, (a = [1.0],), (b = [1.0],))
        @test_throws DimensionMismatch Hvd.update!(opt, (a = [1.0],), (a = [1.0, 2.0],))
        # A parameter without a gradient is left alone.
        s = [5.0]
        Hvd.update!(opt, (a = s, c = [1.0]), (a = nothing, c = [1.0]))
        @test s == [5.0]
    end

    @testset "join" begin
        @test Hvd.join() === nothing
    end

    @testset "shutdown and init again" begin
        Hvd.init()                                     # reference counted
        Hvd.shutdown()
        @test Hvd.is_initialized()
        Hvd.shutdown()
        @test !Hvd.is_initialized()
        @test hvd_error(Hvd.rank) isa HvdError
        Hvd.init()
        @test Hvd.size() == 1
        @test allreduce([1, 2]; op = Hvd.Sum) == [1, 2]
    end
    Hvd.shutdown()
end

println(ts.passed, " passed, ", ts.failed, " failed")
exit(ts.failed == 0 ? 0 : 1)
