"""Allreduce of CUDA tensors staged through page-locked host memory, against
the same allreduce of host tensors, in one hvd job (run_all.py --parts gpu).

    hvdrun -np 2 python gpu_coll_bench.py [--sizes 4K,1M,16M] [--quick]

Every rank uses GPU local_rank % device_count (ranks sharing one GPU is what a
one-GPU machine can run). For each size, the host tensor and the CUDA tensor
alternate in rounds; each timed iteration is one hvd.torch.allreduce_ (in
place, SUM) from submit to the result in place (the default completion: the
host waited for the copy back), rank 0's clock after a barrier. Where there is
no CUDA device it prints one "SKIP <reason>" line and exits 0.
"""

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(ROOT, "bindings", "python"))
import pybench_common as pc  # noqa: E402


def parse_size(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4K,64K,1M,16M,64M")
    ap.add_argument("--devices", default="host,cuda",
                    help="host and/or cuda (host alone: the plumbing, on a machine without a GPU)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    import torch
    devices = [d for d in args.devices.split(",") if d]
    if "cuda" in devices and not torch.cuda.is_available():
        print("SKIP torch.cuda.is_available() is False (no CUDA device, or a CPU-only torch)")
        return
    import hvd.torch as hvd
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    transport = os.environ.get("HVD_TRANSPORT", "gloo")
    gpu = None
    if "cuda" in devices:
        gpu = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(gpu)
    for nbytes in [parse_size(s) for s in args.sizes.split(",")]:
        n = max(1, nbytes // 4)
        iters = 3 if args.quick else max(5, min(200, (64 << 20) // max(nbytes, 1)))
        rounds = 1 if args.quick else 3
        times = {d: [] for d in devices}
        xs = {d: torch.ones(n, device=gpu if d == "cuda" else "cpu") for d in devices}
        for d in devices:  # warm-up: staging buffer, fusion buffer, response cache
            for _ in range(2):
                hvd.allreduce_(xs[d], op=hvd.Sum, name=f"gpu.{d}.{nbytes}")
        for _ in range(rounds):
            for d in devices:
                hvd.barrier()
                for _ in range(iters):
                    t0 = time.perf_counter()
                    hvd.allreduce_(xs[d], op=hvd.Sum, name=f"gpu.{d}.{nbytes}")
                    times[d].append((time.perf_counter() - t0) * 1e6)
        for d in devices:
            x = xs[d]
            if not torch.isfinite(x.float().sum()):
                raise SystemExit("gpu-coll: result is not finite")
        if rank == 0:
            for d in devices:
                med = statistics.median(times[d])
                pc.emit(dict(kind="gpu_coll", system=f"hvd-{transport}", op="allreduce",
                             device=d, ranks=size, bytes=n * 4, iters=len(times[d]),
                             time_us=round(med, 3), min_us=round(min(times[d]), 3),
                             algbw_gbs=float(f"{n * 4 / (med * 1e3):.6g}")))
    hvd.shutdown()


if __name__ == "__main__":
    main()
