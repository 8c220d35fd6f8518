"""One worker of elastic_bench.py: a small MLP trained with averaged gradients,
in three forms that do the same work per step:

  hvd          plain hvd.torch (DistributedOptimizer), no elastic state
  hvd-elastic  the same under hvd.elastic.run with a TorchState committed
               every --commit-every steps
  torchrun     torch.distributed (gloo) + DDP under torchrun; a checkpoint file
               is written every --commit-every steps and read after a restart
               (torch's answer to a lost worker: restart every process)

Prints one line per completed step, "STEP <step> <rank> <size> <unix time>
<seconds the step took>", and "DIE <unix time>" just before the worker that
--kill-step names kills itself (SIGKILL; in the first attempt only).
"""

import argparse
import os
import signal
import sys
import time

import torch


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", choices=("hvd", "hvd-elastic", "torchrun"), required=True)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--commit-every", type=int, default=5)
    ap.add_argument("--kill-step", type=int, default=0, help="0: nobody dies")
    ap.add_argument("--checkpoint", default="", help="torchrun: the checkpoint file")
    return ap.parse_args()


def make_model(hidden):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, 10))


def batch_for(step, rank, args):
    g = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(args.batch, args.hidden, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    return x, y


def report(step, rank, size, t0):
    now = time.time()
    print(f"STEP {step} {rank} {size} {now:.6f} {now - t0:.6f}", flush=True)


def maybe_die(args, step, rank, size, first_attempt):
    if first_attempt and args.kill_step and step == args.kill_step and rank == size - 1:
        print(f"DIE {time.time():.6f}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def run_hvd(args, elastic):
    import hvd.torch as hvd
    hvd.init()
    torch.set_num_threads(1)
    model = make_model(args.hidden)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    loss_fn = torch.nn.CrossEntropyLoss()

    def step_once(step):
        t0 = time.time()
        x, y = batch_for(step, hvd.rank(), args)
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        return t0

    if not elastic:
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        for step in range(1, args.steps + 1):
            t0 = step_once(step)
            report(step, hvd.rank(), hvd.size(), t0)
        return

    state = hvd.elastic.TorchState(model, opt, step=0)
    first = {"attempt": True}

    def on_reset():
        first["attempt"] = False

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        while state.step < args.steps:
            step = state.step + 1
            t0 = step_once(step)
            state.step = step
            report(step, hvd.rank(), hvd.size(), t0)
            if step % args.commit_every == 0:
                state.commit()
            maybe_die(args, step, hvd.rank(), hvd.size(), first["attempt"])

    train(state)


def run_torchrun(args):
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    model = make_model(args.hidden)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    start = 0
    first_attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) == 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        ck = torch.load(args.checkpoint)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        start = ck["step"]
    for step in range(start + 1, args.steps + 1):
        t0 = time.time()
        x, y = batch_for(step, rank, args)
        opt.zero_grad()
        loss_fn(ddp(x), y).backward()
        opt.step()
        report(step, rank, size, t0)
        if step % args.commit_every == 0 and rank == 0 and args.checkpoint:
            tmp = args.checkpoint + ".tmp"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
            os.replace(tmp, args.checkpoint)
        if step % args.commit_every == 0:
            dist.barrier()  # the checkpoint is complete before anyone may die
        maybe_die(args, step, rank, size, first_attempt)
    dist.destroy_process_group()


def main():
    args = parse()
    if args.framework == "torchrun":
        run_torchrun(args)
    else:
        run_hvd(args, args.framework == "hvd-elastic")
    return 0


if __name__ == "__main__":
    sys.exit(main())
