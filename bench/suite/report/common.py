"""Shared by every section: the series' order and labels, loading and merging the
results, number formats, Markdown tables, and picking series and peers."""

import json
import os


SUITE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bench/suite
ROOT = os.path.dirname(os.path.dirname(SUITE))

# Display order of the series in tables and plots; hvd first.
SERIES_ORDER = ["hvd-gloo", "hvd-gloo-tcp", "hvd-ucx", "hvd-ucx-shm", "hvd-ucx-tcp", "hvd-mpi",
                "hvd-mpi-p2p",
                "hvd-gloo-set",
                "hvd-gloo-halves", "hvd-mpi-set", "gloo:ring", "gloo:ringchunked", "gloo:allreduce", "gloo",
                "mpi:inplace", "mpi:outofplace", "mpi", "mpi-nommap:inplace",
                "mpi-nommap:outofplace", "mpi-nommap", "torch", "horovod", "oneccl",
                "deepspeed-shm", "deepspeed-shm:inference", "deepspeed-shm:all_reduce",
                "ucx_perftest-shm", "ucx_perftest-tcp"]
SERIES_LABEL = {
    "hvd-gloo": "hvd (gloo)",
    "hvd-gloo-tcp": "hvd (gloo, TCP only)",
    "hvd-ucx": "hvd (ucx)",
    "hvd-ucx-shm": "hvd (ucx, UCX's shared memory)",
    "hvd-ucx-tcp": "hvd (ucx, TCP only)",
    "hvd-mpi": "hvd (mpi)",
    "hvd-mpi-p2p": "hvd (mpi, MPI only)",
    "hvd-gloo-set": "hvd (gloo) process set of all ranks",
    "hvd-gloo-halves": "hvd (gloo) two half-size sets at once",
    "hvd-mpi-set": "hvd (mpi) process set of all ranks",
    "gloo:ring": "Gloo AllreduceRing",
    "gloo:ringchunked": "Gloo AllreduceRingChunked",
    "gloo:allreduce": "gloo::allreduce",
    "gloo": "Gloo",
    "mpi:inplace": "MPI in-place",
    "mpi:outofplace": "MPI out-of-place",
    "mpi": "MPI",
    "mpi-nommap:inplace": "MPI no-mmap in-place",
    "mpi-nommap:outofplace": "MPI no-mmap out-of-place",
    "mpi-nommap": "MPI no-mmap",
    "torch": "torch.distributed (gloo)",
    "horovod": "Horovod 0.28.1",
    "oneccl": "oneCCL",
    "deepspeed-shm": "DeepSpeed shm",
    "deepspeed-shm:inference": "DeepSpeed shm",
    "deepspeed-shm:all_reduce": "DeepSpeed all_reduce (gloo)",
    "ucx_perftest-shm": "raw UCX: ucx_perftest tag_lat, shared memory (one way)",
    "ucx_perftest-tcp": "raw UCX: ucx_perftest tag_lat, tcp (one way)",
}
# The CPU peers of the "best of oneCCL/DeepSpeed" target (bench/suite/install_peers.sh).
CPU_PEERS = ("oneccl", "deepspeed-shm", "deepspeed-shm:inference")
HVD_SERIES = ("hvd-gloo", "hvd-gloo-tcp", "hvd-ucx", "hvd-ucx-shm", "hvd-ucx-tcp", "hvd-mpi",
              "hvd-mpi-p2p", "hvd-gloo-set", "hvd-gloo-halves", "hvd-mpi-set")
# A process set against its parent context of the same size (same transport).
SET_PARENT = {"hvd-gloo-set": "hvd-gloo", "hvd-mpi-set": "hvd-mpi"}
# The raw transport each hvd latency series' overhead is taken against. Raw Gloo and MPI run
# the same 4-byte allreduce, so issue 8's limit (cycle time + 50 µs) applies; ucx_perftest
# times a one-way tag-matching ping-pong latency, so that overhead is stated without a limit.
LATENCY_BASE = {"hvd-gloo": "gloo", "hvd-gloo-tcp": "gloo", "hvd-mpi": "mpi", "hvd-mpi-p2p": "mpi",
                "hvd-ucx-shm": "ucx_perftest-shm", "hvd-ucx-tcp": "ucx_perftest-tcp"}
UCX_PERFTEST = ("ucx_perftest-tcp", "ucx_perftest-shm")


