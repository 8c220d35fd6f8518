"""Elastic data-parallel training (hvd.elastic, docs/elastic.md) of a small
MLP on scikit-learn's bundled digits data set (nothing is downloaded).

    hvdrun --min-np 2 --max-np 3 --host-discovery-script ./discover_hosts.sh \\
        python3 train_torch_elastic.py

Workers may die or be added while it trains: the survivors go back to the last
commit, form the job again with new ranks, and go on; a new worker gets the
model, the optimizer and the data sampler's progress from rank 0. The data
order is seeded (ElasticSampler) and the model is float64, so that a run with
failures can be compared with a reference that one process computes for the
same membership schedule:

    python3 train_torch_elastic.py --reference 3@0,2@10

trains as 3 ranks would up to step 10 and as 2 ranks from there (what a job
of 3 does when a worker dies after the commit at step 10 and before the next);
2@0,2@10 is a job of 2 that went back to step 10 and re-sharded its data there.
The last line of either run is `final loss <value>`.

To try failures by hand: --exit-at-step S --exit-rank R kills the worker of
rank R at step S (SIGKILL, first epoch of the job only), and --add-host-at-step
S --hosts-file F --add-host HOST:SLOTS appends a host to the discovery script's
file at step S and commits there once the launcher has seen it.
--stop-in-sync makes a worker that joins a running job stop itself (SIGSTOP) as
its state sync begins. --step-time S makes each step last at least S seconds (the cluster test cuts
a host's link while the job trains). --log-steps makes every worker print
`<unix time> rank R of N: step S done` after each step (and stamps the
--exit-at-step line the same way): with the hosts' clocks in step, how long a
recovery took can be read off the output.
"""

import argparse
import json
import os
import signal
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

try:
    import hvd.torch as hvd
except ImportError:  # running from a source checkout without pip install
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "bindings", "python"))
    import hvd.torch as hvd

from hvd.torch.elastic import ElasticSampler, TorchState  # noqa: E402


def load_data():
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = torch.from_numpy((digits.data / 16.0).astype(np.float64))
    y = torch.from_numpy(digits.target.astype(np.int64))
    return torch.utils.data.TensorDataset(x, y)


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 10)).double()


def make_optimizer(model, lr):
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)


def full_loss(model, data):
    with torch.no_grad():
        x, y = data.tensors
        return F.cross_entropy(model(x), y).item()


def loader(data, sampler, batch_size):
    return torch.utils.data.DataLoader(data, batch_size=batch_size, sampler=sampler)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16, help="per rank")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=42, help="data order")
    ap.add_argument("--commit-every", type=int, default=5, help="steps between commits")
    ap.add_argument("--exit-at-step", type=int, default=-1)
    ap.add_argument("--exit-rank", type=int, default=-1)
    ap.add_argument("--add-host-at-step", type=int, default=-1)
    ap.add_argument("--hosts-file")
    ap.add_argument("--add-host")
    ap.add_argument("--stop-in-sync", action="store_true",
                    help="a worker that joins a running job stops itself (SIGSTOP) as its "
                         "state sync begins")
    ap.add_argument("--result-dir", help="each worker writes result-<pid>.json here")
    ap.add_argument("--log-steps", action="store_true",
                    help="every worker prints a time-stamped line after each step")
    ap.add_argument("--step-time", type=float, default=0.0, metavar="SECONDS",
                    help="each step lasts at least this long (it sleeps the rest), to "
                         "disturb a job by hand while it trains")
    ap.add_argument("--reference", metavar="N@STEP,...",
                    help="compute in this process what ranks would: N ranks from STEP on")
    return ap.parse_args(argv)


