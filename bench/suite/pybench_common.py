"""Shared pieces of the suite's Python programs: the same size list, iteration
schedule, metrics and result lines as bench_common.h (keep the two in step)."""

import json
import os
import statistics
import sys
import time

UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_bytes(s):
    s = s.strip()
    if s and s[-1].lower() in UNITS:
        return int(float(s[:-1]) * UNITS[s[-1].lower()])
    return int(float(s))


def parse_sizes(spec):
    """"4,64K,1M", or "4:256M" (powers of 4), or "4:256M:2" (powers of 2)."""
    if ":" in spec:
        parts = spec.split(":")
        lo, hi = parse_bytes(parts[0]), parse_bytes(parts[1])
        step = parse_bytes(parts[2]) if len(parts) > 2 else 4
        out, s = [], lo
        while s <= hi:
            out.append(s)
            s *= step
        return out
    return [parse_bytes(x) for x in spec.split(",") if x]


def schedule(nbytes, quick, scale=1.0):
    """(warm-up, timed iterations); mirrors hvdbench::ScheduleFor."""
    if quick:
        return 1, 1
    if nbytes <= 64 << 10:
        w, k = 5, 50
    elif nbytes <= 1 << 20:
        w, k = 3, 20
    elif nbytes <= 16 << 20:
        w, k = 2, 7
    elif nbytes <= 64 << 20:
        w, k = 1, 5
    else:
        w, k = 1, 3
    return w, max(1, int(k * scale + 0.5))


def bus_factor(op, n):
    if n <= 1:
        return 1.0
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op in ("allgather", "reducescatter"):
        return (n - 1) / n
    return 1.0


def now_us():
    return time.perf_counter() * 1e6


def emit(obj):
    sys.stdout.write("BENCH " + json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def emit_coll(system, op, variant, ranks, nbytes, times_us, **extra):
    med = statistics.median(times_us) if times_us else 0.0
    algbw = nbytes / (med * 1e3) if med > 0 else 0.0
    emit(dict(kind="coll", system=system, op=op, variant=variant, ranks=ranks, bytes=nbytes,
              iters=len(times_us), time_us=round(med, 3), min_us=round(min(times_us), 3),
              algbw_gbs=float(f"{algbw:.6g}"), busbw_gbs=float(f"{algbw * bus_factor(op, ranks):.6g}"),
              **extra))


def emit_step(kind, system, variant, ranks, tensors, tensor_bytes, times_us, **extra):
    emit(dict(kind=kind, system=system, variant=variant, ranks=ranks, tensors=tensors,
              tensor_bytes=tensor_bytes, iters=len(times_us),
              time_us=round(statistics.median(times_us), 3), min_us=round(min(times_us), 3),
              **extra))


def launcher_rank():
    """(rank, size, local_size) from hvdrun, mpirun or torchrun variables."""
    env = os.environ
    for r, n, ln in (("HVD_RANK", "HVD_SIZE", "HVD_LOCAL_SIZE"),
                     ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                      "OMPI_COMM_WORLD_LOCAL_SIZE"),
                     ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")):
        if r in env and n in env:
            return int(env[r]), int(env[n]), int(env.get(ln, env[n]))
    return 0, 1, 1


def launcher_local_rank():
    """This process's index on its host, from the same launchers as launcher_rank."""
    for name in ("HVD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK"):
        if name in os.environ:
            return int(os.environ[name])
    return 0


def read_netdev(dev):
    """(rx, tx) bytes of interface dev in /proc/net/dev (this process's network namespace)."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, colon, vals = line.partition(":")
            if colon and name.strip() == dev:
                v = vals.split()
                return float(v[0]), float(v[8])
    raise SystemExit(f"--netdev: no interface {dev!r} in /proc/net/dev")


class NetCounter:
    """--netdev IF, as hvd_bench.cc's NetCounter (the same result fields): each host's local
    rank 0 reads IF's counters around the timed loop, then around as many barriers alone; the
    counts are summed over the hosts. barrier() and sum_(list) -> list are the system's own."""

    def __init__(self, dev, barrier, sum_):
        self.dev, self.barrier, self.sum_ = dev, barrier, sum_
        self.reader = bool(dev) and launcher_local_rank() == 0
        self.a0 = self._read()  # also fails early on a wrong name

    def _read(self):
        return read_netdev(self.dev) if self.reader else (0.0, 0.0)

    def start(self):
        if self.dev:
            self.barrier()
            self.a0 = self._read()

    def stop(self, ops):
        """The result fields ({} when off) after a loop of ops iterations. Collective."""
        if not self.dev:
            return {}
        self.barrier()
        a1 = self._read()
        self.barrier()
        b0 = self._read()
        for _ in range(ops):
            self.barrier()
        self.barrier()
        b1 = self._read()
        v = self.sum_([a1[1] - self.a0[1], a1[0] - self.a0[0], b1[1] - b0[1], b1[0] - b0[0],
                       1.0 if self.reader else 0.0])
        n = max(1, ops)
        return dict(net_dev=self.dev, net_hosts=round(v[4]), net_tx_per_op=round(v[0] / n, 1),
                    net_rx_per_op=round(v[1] / n, 1), net_barrier_tx=round(v[2] / n, 1),
                    net_barrier_rx=round(v[3] / n, 1))
