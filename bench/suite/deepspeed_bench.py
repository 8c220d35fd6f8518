"""deepspeed-bench: DeepSpeed's CPU shared-memory allreduce as a peer of hvd.

    deepspeed --num_accelerators 2 --master_port PORT --no_local_rank \\
        bench/suite/deepspeed_bench.py coll --sizes 4:256M
    hvdrun --start-timeout 0 -np 2 python3 bench/suite/deepspeed_bench.py coll --store DIR

DeepSpeed (CPU accelerator, DS_ACCELERATOR=cpu) initialises torch.distributed (gloo) with
deepspeed.init_distributed; deepspeed.comm.inference_all_reduce then runs its shared-memory
kernel (the ShareMemCommBuilder op, deepspeed/ops/csrc/cpu/comm/shm.cpp, compiled on first
use with the local compiler) when every rank is on this host (LOCAL_SIZE == WORLD_SIZE).
DeepSpeed falls back to a plain gloo all_reduce without saying so when the op is missing, so
this program checks that the op was built and will be used and stops otherwise.

Rank variables: torchrun style (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_SIZE, MASTER_ADDR,
MASTER_PORT: what DeepSpeed's launcher sets), else hvdrun's or mpirun's, from which the
torchrun-style ones are filled in (rank 0 picks a free port and passes it through --store).

Modes and variants (result lines: see pybench_common.py)
  coll     allreduce only (the shm kernel has no other collective), float32 SUM, in place:
           "inference" (deepspeed.comm.inference_all_reduce) and, with --variants, "all_reduce"
           (deepspeed.comm.all_reduce: torch.distributed's gloo, the torch series' path).
           Each iteration follows a barrier; the slowest rank's time counts.
  latency  one 4-byte inference_all_reduce per step, back to back.
"""

import argparse
import os
import socket
import statistics
import sys
import time

os.environ.setdefault("DS_ACCELERATOR", "cpu")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pybench_common as pc  # noqa: E402

SYSTEM = "deepspeed-shm"


def fail(msg):
    sys.stderr.write(f"deepspeed_bench: {msg}\n")
    sys.stderr.flush()
    sys.exit(4)


def torchrun_env(store, timeout_s=120.0):
    """Fills RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_SIZE, MASTER_ADDR, MASTER_PORT from the
    launcher's variables where DeepSpeed's launcher (or torchrun) has not set them."""
    env = os.environ
    if all(k in env for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        env.setdefault("LOCAL_RANK", env["RANK"])
        env.setdefault("LOCAL_SIZE", env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"]))
        return
    rank, size, local_size = pc.launcher_rank()
    local_rank = env.get("HVD_LOCAL_RANK", env.get("OMPI_COMM_WORLD_LOCAL_RANK", str(rank)))
    env["RANK"], env["WORLD_SIZE"] = str(rank), str(size)
    env["LOCAL_RANK"], env["LOCAL_SIZE"] = local_rank, str(local_size)
    env["MASTER_ADDR"] = "127.0.0.1"
    if "MASTER_PORT" in env:
        return
    if not store:
        fail("--store DIR is needed to agree on MASTER_PORT outside DeepSpeed's launcher")
    path = os.path.join(store, "master_port")
    if rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with open(path + ".tmp", "w") as f:
            f.write(str(port))
        os.rename(path + ".tmp", path)
    else:
        deadline = time.time() + timeout_s
        while not os.path.exists(path):
            if time.time() > deadline:
                fail(f"no MASTER_PORT from rank 0 in {path} (timeout)")
            time.sleep(0.01)
        with open(path) as f:
            port = int(f.read())
    env["MASTER_PORT"] = str(port)


class DeepSpeedShm:
    def __init__(self, timeout_s):
        import datetime
        import torch
        import deepspeed
        import deepspeed.comm as dscomm
        from deepspeed.comm import comm as dscomm_mod
        self.torch = torch
        self.dist = dscomm
        dscomm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False,
                                timeout=datetime.timedelta(seconds=timeout_s))
        self.rank, self.size = dscomm.get_rank(), dscomm.get_world_size()
        self.version = deepspeed.__version__
        cdb = dscomm_mod.cdb
        # The conditions under which inference_all_reduce takes the shm kernel (TorchBackend.
        # inference_all_reduce and shm_interface.cpp's initialize): checked, not assumed.
        why = None
        if getattr(cdb, "shm_comm_op", None) is None:
            why = "the ShareMemCommBuilder op was not built (see the compiler output above)"
        elif getattr(cdb, "shm_vector_kernel_level", 0) < 1:
            why = "the CPU lacks AVX2, which the op's fp32 kernel needs"
        elif not hasattr(torch.ops.deepspeed, "inference_all_reduce_"):
            why = "torch.ops.deepspeed.inference_all_reduce_ is not registered"
        elif int(os.environ.get("LOCAL_SIZE", "0")) != self.size:
            why = "LOCAL_SIZE != WORLD_SIZE: the shm kernel serves ranks of one host only"
        if why:
            fail(f"DeepSpeed {self.version}: inference_all_reduce would fall back to gloo: {why}")

    def barrier(self):
        self.dist.barrier()

    def inference(self, t):
        self.dist.inference_all_reduce(t)

    def all_reduce(self, t):
        self.dist.all_reduce(t)

    def max_(self, t):
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)

    def close(self):
        self.dist.barrier()
        self.torch.distributed.destroy_process_group()


