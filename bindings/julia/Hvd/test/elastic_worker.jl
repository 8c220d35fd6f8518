# A worker of an elastic job, started by elastic_tests.jl under the fake
# launcher (tests/integration/elastic): `steps` training steps, each adding
# the allreduced count of ranks to a total, a commit after every second step.
# With `leave_at` >= 0 the worker dies (_exit with `exit_code`, default 0; no
# shutdown) when it reaches that step. Prints what happens, one line each, for
# the test to compare. Run by elastic_tests.jl under the fake launcher, and by
# run_tests.sh under hvdrun's elastic driver.
#
#   julia --project=bindings/julia/Hvd elastic_worker.jl <steps> <leave_at> [exit_code]

using Hvd

const steps = parse(Int, ARGS[1])
const leave_at = parse(Int, ARGS[2])
const exit_code = length(ARGS) > 2 ? parse(Int, ARGS[3]) : 0
say(s) = (println(s); flush(stdout))

Hvd.init()
m = Hvd.membership()
say("start rank=$(Hvd.rank()) size=$(Hvd.size()) epoch=$(m.epoch) elastic=$(m.elastic)")
state = Hvd.Elastic.ObjectState((step = 0, total = 0))
Hvd.Elastic.register_reset_callback!(state, () ->
    say("reset epoch=$(Hvd.membership().epoch) rank=$(Hvd.rank()) size=$(Hvd.size())"))
try
    done = Hvd.Elastic.run(state) do s
        while s[].step < steps
            if s[].step == leave_at
                say("leaving at step $(s[].step)")
                sleep(0.3)   # the step before is over on every rank
                ccall(:_exit, Cvoid, (Cint,), exit_code)
            end
            n = try
                allreduce!(Int64[1]; op = Hvd.Sum, name = "step")[1]
            catch e
                e isa MembershipChanged && say("lost a peer at step $(s[].step)")
                rethrow()
            end
            s[] = (step = s[].step + 1, total = s[].total + n)
            if s[].step % 2 == 0
                try
                    Hvd.Elastic.commit!(s)
                catch e
                    e isa Hvd.Elastic.HostsUpdatedInterrupt && say("hosts updated at step $(s[].step)")
                    rethrow()
                end
            end
        end
        s[]
    end
    say("done total=$(done.total) step=$(done.step) epoch=$(Hvd.membership().epoch) " *
        "rank=$(Hvd.rank()) size=$(Hvd.size())")
catch e
    e isa MembershipChanged || rethrow()
    say("ended: launcher_ended=$(Hvd.launcher_ended(e)) $(e.message)")
end
Hvd.shutdown()
