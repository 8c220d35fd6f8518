# Elastic jobs from Julia (docs/elastic.md), in one process:
#
#   1. Hvd.Elastic.run, commit!, restore!, sync! against a fake Backend that
#      logs every call, with failures exactly where the tests put them;
#   2. Hvd.reset! / Hvd.membership on a context that is not elastic;
#   3. worker processes (elastic_worker.jl) under the fake launcher
#      (hvd_fake_elastic_launcher, tests/integration/elastic), which hosts
#      the store and answers the workers' joins as this script tells it:
#      a worker dies, the others restore, reset and finish. Skipped, with a
#      line saying so, when $HVD_FAKE_ELASTIC_LAUNCHER is not set.
#
#   julia --project=bindings/julia/Hvd bindings/julia/Hvd/test/elastic_tests.jl
#
# Prints a closing line "N passed, N failed"; exits 1 on any failure.

include("common.jl")

using Serialization

const E = Hvd.Elastic

mutable struct FakeBackend <: E.Backend
    elastic::Bool
    hosts_updated::Bool
    others_see::Bool            # what any_rank hears from the other ranks
    epoch::Int
    rank::Int
    root_bytes::Union{Nothing,Vector{UInt8}}
    reset_failures::Vector{Any}
    log::Vector{String}
    resets::Int
end
FakeBackend() = FakeBackend(true, false, false, 0, 0, nothing, Any[], String[], 0)

function E.membership(b::FakeBackend)
    push!(b.log, "membership")
    return Hvd.Membership(b.elastic, b.hosts_updated, b.elastic ? b.epoch : 0)
end
function E.reset!(b::FakeBackend)
    b.resets += 1
    push!(b.log, "reset")
    isempty(b.reset_failures) || throw(popfirst!(b.reset_failures))
    b.epoch += 1
    b.hosts_updated = false
    return nothing
end
E.rank(b::FakeBackend) = b.rank
E.any_rank(b::FakeBackend, flag::Bool, name::AbstractString) =
    (push!(b.log, "any $name $flag"); flag || b.others_see)
function E.broadcast_bytes(b::FakeBackend, bytes::Vector{UInt8}, root::Integer, name::AbstractString)
    push!(b.log, "broadcast $name from $root")
    return b.rank != root && b.root_bytes !== nothing ? copy(b.root_bytes) : copy(bytes)
end

# A State of its own (the fields a State has), counting its restores.
mutable struct Counted <: E.State
    value::Any
    saved::Vector{UInt8}
    backend::E.Backend
    reset_callbacks::Vector{Any}
    restores::Int
end
Counted(b) = Counted((step = 0, total = 0), E.to_bytes((step = 0, total = 0)), b, Any[], 0)
E.save!(s::Counted) = (s.saved = E.to_bytes(s.value); nothing)
E.restore!(s::Counted) = (s.restores += 1; s.value = E.from_bytes(s.saved); nothing)
function E.sync!(s::Counted)
    s.saved = E.broadcast_bytes(s.backend, s.saved, 0, "elastic.object_state")
    s.value = E.from_bytes(s.saved)
    return nothing
end

lost_peer() = MembershipChanged("Hvd.allreduce: rank 2 lost (connection closed)")

# `steps` steps: step s adds s + 1; a commit after every second step; `trace`
# gets every step run; the first time `fail_at` is reached a peer is lost.
function train!(s, steps, fail_at, trace, failed)
    while s.value.step < steps
        if s.value.step == fail_at && !failed[]
            failed[] = true
            throw(lost_peer())
        end
        push!(trace, s.value.step)
        s.value = (step = s.value.step + 1, total = s.value.total + s.value.step + 1)
        s.value.step % 2 == 0 && E.commit!(s)
    end
    return s.value
end

const B0 = "broadcast elastic.object_state from 0"
const M = "membership"
const A0 = "any elastic.hosts_updated false"

# ---- the fake launcher ---------------------------------------------------------
struct Launcher
    proc::Base.Process
    addr::String
    secret::String
end

function read_line(io, what; timeout = 150.0)
    t = @async readline(io)
    timedwait(() -> istaskdone(t), timeout; pollint = 0.01) === :ok ||
        error("$what: no line in $timeout s")
    return fetch(t)
end

function start_launcher(path)
    p = open(`$path`, "r+")
    first = split(read_line(p, "the fake launcher's first line"))
    first[1] == "store" || error("the fake launcher said $(Base.join(first, ' '))")
    return Launcher(p, first[2], first[3])
end
ask(L::Launcher, cmd) = (println(L.proc, cmd); flush(L.proc); read_line(L.proc, cmd))

