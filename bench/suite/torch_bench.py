"""Peers from Python: torch.distributed (gloo backend) and Horovod, measured
with the same sizes, schedule and metrics as the native programs, and hvd's
own torch frontend through the same Horovod calls (--system hvd-torch).

    hvdrun --start-timeout 0 -np 2 python torch_bench.py coll,fusion,latency --system torch --store DIR
    mpirun -np 2 python torch_bench.py coll --system horovod
    hvdrun -np 2 python torch_bench.py fusion --system hvd-torch
    hvdrun --start-timeout 0 -H a,b python torch_bench.py e2e --store DIR --netdev eth0

Modes (a comma list, run in order in one job): coll (allreduce SUM in place, allgather, broadcast from rank 0; a
barrier before every iteration, the slowest rank's time counts), fusion (N
tensors: torch.distributed one blocking all_reduce at a time; Horovod and
hvd-torch submit them all with allreduce_async_ and synchronize, i.e. Tensor
Fusion),
latency (one 4-byte allreduce per step, back to back), e2e (torch.distributed
only: hvd-bench e2e's synthetic ResNet-50 step, its gradients averaged in
DistributedDataParallel's buckets; see run_e2e).
"""

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pybench_common as pc  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


class TorchDist:
    system = "torch"

    def __init__(self, store):
        import torch.distributed as dist
        self.dist = dist
        rank, size, _ = pc.launcher_rank()
        dist.init_process_group("gloo", init_method="file://" + os.path.join(store, "torch"),
                                rank=rank, world_size=size)
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self._ag_into = hasattr(dist, "all_gather_into_tensor")

    def barrier(self):
        self.dist.barrier()

    def allreduce_(self, t, name):
        self.dist.all_reduce(t)

    def allgather(self, t, out, name):
        if self._ag_into:
            try:
                self.dist.all_gather_into_tensor(out, t)
                return
            except (RuntimeError, NotImplementedError):
                self._ag_into = False
        self.dist.all_gather(list(out.chunk(self.size)), t)

    def broadcast_(self, t, name):
        self.dist.broadcast(t, src=0)

    def allreduce_async_(self, t):
        return self.dist.all_reduce(t, async_op=True)

    def sum_(self, values):
        t = torch.tensor(values, dtype=torch.float64)
        self.dist.all_reduce(t)
        return t.tolist()

    def fused_step(self, tensors, names):
        for t in tensors:  # one call at a time, as a naive training loop would
            self.dist.all_reduce(t)

    def max_(self, t):
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)

    def close(self):
        self.dist.barrier()
        self.dist.destroy_process_group()


class Horovod:
    system = "horovod"

    def __init__(self, store):
        import horovod.torch as hh
        self.h = hh
        hh.init()
        self.rank, self.size = hh.rank(), hh.size()

    def barrier(self):
        if hasattr(self.h, "barrier"):
            self.h.barrier()
        else:
            self.h.allreduce(torch.zeros(1), name="barrier")

    def allreduce_(self, t, name):
        self.h.allreduce_(t, op=self.h.Sum, name=name)

    def allgather(self, t, out, name):
        out.copy_(self.h.allgather(t, name=name))

    def broadcast_(self, t, name):
        self.h.broadcast_(t, root_rank=0, name=name)

    def fused_step(self, tensors, names):
        hs = [self.h.allreduce_async_(t, op=self.h.Sum, name=n) for t, n in zip(tensors, names)]
        for h in hs:
            self.h.synchronize(h)

    def max_(self, t):
        t.copy_(self.h.allreduce(t, op=self.h.Max, name="times.max"))

    def close(self):
        self.h.shutdown()


class HvdTorch(Horovod):
    """hvd's Horovod-compatible torch frontend (hvd.torch), the same calls as Horovod's."""
    system = "hvd-torch"

    def __init__(self, store):
        sys.path.insert(1, os.path.join(os.path.dirname(os.path.dirname(HERE)), "bindings", "python"))
        import hvd.torch as hh
        self.h = hh
        hh.init()
        self.rank, self.size = hh.rank(), hh.size()