def train_elastic(args):
    hvd.init()
    torch.set_num_threads(1)  # the same arithmetic on every worker as in --reference
    data = load_data()
    # different on purpose: state.sync() makes every worker start from rank 0's
    model = make_model(1234 + hvd.rank())
    optimizer = hvd.DistributedOptimizer(make_optimizer(model, args.lr),
                                         named_parameters=model.named_parameters())
    sampler = ElasticSampler(data, shuffle=True, seed=args.seed)
    state = TorchState(model, optimizer, sampler=sampler, epoch=0, step=0)
    seen = {"sizes": [], "first_step": None}

    def on_reset():
        m = hvd.elastic.membership()
        seen["sizes"].append(hvd.size())
        if hvd.rank() == 0:
            print(f"reset: elastic epoch {m.epoch}, {hvd.size()} workers, going on from "
                  f"step {state.step}", flush=True)

    state.register_reset_callbacks([on_reset])
    if args.stop_in_sync:
        sync = state.sync

        def stop_then_sync():
            # Only a worker that joins a running job (its first sync, in a
            # later epoch): the others wait for it in the state broadcast.
            if seen["first_step"] is None and hvd.elastic.membership().epoch > 0:
                stamp = f"{time.time():.3f} " if args.log_steps else ""
                print(f"{stamp}rank {hvd.rank()}: stopping in the state sync (--stop-in-sync)",
                      flush=True)
                os.kill(os.getpid(), signal.SIGSTOP)
            sync()

        state.sync = stop_then_sync

    def inject(step):
        if step == args.exit_at_step and hvd.rank() == args.exit_rank \
                and hvd.elastic.membership().epoch == 0:
            stamp = f"{time.time():.3f} " if args.log_steps else ""
            print(f"{stamp}rank {hvd.rank()}: exiting at step {step} (--exit-at-step)", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    def maybe_add_host(step):
        """At --add-host-at-step (first epoch of the job only): rank 0 adds
        the host and waits until the launcher has seen it, then every rank
        commits, so the new worker joins at exactly this step."""
        if step != args.add_host_at_step or hvd.elastic.membership().epoch != 0:
            return False
        if hvd.rank() == 0:
            with open(args.hosts_file, "a") as f:
                f.write(args.add_host + "\n")
            deadline = time.monotonic() + 60
            while not hvd.elastic.membership().hosts_updated:
                if time.monotonic() > deadline:
                    raise RuntimeError("the launcher did not see the added host in 60 s")
                time.sleep(0.2)
        return True

    @hvd.elastic.run
    def train(state):
        if seen["first_step"] is None:
            seen["first_step"] = state.step
        while state.epoch < args.epochs:
            for idx, (x, y) in enumerate(loader(data, state.sampler, args.batch_size)):
                t_step = time.monotonic()
                inject(state.step)
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
                state.sampler.record_batch(idx, args.batch_size)
                state.step += 1
                if args.step_time > 0:
                    time.sleep(max(0.0, t_step + args.step_time - time.monotonic()))
                if args.log_steps:
                    print(f"{time.time():.3f} rank {hvd.rank()} of {hvd.size()}: step {state.step} "
                          f"done", flush=True)
                if maybe_add_host(state.step) or state.step % args.commit_every == 0:
                    state.commit()
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.commit()
            if hvd.rank() == 0:
                print(f"epoch {state.epoch}: {hvd.size()} workers, step {state.step}, "
                      f"loss {full_loss(model, data):.6f}", flush=True)

    train(state)
    loss = full_loss(model, data)
    checksum = float(sum(p.double().sum().item() for p in model.parameters()))
    if args.result_dir:
        out = {"rank": hvd.rank(), "size": hvd.size(), "loss": loss, "checksum": checksum,
               "step": state.step, "first_step": seen["first_step"], "sizes": seen["sizes"],
               "worker": os.environ.get("HVD_ELASTIC_WORKER", ""), "host": os.uname().nodename}
        with open(os.path.join(args.result_dir, f"result-{os.getpid()}.json"), "w") as f:
            json.dump(out, f)
    if hvd.rank() == 0:
        print(f"final loss {loss!r}", flush=True)
    hvd.shutdown()


def parse_schedule(text):
    """"3@0,2@10" -> [(0, 3), (10, 2)]: ranks from a step on."""
    out = []
    for part in text.split(","):
        n, step = part.split("@")
        out.append((int(step), int(n)))
    out.sort()
    if not out or out[0][0] != 0:
        raise SystemExit("--reference: the schedule must start at step 0 (N@0,...)")
    return out


def train_reference(args):
    """What the elastic job computes, in one process: each rank's batch and
    gradient, averaged as DistributedOptimizer averages them, the sampler
    re-sharded when the number of ranks changes (at a commit)."""
    torch.set_num_threads(1)
    schedule = parse_schedule(args.reference)
    data = load_data()
    model = make_model(1234)  # rank 0's
    optimizer = make_optimizer(model, args.lr)
    progress = {"epoch": 0, "processed_indices": set()}
    step = 0
    epoch = 0

    starts = {start for start, _ in schedule if start > 0}

    def ranks_at(s):
        return [n for start, n in schedule if start <= s][-1]

    while epoch < args.epochs:
        n = ranks_at(step)
        samplers = [ElasticSampler(data, shuffle=True, seed=args.seed, num_replicas=n, rank=r)
                    for r in range(n)]
        for s in samplers:
            s.load_state_dict(progress)
        resharded = False
        for idx, batches in enumerate(zip(*(loader(data, s, args.batch_size)
                                            for s in samplers))):
            grads = []
            for x, y in batches:
                model.zero_grad()
                F.cross_entropy(model(x), y).backward()
                grads.append([p.grad.clone() for p in model.parameters()])
            for p, *gs in zip(model.parameters(), *grads):
                p.grad = sum(gs) / n
            optimizer.step()
            for s in samplers:
                s.record_batch(idx, args.batch_size)
            step += 1
            progress = {"epoch": epoch,
                        "processed_indices": set().union(*(s.processed_indices
                                                           for s in samplers))}
            # A reset re-shards the remaining data even at the same size.
            if ranks_at(step) != n or step in starts:
                resharded = True
                break
        if resharded:
            continue
        epoch += 1
        progress = {"epoch": epoch, "processed_indices": set()}
        print(f"epoch {epoch}: {n} ranks, step {step}, loss {full_loss(model, data):.6f}",
              flush=True)
    loss = full_loss(model, data)
    if args.result_dir:
        with open(os.path.join(args.result_dir, "reference.json"), "w") as f:
            json.dump({"loss": loss, "step": step}, f)
    print(f"final loss {loss!r}", flush=True)


def main(argv=None):
    args = parse_args(argv)
    if args.reference:
        train_reference(args)
    else:
        train_elastic(args)


if __name__ == "__main__":
    main()