const PKG = normpath(joinpath(@__DIR__, ".."))
const WORKER = joinpath(@__DIR__, "elastic_worker.jl")

function spawn_worker(L::Launcher, dir, worker, steps, leave_at)
    env = Dict(k => v for (k, v) in ENV if !startswith(k, "HVD_") || k == "HVD_LIBRARY_PATH")
    merge!(env, Dict("HVD_ELASTIC" => "1", "HVD_ELASTIC_WORKER" => worker,
                     "HVD_ELASTIC_TIMEOUT" => "90", "HVD_RENDEZVOUS_ADDR" => L.addr,
                     "HVD_SECRET" => L.secret, "HVD_HOSTNAME" => "hostA",
                     "HVD_TRANSPORT" => "gloo", "HVD_START_TIMEOUT" => "90",
                     "HVD_TRANSPORT_TIMEOUT" => "30"))
    cmd = `$(Base.julia_cmd()) --startup-file=no --project=$PKG $WORKER $steps $leave_at`
    out = joinpath(dir, worker * ".out")
    err = joinpath(dir, worker * ".err")
    return run(pipeline(setenv(cmd, env); stdout = out, stderr = err); wait = false)
end

output(dir, w) = read(joinpath(dir, w * ".out"), String)
function both(dir, w)
    o = isfile(joinpath(dir, w * ".out")) ? output(dir, w) : ""
    e = isfile(joinpath(dir, w * ".err")) ? read(joinpath(dir, w * ".err"), String) : ""
    return "$w stdout:\n$o--- stderr:\n$e"
end

function exit_code(p, what; timeout = 120.0)
    if timedwait(() -> !process_running(p), timeout; pollint = 0.05) !== :ok
        kill(p, Base.SIGKILL)
        error("$what did not end in $timeout s")
    end
    return p.exitcode
end

