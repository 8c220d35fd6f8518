"""Worker of test_mp_reproducible.py: random reductions whose every bit must
equal the canonical order (docs/reproducibility.md), computed here in numpy.

    reproducible.py SEED

Every rank draws the same list of operations from SEED (allreduce with SUM,
AVERAGE and pre/post scaling, grouped allreduce, reducescatter; float16,
bfloat16, float32, float64; 1 element to 4 MiB, odd sizes included), and
every rank's data from (SEED, operation, rank), so each rank can compute the
reference: the left fold s0 + s1 + ... + s(size-1) in rank order, the narrow
types rounded after every addition, each contribution prescaled first and
the result postscaled (AVERAGE: by postscale / size) last, every scaling in
float32 for the narrow types and float32 (float64 in float64). Each rank
submits the operations asynchronously in an order of its own, with short
random pauses, so fusion batches differ from rank to rank and run to run.
Records {check: null | error} per operation and the job's settings."""

import os
import sys
import time

import numpy as np

try:
    from common import run_checks  # run as a script (this folder first on sys.path)
except ImportError:
    from workers.common import run_checks

try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:
    BF16 = None

DTYPES = [np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)] + \
    ([BF16] if BF16 is not None else [])
MAX_BYTES = 4 << 20


def narrow(dt):
    return dt.itemsize == 2


def data(seed, op_index, rank, dtype, n):
    """Magnitudes over 7 decades, both signs."""
    g = np.random.default_rng([seed, op_index, rank])
    v = np.power(10.0, g.uniform(-3, 4, n)) * np.where(g.random(n) < 0.5, -1.0, 1.0)
    return v.astype(dtype)


def scale(x, f):
    """hvd's scaling: float64 in double; the others by the factor rounded to
    float32, in float32, rounded back. A factor of exactly 1 is no scaling."""
    if f == 1.0:
        return x
    if x.dtype == np.float64:
        return x * np.float64(f)
    return (x.astype(np.float32) * np.float32(f)).astype(x.dtype)


def fold(parts):
    """The canonical order: ((s0 + s1) + s2) + ..., each sum in the dtype
    (the narrow types added in float32 and rounded once)."""
    acc = parts[0].copy()
    for p in parts[1:]:
        if narrow(acc.dtype):
            acc = (acc.astype(np.float32) + p.astype(np.float32)).astype(acc.dtype)
        else:
            acc = acc + p
    return acc