MEASURED = {"time_us", "min_us", "iters", "rep", "submit_us", "samples_per_s", "step_ms",
            "data_us", "batches_per_step",  # fusion: the executor's time and batches a step
            "algbw_gbs", "busbw_gbs", "best_gbs", "median_gbs",
            "overall_us",  # ucx_perftest's mean over all iterations
            # many hosts (cluster_bench.py): bytes on the links, images/s, job records
            "net_tx_per_op", "net_rx_per_op", "net_barrier_tx", "net_barrier_rx", "images_per_s",
            "seconds", "host_tx", "host_rx"}


def merge_repeats(recs):
    """One record per measurement: jobs run --repeats times give the median of
    their repetitions, with the range in rep_lo/rep_hi (time_us or step_ms)."""
    groups, order = {}, []
    for r in recs:
        key = json.dumps({k: v for k, v in r.items() if k not in MEASURED}, sort_keys=True)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(r)
    out = []
    for key in order:
        g = groups[key]
        if len(g) == 1:
            out.append(g[0])
            continue
        metric = "step_ms" if "step_ms" in g[0] else "time_us"
        g = sorted(g, key=lambda r: r[metric])
        m = dict(g[(len(g) - 1) // 2])  # the lower median: an actual run
        m["reps"] = len(g)
        m["rep_lo"], m["rep_hi"] = g[0][metric], g[-1][metric]
        mins = [r["min_us"] for r in g if "min_us" in r]
        if mins:  # the fastest iteration of any repetition
            m["min_us"] = min(mins)
        out.append(m)
    return out


def spread(r, fmt):
    """" (lo–hi, n runs)" when the record merges repetitions."""
    if "reps" not in r:
        return ""
    return f" ({fmt(r['rep_lo'])}–{fmt(r['rep_hi'])})"


def load(out):
    recs = []
    path = os.path.join(out, "results.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            recs = merge_repeats([json.loads(line) for line in f if line.strip()])
    meta = {}
    mpath = os.path.join(out, "meta.json")
    if os.path.exists(mpath):
        with open(mpath) as f:
            meta = json.load(f)
    return recs, meta


# ---------------------------------------------------------------------------------------
# Formatting helpers.

def busbw(rec):
    """busbw in GB/s from the unrounded time (older results stored 4 decimals)."""
    if rec.get("time_us", 0) <= 0:
        return 0.0
    n, op = rec["ranks"], rec["op"]
    factor = 1.0
    if n > 1 and op == "allreduce":
        factor = 2.0 * (n - 1) / n
    elif n > 1 and op == "allgather":
        factor = (n - 1) / n
    return rec["bytes"] / (rec["time_us"] * 1e3) * factor


def fmt_bytes(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


def fmt_us(us):
    if us is None:
        return "–"
    if us >= 100000:
        return f"{us / 1000:.0f} ms"
    if us >= 10000:
        return f"{us / 1000:.1f} ms"
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.0f} µs" if us >= 10 else f"{us:.1f} µs"


def fmt_gbs(v):
    if v is None:
        return "–"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 0.1:
        return f"{v:.2f}"
    if v >= 0.001:
        return f"{v:.3f}"
    return f"{v:.1e}" if v > 0 else "0"


def fmt_ratio(r):
    return "–" if r is None else f"{r:.2f}×"


def table(header, rows, align=None):
    align = align or ["---"] + ["--:"] * (len(header) - 1)
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------
# Collectives.

def coll_series(recs, op, ranks):
    """{series: {bytes: record}} for one op and rank count."""
    variants = {}
    for r in recs:
        if r.get("kind") == "coll" and r["op"] == op and r["ranks"] == ranks:
            variants.setdefault(r["system"], set()).add(r["variant"])
    out = {}
    for r in recs:
        if r.get("kind") != "coll" or r["op"] != op or r["ranks"] != ranks:
            continue
        sys_ = r["system"]
        key = sys_ if len(variants[sys_]) == 1 else f"{sys_}:{r['variant']}"
        out.setdefault(key, {})[r["bytes"]] = r
    return out


def ordered(keys):
    keys = list(keys)
    return sorted(keys, key=lambda k: (SERIES_ORDER.index(k) if k in SERIES_ORDER else 99, k))


def best_peer(series, nbytes, allow=None):
    """(key, record) of the fastest non-hvd series at this size."""
    best = None
    for k, by in series.items():
        if k in HVD_SERIES or nbytes not in by:
            continue
        if allow is not None and not allow(k):
            continue
        if best is None or by[nbytes]["time_us"] < best[1]["time_us"]:
            best = (k, by[nbytes])
    return best


def ratio(hvd_rec, peer_rec):
    """hvd busbw / peer busbw (= peer time / hvd time: same bytes)."""
    if hvd_rec is None or peer_rec is None or hvd_rec["time_us"] <= 0:
        return None
    return peer_rec["time_us"] / hvd_rec["time_us"]