ts = @testset CountingTestSet "Hvd elastic" begin

    @testset "without failures: one sync, one run" begin
        b = FakeBackend()
        s = Counted(b)
        trace = Int[]
        r = E.run(st -> train!(st, 6, -1, trace, Ref(false)), s)
        @test r == (step = 6, total = 21)
        @test trace == collect(0:5)
        @test b.log == [B0, M, A0, M, A0, M, A0]
        @test b.resets == 0 && s.restores == 0
    end

    @testset "a lost peer: restore the last commit, reset, go on" begin
        b = FakeBackend()
        s = Counted(b)
        calls = String[]
        E.register_reset_callback!(s, () -> (push!(calls, "first epoch=$(b.epoch)");
                                             push!(b.log, "callback")))
        E.register_reset_callback!(s, () -> push!(calls, "second"))
        trace = Int[]
        failed = Ref(false)
        r = E.run(st -> train!(st, 6, 3, trace, failed), s)
        # Step 3 failed: back to the commit made at step 2, so step 2 runs again.
        @test trace == [0, 1, 2, 2, 3, 4, 5]
        @test r == (step = 6, total = 21)
        @test s.restores == 1 && b.resets == 1
        @test calls == ["first epoch=1", "second"]
        @test b.log == [B0, M, A0, M, "reset", "callback", B0, M, A0, M, A0]
    end

    @testset "a lost peer inside a TaskFailedException counts too" begin
        b = FakeBackend()
        s = Counted(b)
        n = Ref(0)
        r = E.run(s) do st
            n[] += 1
            n[] == 1 && fetch(@async throw(lost_peer()))
            "done"
        end
        @test r == "done" && n[] == 2 && b.resets == 1 && s.restores == 1
    end

    @testset "hosts updated: an interrupt at a commit, a reset without restore" begin
        b = FakeBackend()
        b.hosts_updated = true       # cleared by the reset
        s = Counted(b)
        trace = Int[]
        r = E.run(st -> train!(st, 6, -1, trace, Ref(false)), s)
        @test trace == collect(0:5)
        @test r.total == 21
        @test s.restores == 0 && b.resets == 1
        @test b.log == [B0, M, "any elastic.hosts_updated true", "reset", B0, M, A0, M, A0]
    end

    @testset "another rank's reading interrupts this one too" begin
        b = FakeBackend()
        b.others_see = true
        s = Counted(b)
        e = try E.commit!(s); nothing catch err; err end
        @test e isa E.HostsUpdatedInterrupt && !e.skip_sync
        @test b.log == [M, A0]
    end

    @testset "skip_sync skips the next sync" begin
        b = FakeBackend()
        s = Counted(b)
        n = Ref(0)
        @test E.run(st -> (n[] += 1; n[] == 1 && throw(E.HostsUpdatedInterrupt(true)); 7), s) == 7
        @test b.log == [B0, "reset"]
    end

    @testset "outside an elastic job: errors pass through, commits cost no collective" begin
        b = FakeBackend()
        b.elastic = false
        s = Counted(b)
        E.commit!(s)
        @test b.log == [M]
        thrown = lost_peer()
        e = try E.run(st -> throw(thrown), s); nothing catch err; err end
        @test e === thrown
        @test b.resets == 0 && s.restores == 0
    end

    @testset "other errors pass through without a reset" begin
        b = FakeBackend()
        s = Counted(b)
        e = try E.run(st -> error("bad batch"), s); nothing catch err; err end
        @test e isa ErrorException && e.msg == "bad batch"
        h = HvdError(Int(Hvd.HVD_ERR_MISMATCH), "shapes")
        e = try E.run(st -> throw(h), s); nothing catch err; err end
        @test e === h
        @test b.resets == 0 && s.restores == 0
    end

    @testset "a reset that meets another change is tried again" begin
        b = FakeBackend()
        push!(b.reset_failures, lost_peer(),
              MembershipChanged("forming elastic epoch 1 failed: a peer left; reset again"))
        s = Counted(b)
        n = Ref(0)
        @test E.run(st -> (n[] += 1; n[] == 1 && throw(lost_peer()); "ok"), s) == "ok"
        @test b.resets == 3 && b.epoch == 1
    end

    @testset "a launcher that ends the job is not retried" begin
        b = FakeBackend()
        stop = MembershipChanged("the launcher ends this worker (hostA:0:0): only 1 workers " *
                                 "remain, fewer than --min-np 2")
        @test Hvd.launcher_ended(stop) && !Hvd.launcher_ended(lost_peer())
        push!(b.reset_failures, stop)
        s = Counted(b)
        e = try E.run(st -> throw(lost_peer()), s); nothing catch err; err end
        @test e === stop
        @test b.resets == 1
    end

    @testset "resets give up after MAX_RESET_ATTEMPTS" begin
        b = FakeBackend()
        append!(b.reset_failures, [lost_peer() for _ in 1:50])
        s = Counted(b)
        e = try E.run(st -> throw(lost_peer()), s); nothing catch err; err end
        @test e isa MembershipChanged
        @test b.resets == E.MAX_RESET_ATTEMPTS == 10
        @test e isa MembershipChanged &&
              occursin("10 resets in a row failed; the last: Hvd.allreduce: rank 2 lost", e.message)
    end

    @testset "ObjectState keeps a copy; sync takes rank 0's" begin
        b = FakeBackend()
        b.rank = 1
        s = E.ObjectState(Dict("step" => 0, "w" => [1.0, 2.0]); backend = b)
        s[]["step"] = 4
        E.commit!(s)
        s[]["w"][1] = 99.0            # in place, after the commit
        E.restore!(s)
        @test s[] == Dict("step" => 4, "w" => [1.0, 2.0])
        s[]["step"] = 5
        E.restore!(s)                 # a fresh copy each time
        @test s[]["step"] == 4
        b.root_bytes = E.to_bytes(Dict("step" => 2, "w" => [0.5]))
        E.sync!(s)
        @test s[] == Dict("step" => 2, "w" => [0.5])
        s[] = nothing
        E.restore!(s)                 # the synced copy is the one to go back to
        @test s[] == Dict("step" => 2, "w" => [0.5])
    end

    @testset "MembershipChanged for HVD_ERR_MEMBERSHIP_CHANGED" begin
        @test Hvd.HVD_ERR_MEMBERSHIP_CHANGED == -14
        @test Hvd.status_name(-14) === :HVD_ERR_MEMBERSHIP_CHANGED
        e = Hvd.hvd_error_now(Hvd.HVD_ERR_MEMBERSHIP_CHANGED)
        @test e isa MembershipChanged && e.status == -14
        @test Hvd.hvd_error_now(Hvd.HVD_ERR_TIMEOUT) isa HvdError
        @test sprint(showerror, MembershipChanged("x")) ==
              "MembershipChanged(HVD_ERR_MEMBERSHIP_CHANGED): x"
    end

    @testset "a context that is not elastic" begin
        Hvd.init()
        @test Hvd.membership() == Hvd.Membership(false, false, 0)
        e = hvd_error(Hvd.reset!)
        @test e isa HvdError && e.status == Hvd.HVD_ERR_UNSUPPORTED
        @test e isa HvdError && occursin("Hvd.reset!: this context is not in an elastic job", e.message)
        @test allreduce([1]; op = Hvd.Sum, name = "after") == [1]   # still works
        # The loop over the real context: one rank, its own state back.
        s = E.ObjectState((step = 0, w = [1.0]))
        r = E.run(s) do st
            while st[].step < 2
                st[] = (step = st[].step + 1, w = st[].w .+ allreduce([1.0]; op = Hvd.Sum))
                E.commit!(st)
            end
            st[]
        end
        @test r == (step = 2, w = [3.0])
        Hvd.shutdown()
        e = hvd_error(Hvd.membership)
        @test e isa HvdError && e.status == Hvd.HVD_ERR_NOT_INITIALIZED
    end

    launcher = get(ENV, "HVD_FAKE_ELASTIC_LAUNCHER", "")
    if isempty(launcher) || !isfile(launcher)
        println("elastic_tests.jl: worker processes skipped: HVD_FAKE_ELASTIC_LAUNCHER ",
                isempty(launcher) ? "is not set" : "= $launcher is not a file",
                " (build the target hvd_fake_elastic_launcher)")
    else
        # Three workers form epoch 0; one dies on reaching step 3 (steps 0-2
        # done, the last commit made at step 2); the others fail in step 3,
        # restore the commit made at step 2, reset and form epoch 1 (ranks
        # swapped by the launcher); the launcher changed the hosts meanwhile,
        # so their next commit interrupts them and they form epoch 2. The
        # total: 3 + 3 (epoch 0, committed) + 4 steps of 2 = 14 (15 had the
        # uncommitted step of epoch 0 been kept).
        @testset "workers under the fake launcher: a worker dies" begin
            mktempdir() do dir
                L = start_launcher(launcher)
                w = ["hostA:0:0", "hostA:1:1", "hostA:2:2"]
                procs = [spawn_worker(L, dir, w[1], 6, -1), spawn_worker(L, dir, w[2], 6, -1),
                         spawn_worker(L, dir, w[3], 6, 3)]
                try
                    for x in w
                        @test ask(L, "waitjoin $x 0 90") == "joined hostA"
                    end
                    for (i, x) in enumerate(w)
                        process_running(procs[i]) || println(stderr, both(dir, x))
                        @test ask(L, "answer $x 0 ok 0 $(i - 1) 3 0") == "ok"
                    end
                    rc = exit_code(procs[3], w[3])
                    got = output(dir, w[3])
                    want = "start rank=2 size=3 epoch=0 elastic=true\nleaving at step 3\n"
                    (rc == 0 && got == want) || println(stderr, both(dir, w[3]))
                    @test rc == 0
                    @test got == want
                    for x in w[1:2]
                        got = ask(L, "waitjoin $x 1 90")
                        got == "joined hostA" || println(stderr, both(dir, x))
                        @test got == "joined hostA"
                    end
                    @test ask(L, "set elastic/hosts_version 1") == "ok"
                    @test ask(L, "answer $(w[1]) 1 ok 1 1 2 0") == "ok"
                    @test ask(L, "answer $(w[2]) 1 ok 1 0 2 0") == "ok"
                    for x in w[1:2]
                        got = ask(L, "waitjoin $x 2 90")
                        got == "joined hostA" || println(stderr, both(dir, x))
                        @test got == "joined hostA"
                    end
                    @test ask(L, "answer $(w[1]) 2 ok 2 1 2 1") == "ok"
                    @test ask(L, "answer $(w[2]) 2 ok 2 0 2 1") == "ok"
                    for i in 1:2
                        @test exit_code(procs[i], w[i]) == 0
                        r1 = 2 - i
                        want = "start rank=$(i - 1) size=3 epoch=0 elastic=true\n" *
                               "lost a peer at step 3\n" *
                               "reset epoch=1 rank=$r1 size=2\n" *
                               "hosts updated at step 4\n" *
                               "reset epoch=2 rank=$r1 size=2\n" *
                               "done total=14 step=6 epoch=2 rank=$r1 size=2\n"
                        got = output(dir, w[i])
                        got == want || println(stderr, both(dir, w[i]))
                        @test got == want
                    end
                    @test ask(L, "get elastic/join/$(w[1])/3") == "none"
                finally
                    for p in procs
                        process_running(p) && kill(p, Base.SIGKILL)
                    end
                    close(L.proc)
                    kill(L.proc)
                end
            end
        end
    end
end

println(ts.passed, " passed, ", ts.failed, " failed")
exit(ts.failed == 0 ? 0 : 1)