def slowest(b, times):
    t = b.torch.tensor(times, dtype=b.torch.float64)
    b.max_(t)
    return t.tolist()


def pattern(torch, n, rank):
    return (torch.arange(n, dtype=torch.int64) % 7 + rank + 1).to(torch.float32)


def expected(torch, n, size):
    return (torch.arange(n, dtype=torch.int64) % 7 * size + size * (size + 1) // 2).to(
        torch.float32)


def run_coll(b, args):
    torch = b.torch
    ops = args.ops.split(",")
    if "allreduce" not in ops:
        return
    for variant in args.variants.split(","):
        call = {"inference": b.inference, "all_reduce": b.all_reduce}.get(variant)
        if call is None:
            fail(f"unknown variant {variant!r}")
        for nbytes in pc.parse_sizes(args.sizes):
            w, k = pc.schedule(nbytes, args.quick, args.iters_scale)
            count = max(1, nbytes // 4)
            x = pattern(torch, count, b.rank)
            times = []
            for i in range(w + k):
                b.barrier()
                t0 = pc.now_us()
                call(x)
                t1 = pc.now_us()
                if i == 0 and not torch.equal(x, expected(torch, count, b.size)):
                    fail(f"{variant} allreduce of {nbytes} bytes is wrong")
                if i >= w:
                    times.append(t1 - t0)
            times = slowest(b, times)
            if b.rank == 0:
                pc.emit_coll(SYSTEM, "allreduce", variant, b.size, count * 4, times,
                             deepspeed=b.version)


def run_latency(b, args):
    torch = b.torch
    steps, warm = (5, 2) if args.quick else (args.latency_steps, 50)
    x = torch.ones(1)
    times = []
    b.barrier()
    for s in range(warm + steps):
        x.fill_(1.0)
        t0 = pc.now_us()
        b.inference(x)
        t1 = pc.now_us()
        if x.item() != b.size:
            fail("latency allreduce wrong")
        if s >= warm:
            times.append(t1 - t0)
    med = slowest(b, [statistics.median(times)])
    if b.rank == 0:
        pc.emit_step("latency", SYSTEM, "4B", b.size, 1, 4, med, steps=steps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("modes", help="comma list of coll, latency")
    ap.add_argument("--store", default=None,
                    help="empty directory (MASTER_PORT exchange outside DeepSpeed's launcher)")
    ap.add_argument("--ops", default="allreduce", help="only allreduce is measured")
    ap.add_argument("--variants", default="inference", help="inference,all_reduce")
    ap.add_argument("--sizes", default="4:256M")
    ap.add_argument("--latency-steps", type=int, default=400)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--iters-scale", type=float, default=1.0)
    ap.add_argument("--timeout-s", type=float, default=300.0)
    args = ap.parse_args()
    torchrun_env(args.store)
    import torch
    torch.set_num_threads(1)
    b = DeepSpeedShm(args.timeout_s)
    runs = {"coll": run_coll, "latency": run_latency}
    for mode in args.modes.split(","):
        if mode not in runs:
            fail(f"unknown mode {mode!r}")
        runs[mode](b, args)
    b.close()


if __name__ == "__main__":
    main()
