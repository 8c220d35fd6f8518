# Data-parallel logistic regression with hvd, written with plain arrays and a
# hand-written gradient (the shape of a Flux training loop, without Flux).
#
#   build/bin/hvdrun -np 2 julia examples/julia/train_logreg.jl   # 2 ranks
#   julia examples/julia/train_logreg.jl                            # alone: a world of one
#
# (`julia` on PATH and `using Hvd` from anywhere: the quick start of
# docs/julia.md. This example finds the package by itself.)
#
# Every rank generates its own shard of a synthetic data set (the same true
# model, different samples), starts from its own random parameters, and then:
#   1. broadcast_parameters!  -- every rank starts from rank 0's parameters;
#   2. each step: gradient on the local shard, then Hvd.update! with a
#      DistributedOptimizer, which averages the gradients over the ranks (one
#      fused round) and applies the update rule;
#   3. at the end, checks that the loss fell and that every rank holds the
#      same parameters (allreduce Max == allreduce Min), and exits 1 if not.
# Options (environment): HVD_EXAMPLE_STEPS (default 150).

if Base.find_package("Hvd") === nothing
    push!(LOAD_PATH, normpath(joinpath(@__DIR__, "..", "..", "bindings", "julia")))
end
using Hvd
using Random

sigmoid(z) = 1 / (1 + exp(-z))

# Mean log-loss of the model (w, b) on the samples X (features × samples), y.
function loss(w, b, X, y)
    z = X' * w .+ b[1]
    # log(1 + exp(z)) - y*z, written to stay finite for large |z|
    return sum(@. max(z, 0) + log1p(exp(-abs(z))) - y * z) / length(y)
end

# Gradient of `loss` with respect to w and b, into gw and gb.
function gradient!(gw, gb, w, b, X, y)
    r = sigmoid.(X' * w .+ b[1]) .- y
    n = length(y)
    gw .= (X * r) ./ n
    gb[1] = sum(r) / n
    return (w = gw, b = gb)
end

function main()
    Hvd.init()
    rank, nranks = Hvd.rank(), Hvd.size()
    steps = parse(Int, get(ENV, "HVD_EXAMPLE_STEPS", "150"))
    nfeatures, nlocal = 8, 400

    # The true model is the same everywhere; the samples differ per rank.
    truth = MersenneTwister(7)
    w_true = randn(truth, nfeatures) .* 2
    b_true = 0.5
    data = MersenneTwister(1000 + rank)
    X = randn(data, nfeatures, nlocal)                     # samples as columns
    y = Float64.(rand(data, nlocal) .< sigmoid.(X' * w_true .+ b_true))

    # Each rank's own random start, then rank 0's parameters everywhere.
    init = MersenneTwister(rank)
    params = (w = randn(init, nfeatures), b = [randn(init)])
    broadcast_parameters!(params; root = 0)

    opt = DistributedOptimizer(Hvd.Momentum(0.5, 0.9))
    gw, gb = similar(params.w), similar(params.b)
    global_loss() = allreduce(loss(params.w, params.b, X, y); name = "loss")
    first_loss = global_loss()
    rank == 0 && println("ranks: $nranks, samples per rank: $nlocal, start loss: ",
                         round(first_loss; digits = 4))
    for step in 1:steps
        grads = gradient!(gw, gb, params.w, params.b, X, y)
        Hvd.update!(opt, params, grads)
        if step % 25 == 0 || step == steps
            l = global_loss()
            rank == 0 && println("step $step: loss ", round(l; digits = 4))
        end
    end
    last_loss = global_loss()

    # Accuracy of every rank on its shard, gathered.
    acc = sum((sigmoid.(X' * params.w .+ params.b[1]) .> 0.5) .== (y .> 0.5)) / nlocal
    accs = allgather(acc)
    flat = vcat(params.w, params.b)
    identical = allreduce(flat; op = Hvd.Max, name = "check.max") ==
                allreduce(flat; op = Hvd.Min, name = "check.min")
    fell = last_loss < 0.8 * first_loss
    if rank == 0
        println("accuracy per rank: ", round.(accs; digits = 3))
        println("loss fell: ", round(first_loss; digits = 4), " -> ", round(last_loss; digits = 4),
                fell ? "" : " (NOT ENOUGH)")
        println("parameters identical on all ranks: ", identical)
    end
    Hvd.shutdown()
    return fell && identical
end

exit(main() ? 0 : 1)