def slowest(b, times):
    t = torch.tensor(times, dtype=torch.float64)
    b.max_(t)
    return t.tolist()


def pattern(n, rank):
    return (torch.arange(n, dtype=torch.int64) % 7 + rank + 1).to(torch.float32)


def expected(n, size):
    return (torch.arange(n, dtype=torch.int64) % 7 * size + size * (size + 1) // 2).to(
        torch.float32)


def run_coll(b, args):
    n = b.size
    for op in args.ops.split(","):
        for nbytes in pc.parse_sizes(args.sizes):
            w, k = pc.schedule(nbytes, args.quick, args.iters_scale)
            times = []
            if op == "allreduce":
                count = max(1, nbytes // 4)
                x = pattern(count, b.rank)
                for i in range(w + k):
                    b.barrier()
                    t0 = pc.now_us()
                    b.allreduce_(x, f"ar.{nbytes}")
                    t1 = pc.now_us()
                    if i == 0 and not torch.equal(x, expected(count, n)):
                        raise SystemExit(f"{b.system}: allreduce of {nbytes} bytes is wrong")
                    if i >= w:
                        times.append(t1 - t0)
                total = count * 4
            elif op == "allgather":
                per = max(1, nbytes // 4 // n)
                x = torch.full((per,), float(b.rank))
                out = torch.empty(per * n)
                for i in range(w + k):
                    b.barrier()
                    t0 = pc.now_us()
                    b.allgather(x, out, f"ag.{nbytes}")
                    t1 = pc.now_us()
                    if i == 0 and out[-1].item() != n - 1:
                        raise SystemExit(f"{b.system}: allgather of {nbytes} bytes is wrong")
                    if i >= w:
                        times.append(t1 - t0)
                total = per * 4 * n
            elif op == "broadcast":
                count = max(1, nbytes // 4)
                x = torch.full((count,), 7.0 if b.rank == 0 else 0.0)
                for i in range(w + k):
                    b.barrier()
                    t0 = pc.now_us()
                    b.broadcast_(x, f"bc.{nbytes}")
                    t1 = pc.now_us()
                    if i == 0 and x[-1].item() != 7.0:
                        raise SystemExit(f"{b.system}: broadcast of {nbytes} bytes is wrong")
                    if i >= w:
                        times.append(t1 - t0)
                total = count * 4
            else:
                raise SystemExit(f"unknown op {op}")
            times = slowest(b, times)
            if b.rank == 0:
                variant = "outofplace" if op == "allgather" else "inplace"
                pc.emit_coll(b.system, op, variant, n, total, times)


def run_fusion(b, args):
    for spec in args.fusion.split(","):
        ntens, tbytes = spec.lower().split("x")
        fusion_one(b, args, int(ntens), pc.parse_bytes(tbytes))


def fusion_one(b, args, ntens, tbytes):
    count = tbytes // 4
    tensors = [pattern(count, b.rank) for _ in range(ntens)]
    names = [f"fuse.{ntens}.{i}" for i in range(ntens)]
    warm, steps = (1, 1) if args.quick else (2, args.fusion_steps)
    times = []
    for s in range(warm + steps):
        b.barrier()
        t0 = pc.now_us()
        b.fused_step(tensors, names)
        t1 = pc.now_us()
        if s == 0 and not all(torch.equal(t, expected(count, b.size)) for t in tensors):
            raise SystemExit(f"{b.system}: fusion result wrong")
        if s >= warm:
            times.append(t1 - t0)
    times = slowest(b, times)
    if b.rank == 0:
        variant = "separate" if b.system == "torch" else "fused"
        pc.emit_step("fusion", b.system, variant, b.size, ntens, count * 4, times,
                     **_cycle_extra(b))


def _cycle_extra(b):
    if b.system == "horovod":
        return {"cycle_time_ms": float(os.environ.get("HOROVOD_CYCLE_TIME", "1") or 1)}
    return {}


def run_latency(b, args):
    steps, warm = (5, 2) if args.quick else (args.latency_steps, 50)
    x = torch.ones(1)
    times = []
    b.barrier()
    for s in range(warm + steps):
        x.fill_(1.0)
        t0 = pc.now_us()
        b.allreduce_(x, "lat")
        t1 = pc.now_us()
        if x.item() != b.size:
            raise SystemExit(f"{b.system}: latency allreduce wrong")
        if s >= warm:
            times.append(t1 - t0)
    med = slowest(b, [statistics.median(times)])
    if b.rank == 0:
        pc.emit_step("latency", b.system, "4B", b.size, 1, 4, med, steps=steps,
                     **_cycle_extra(b))


def resnet50_tensors():
    """ResNet-50's parameter tensors in registration order as (elements, whether a conv or fc
    weight): hvd_bench.cc's ResNet50Tensors (torchvision's resnet50), kept in step with it."""
    t = []

    def conv(cin, cout, k):
        t.append((cin * cout * k * k, True))

    def bn(c):
        t.extend([(c, False), (c, False)])
    conv(3, 64, 7)
    bn(64)
    cin = 64
    for planes, blocks in zip((64, 128, 256, 512), (3, 4, 6, 3)):
        for blk in range(blocks):
            conv(cin, planes, 1)
            bn(planes)
            conv(planes, planes, 3)
            bn(planes)
            conv(planes, planes * 4, 1)
            bn(planes * 4)
            if blk == 0:
                conv(cin, planes * 4, 1)
                bn(planes * 4)
            cin = planes * 4
    t += [(2048 * 1000, True), (1000, False)]
    if len(t) != 161 or sum(c for c, _ in t) != 25557032:
        raise SystemExit("torch_bench: the ResNet-50 table is wrong")
    return t


DDP_BUCKET_CAP = 25 << 20  # DistributedDataParallel's bucket_cap_mb default


def ddp_buckets(counts):
    """DDP's own assignment (torch.distributed._compute_bucket_assignment_by_size, as the
    Reducer rebuilds its buckets after the first step from the order the gradients became
    ready: a first bucket of _DEFAULT_FIRST_BUCKET_BYTES, then 25 MiB caps) of float32
    gradients of these element counts, given in that order: lists of indices into counts."""
    import torch.distributed as dist
    probes = [torch.empty(c) for c in counts]  # only numel, dtype and device are read
    limits = [dist._DEFAULT_FIRST_BUCKET_BYTES, DDP_BUCKET_CAP]
    return dist._compute_bucket_assignment_by_size(probes, limits, [False] * len(counts))[0]


class Buckets:
    """Gradients as views into DDP-style flat buckets (gradient_as_bucket_view=True), in the
    order they are produced (order: tensor indices, backward)."""

    def __init__(self, counts, order):
        self.groups = [[order[i] for i in idx] for idx in ddp_buckets([counts[k] for k in order])]
        self.flat, self.grad, self.owner = [], [None] * len(counts), [0] * len(counts)
        for j, group in enumerate(self.groups):
            flat = torch.empty(sum(counts[k] for k in group))
            off = 0
            for k in group:
                self.grad[k], self.owner[k] = flat[off:off + counts[k]], j
                off += counts[k]
            self.flat.append(flat)


def sleep_until(t):
    d = t - time.perf_counter()
    if d > 0:
        time.sleep(d)


def e2e_check(bk, counts, size):
    """After the first step: every gradient is the average of pattern() over the ranks."""
    for k, c in enumerate(counts):
        want = expected(c, size) / size
        if not torch.allclose(bk.grad[k], want, rtol=1e-5, atol=0):
            raise SystemExit(f"torch: e2e gradient {k} is wrong")


def e2e_step(b, bk, spec, order, fwd, share):
    """One step (times in seconds): the forward's sleep, then the backward's gradients in
    order, each after its share of sleep if a weight, divided by the world size into its
    bucket, a full bucket's allreduce started at once; waits for them all. Its µs."""
    left = [len(g) for g in bk.groups]
    works = []
    t0 = pc.now_us()
    due = time.perf_counter() + fwd
    sleep_until(due)
    for k in order:
        if spec[k][1]:
            due += share
            sleep_until(due)
        bk.grad[k].div_(b.size)
        j = bk.owner[k]
        left[j] -= 1
        if left[j] == 0:
            works.append(b.allreduce_async_(bk.flat[j]))
    for w in works:
        w.wait()
    return pc.now_us() - t0


def run_e2e(b, args):
    """hvd-bench e2e's step (hvd_bench.cc RunE2e: the same 161 gradients, the same slept
    compute, a third forward and the rest backward in equal shares per weight tensor, last
    layer first), the gradients averaged as DistributedDataParallel's Reducer does: each one
    divided by the world size as it is produced, written into its bucket (DDP's bucket
    assignment, 25 MiB), and a bucket's all_reduce(async_op=True) started as soon as its last
    gradient is in; the step ends when every bucket's allreduce is done."""
    spec = resnet50_tensors()
    counts = [c for c, _ in spec]
    order = list(range(len(spec)))[::-1]
    bk = Buckets(counts, order)
    steps, warmup = (2, 1) if args.quick else (args.steps, args.warmup)
    fwd = args.compute_ms / 3.0 / 1e3
    share = args.compute_ms * 2.0 / 3.0 / 1e3 / sum(1 for _, w in spec if w)
    net = pc.NetCounter(args.netdev, b.barrier, b.sum_)
    for k, c in enumerate(counts):
        bk.grad[k].copy_(pattern(c, b.rank))
    times = []
    b.barrier()
    for s in range(warmup + steps):
        if s == warmup:
            net.start()
        dt = e2e_step(b, bk, spec, order, fwd, share)
        if s == 0:
            e2e_check(bk, counts, b.size)
        if s >= warmup:
            times.append(dt)
    extra = net.stop(steps)
    times = slowest(b, times)
    if b.rank == 0:
        med = statistics.median(times)
        pc.emit_step("e2e_synth", b.system, "resnet50", b.size, len(spec), 0, times,
                     model="resnet50", params=sum(counts), compute_ms=args.compute_ms,
                     batch=args.batch, buckets=len(bk.groups), bucket_cap=DDP_BUCKET_CAP,
                     step_ms=round(med / 1e3, 3),
                     images_per_s=round(b.size * args.batch / (med / 1e6), 1), **extra)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("modes", help="comma list of coll, fusion, latency")
    ap.add_argument("--system", choices=["torch", "horovod", "hvd-torch"], default="torch")
    ap.add_argument("--store", default=None, help="empty directory (torch rendezvous file)")
    ap.add_argument("--ops", default="allreduce,allgather,broadcast")
    ap.add_argument("--sizes", default="4:256M")
    ap.add_argument("--fusion", default="200x16K,1000x4K", help="NxBYTES list")
    ap.add_argument("--fusion-steps", type=int, default=10)
    ap.add_argument("--latency-steps", type=int, default=400)
    ap.add_argument("--compute-ms", type=float, default=100.0, help="e2e: compute per step")
    ap.add_argument("--batch", type=int, default=32, help="e2e: images per rank and step")
    ap.add_argument("--steps", type=int, default=10, help="e2e: timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="e2e: untimed steps first")
    ap.add_argument("--netdev", default="", help="e2e: count the bytes on this interface")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--iters-scale", type=float, default=1.0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.system == "torch":
        if not args.store:
            raise SystemExit("torch_bench: --store DIR is required for torch.distributed")
        b = TorchDist(args.store)
    elif args.system == "hvd-torch":
        b = HvdTorch(args.store)
    else:
        b = Horovod(args.store)
    runs = {"coll": run_coll, "fusion": run_fusion, "latency": run_latency}
    if b.system == "torch":
        runs["e2e"] = run_e2e
    for mode in args.modes.split(","):
        if mode not in runs:
            raise SystemExit(f"torch_bench: unknown mode {mode!r}")
        runs[mode](b, args)
    b.close()


if __name__ == "__main__":
    main()