def draw_ops(seed, size):
    g = np.random.default_rng(seed)
    ops = []
    for i in range(int(g.integers(10, 16))):
        dt = DTYPES[int(g.integers(len(DTYPES)))]
        # Log-uniform byte sizes; a few large ones, most below 64 KiB.
        n = max(1, int(2 ** g.uniform(0, np.log2(MAX_BYTES // dt.itemsize))))
        if i % 3 != 0:
            n = min(n, (64 << 10) // dt.itemsize + int(g.integers(0, 7)))
        kind = ["allreduce", "allreduce", "average", "scaled", "grouped", "reducescatter"][
            int(g.integers(6))]
        spec = {"i": i, "dtype": dt, "n": n, "kind": kind, "pre": 1.0, "post": 1.0}
        if kind == "scaled":
            spec["pre"], spec["post"] = float(g.choice([0.5, 0.3, 3.0])), float(
                g.choice([0.25, 1.7, 1.0 / 3.0]))
        if kind == "grouped":
            spec["n"] = [max(1, n // k) + k for k in range(1, int(g.integers(2, 5)))]
        if kind == "reducescatter":
            spec["n"] = max(n, size) + int(g.integers(0, size))
        ops.append(spec)
    return ops


def reference(seed, spec, size, rank, n, k=0):
    """This rank's expected result for tensor k of the operation."""
    idx = spec["i"] * 8 + k
    parts = [scale(data(seed, idx, r, spec["dtype"], n), spec["pre"]) for r in range(size)]
    post = spec["post"] / size if spec["kind"] == "average" else spec["post"]
    return scale(fold(parts), post)


def submit(hvd, seed, spec, size, rank):
    dt, i = spec["dtype"], spec["i"]
    op = hvd.Average if spec["kind"] == "average" else hvd.Sum
    kw = {"op": op, "prescale_factor": spec["pre"], "postscale_factor": spec["post"]}
    if spec["kind"] == "grouped":
        xs = [data(seed, i * 8 + k, rank, dt, m) for k, m in enumerate(spec["n"])]
        return hvd.grouped_allreduce_async(xs, name=f"op{i}", **kw)
    x = data(seed, i * 8, rank, dt, spec["n"])
    if spec["kind"] == "reducescatter":
        return hvd.reducescatter_async(x, name=f"op{i}", **kw)
    return hvd.allreduce_async(x, name=f"op{i}", **kw)


def compare(got, want, what):
    gb = np.ascontiguousarray(got).view(np.uint8)
    wb = np.ascontiguousarray(want).view(np.uint8)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    if not np.array_equal(gb, wb):
        es = want.dtype.itemsize
        diff = np.flatnonzero((gb.reshape(-1, es) != wb.reshape(-1, es)).any(axis=1))
        j = int(diff[0])
        raise AssertionError(f"{what}: {len(diff)} of {want.size} elements differ from the "
                             f"rank-ordered fold, first at {j}: {got.flat[j]!r} vs {want.flat[j]!r}")


def simulate_hosts(layout):
    """HVD_TEST_LAYOUT=H,L: this rank counts as on host rank // L of H (consecutive
    ranks per host), so the hierarchical collectives run (the wire between the
    hosts is loopback), as tests/integration/core/launch_sim_hosts.sh does."""
    hosts, per = (int(x) for x in layout.split(","))
    rank = int(os.environ["HVD_RANK"])
    os.environ.update({"HVD_HOST_ID": f"sim-host-{rank // per}",
                       "HVD_HOSTNAME": f"sim-host-{rank // per}",
                       "HVD_LOCAL_RANK": str(rank % per), "HVD_LOCAL_SIZE": str(per),
                       "HVD_CROSS_RANK": str(rank // per), "HVD_CROSS_SIZE": str(hosts)})


def main():
    import hvd
    seed = int(sys.argv[1])
    if os.environ.get("HVD_TEST_LAYOUT"):
        simulate_hosts(os.environ["HVD_TEST_LAYOUT"])
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    ops = draw_ops(seed, size)
    order = np.random.default_rng([seed, 1000 + rank]).permutation(len(ops))
    pause = np.random.default_rng([seed, 2000 + rank])
    handles = {}
    for j in order:
        handles[int(j)] = submit(hvd, seed, ops[int(j)], size, rank)
        if pause.random() < 0.3:
            time.sleep(pause.uniform(0, 0.004))
    results = {int(j): h.wait() for j, h in handles.items()}
    checks = []
    for spec in ops:
        def check(spec=spec):
            got = results[spec["i"]]
            what = f"op{spec['i']} {spec['kind']} {spec['dtype']} n={spec['n']}"
            if spec["kind"] == "grouped":
                for k, m in enumerate(spec["n"]):
                    compare(got[k], reference(seed, spec, size, rank, m, k), f"{what}[{k}]")
            elif spec["kind"] == "reducescatter":
                n = spec["n"]
                rows = [n // size + (1 if r < n % size else 0) for r in range(size)]
                start = sum(rows[:rank])
                want = reference(seed, spec, size, rank, n)[start:start + rows[rank]]
                compare(got, want, what)
            else:
                compare(got, reference(seed, spec, size, rank, spec["n"]), what)
        checks.append((f"op{spec['i']}", check))
    info = {"size": size, "transport": os.environ.get("HVD_TRANSPORT", "")}
    run_checks(checks, rank, extra={"info": info})
    hvd.shutdown()


if __name__ == "__main__":
    main()
