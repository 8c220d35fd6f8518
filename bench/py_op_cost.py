#!/usr/bin/env python3
"""What one tensor costs from Python: a training step's per-parameter path
(`allreduce_async_` of each gradient, then `synchronize` of each handle), in µs a tensor,
through each frontend and through the C API called directly with ctypes (the floor a Python
caller cannot go under without a compiled extension).

    python3 bench/py_op_cost.py [PKG [PKG2]] [--build DIR] [--ranks 1,2] [--tensors 200]
                                [--bytes 4096] [--steps 10] [--rounds 7] [--repeats 3]
                                [--frontends raw,numpy,torch,optimizer] [--gap-us G]
                                [--horovod-cycle-ms MS] [--out FILE]

PKG is a folder holding the `hvd` package (default: bindings/python of this tree); with two,
the table has PKG2 ÷ PKG per row (the same library under both, or `--build BUILD,BUILD2`: each
package with its own), and the jobs of the two alternate so the machine's state falls on both alike. A job is one `hvdrun -np R`
(or one process for R = 1) that runs `--rounds` rounds of `--steps` steps; a step submits
`--tensors` float32 tensors of `--bytes` bytes each, named as `DistributedOptimizer` names
them, and waits for every handle. A job reports its best round (the slowest rank's), per
tensor; the table has the median over `--repeats` jobs, split into the submit loop and the
wait loop.

  raw        hvd_allreduce_async / hvd_handle_wait / hvd_handle_release through ctypes, with
             descriptors built once: the C API's cost plus ctypes' per call
  numpy      hvd.allreduce_async_ + hvd.synchronize on numpy arrays
  torch      hvd.torch.allreduce_async_ + hvd.torch.synchronize on torch tensors
  optimizer  hvd.torch.DistributedOptimizer: the backward with its hooks (each submits its
             parameter's allreduce) and step() (waits for them), on `--tensors` parameters
             of `--bytes` bytes; the submit column is less the same backward and step with
             plain torch.optim.SGD (the best of as many), so it holds hvd's part
  horovod-torch, horovod-optimizer
             the torch and optimizer paths through Horovod itself (`import horovod.torch`
             must work: bench/suite/build_horovod.sh, then PYTHONPATH), run under `mpirun`
             (its MPI controller) at R > 1, at the cycle time `--horovod-cycle-ms` (1, its
             default); the peer of the two rows above, the same calls in the same job order.
             With two PKGs it runs in both columns alike (PKG is not on its path): the ratio
             of its two columns is the machine's drift
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FRONTENDS = ("raw", "numpy", "torch", "optimizer", "horovod-torch", "horovod-optimizer")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pkgs", nargs="*", help="folders holding the hvd package (1 or 2)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"),
                    help="build folder: lib/libhvd.so, bin/hvdrun (./build); with two PKGs "
                         "BUILD,BUILD2 runs each under its own")
    ap.add_argument("--ranks", default="1,2", help="comma separated (1,2)")
    ap.add_argument("--tensors", type=int, default=200)
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--frontends", default=",".join(FRONTENDS))
    ap.add_argument("--gap-us", type=float, default=0,
                    help="raw, numpy, torch: spin this long before each submit (a backward "
                         "pass's compute between two gradients; not counted in submit)")
    ap.add_argument("--horovod-cycle-ms", default="1",
                    help="HOROVOD_CYCLE_TIME of the horovod-* rows (1)")
    ap.add_argument("--out", help="also write the table (markdown) to this file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


# ---------------------------------------------------------------------------
# The worker: one process of a job.
# ---------------------------------------------------------------------------


def _names(n):
    return [f"DistributedOptimizer.module.layer{i % 4}.{i // 4}.weight" for i in range(n)]


def _timed(step_submit, step_wait, a):
    """(best round's submit µs, wait µs) per tensor over a's rounds of a's steps."""
    best = None
    for _ in range(a.rounds + 1):  # the first round warms the caches
        ts = tw = 0.0
        for _ in range(a.steps):
            t0 = time.perf_counter()
            pending = step_submit()
            t1 = time.perf_counter()
            step_wait(pending)
            t2 = time.perf_counter()
            ts += t1 - t0
            tw += t2 - t1
        per = (ts * 1e6 / (a.steps * a.tensors), tw * 1e6 / (a.steps * a.tensors))
        if best is None:
            best = (float("inf"), float("inf"))  # drop the warm-up round
        elif sum(per) < sum(best):
            best = per
    return best


def _spin(seconds):
    """Busy for `seconds` (a backward's compute: the CPU stays busy, not idle)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _raw_step(a, names):
    import ctypes

    import numpy as np

    from hvd import _c_api as C

    lib = C.lib()
    xs = [np.ones(a.bytes // 4, np.float32) for _ in range(a.tensors)]
    shape = (ctypes.c_int64 * 1)(a.bytes // 4)
    descs = [C.HvdTensor(x.ctypes.data, C.HVD_FLOAT32, 1,
                         ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)), C.HVD_DEVICE_CPU,
                         None) for x in xs]
    drefs = [ctypes.byref(d) for d in descs]
    outs = [ctypes.c_void_p(x.ctypes.data) for x in xs]
    handles = [ctypes.c_void_p() for _ in xs]
    hrefs = [ctypes.byref(h) for h in handles]
    bnames = [n.encode() for n in names]
    submit, wait, release = lib.hvd_allreduce_async, lib.hvd_handle_wait, lib.hvd_handle_release

    gap = a.gap_us * 1e-6

    def step_submit(keep=(xs, shape, descs)):  # the memory the descriptors point at
        for i in range(a.tensors):
            if gap:
                _spin(gap)
            if submit(None, bnames[i], drefs[i], outs[i], C.HVD_SUM, 1.0, 1.0, hrefs[i]):
                raise RuntimeError(C.last_error())
        return handles

    def step_wait(hs):
        for h in hs:
            if wait(h, -1.0):
                raise RuntimeError(C.last_error())
            release(h)

    return step_submit, step_wait


def _frontend_step(a, names, which):
    if which == "numpy":
        import numpy as np

        import hvd as h
        xs = [np.ones(a.bytes // 4, np.float32) for _ in range(a.tensors)]
    elif which == "horovod-torch":
        import torch

        import horovod.torch as h
        xs = [torch.ones(a.bytes // 4) for _ in range(a.tensors)]
    else:
        import torch

        import hvd.torch as h
        xs = [torch.ones(a.bytes // 4) for _ in range(a.tensors)]
    ar, sync, op = h.allreduce_async_, h.synchronize, h.Sum

    gap = a.gap_us * 1e-6

    def step_submit():
        if not gap:
            return [ar(x, name=n, op=op) for x, n in zip(xs, names)]
        hs = []
        for x, n in zip(xs, names):
            _spin(gap)
            hs.append(ar(x, name=n, op=op))
        return hs

    def step_wait(hs):
        for handle in hs:
            sync(handle)

    return step_submit, step_wait


def _optimizer_step(a, h):
    import torch

    n = a.bytes // 4

    def model():
        return [torch.nn.Parameter(torch.ones(n)) for _ in range(a.tensors)]

    def backward(params):
        sum((p * 1.0).sum() for p in params).backward()

    params, plain_params = model(), model()
    opt = h.DistributedOptimizer(torch.optim.SGD(params, lr=0.0),
                                 named_parameters=[(f"p{i}", p) for i, p in enumerate(params)],
                                 op=h.Sum)
    plain = torch.optim.SGD(plain_params, lr=0.0)

    def plain_step():
        """The same backward and step without hvd, in seconds."""
        t0 = time.perf_counter()
        plain.zero_grad()
        backward(plain_params)
        plain.step()
        return time.perf_counter() - t0

    def step_submit():
        opt.zero_grad()
        backward(params)  # each parameter's hook submits its allreduce
        return None

    def step_wait(_):
        opt.step()  # waits for every handle, then steps

    return step_submit, step_wait, plain_step


def worker(a):
    which = a.worker
    if which in ("raw", "numpy"):
        import hvd
        hvd.init()
        rank, size, shutdown = hvd.rank(), hvd.size(), hvd.shutdown
    else:
        if which.startswith("horovod-"):
            import horovod.torch as ht
        else:
            import hvd.torch as ht
        ht.init()
        rank, size, shutdown = ht.rank(), ht.size(), ht.shutdown
    names = _names(a.tensors)
    backward_s = 0.0
    if which == "raw":
        step_submit, step_wait = _raw_step(a, names)
    elif which in ("optimizer", "horovod-optimizer"):
        step_submit, step_wait, plain_step = _optimizer_step(a, ht)
        backward_s = min(plain_step() for _ in range(a.rounds * a.steps + 1))
    else:
        step_submit, step_wait = _frontend_step(a, names, which)
    submit_us, wait_us = _timed(step_submit, step_wait, a)
    if which.endswith("optimizer"):  # less the same step without hvd, per tensor
        submit_us = max(0.0, submit_us - backward_s * 1e6 / a.tensors)
    elif a.gap_us:  # less the spinning
        submit_us = max(0.0, submit_us - a.gap_us)
    print("PYOP " + json.dumps(dict(rank=rank, size=size, submit_us=submit_us, wait_us=wait_us)),
          flush=True)
    shutdown()


# ---------------------------------------------------------------------------
# The driver.
# ---------------------------------------------------------------------------


def run_job(a, pkg, build, frontend, ranks):
    env = dict(os.environ)
    lib = os.path.join(os.path.abspath(build), "lib")
    env["HVD_LIBRARY_PATH"] = lib
    env["LD_LIBRARY_PATH"] = lib + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    env["PYTHONPATH"] = os.path.abspath(pkg) + os.pathsep + env.get("PYTHONPATH", "")
    me = [sys.executable, os.path.abspath(__file__), "--worker", frontend,
          "--tensors", str(a.tensors), "--bytes", str(a.bytes), "--steps", str(a.steps),
          "--rounds", str(a.rounds), "--gap-us", str(a.gap_us)]
    if frontend.startswith("horovod-"):
        # Horovod's own package from the caller's PYTHONPATH, not PKG's hvd.
        env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
        env["HOROVOD_CYCLE_TIME"] = a.horovod_cycle_ms
        env["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "1")
        cmd = me
        if ranks > 1:
            cmd = (["mpirun"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
                   + ["--oversubscribe", "--bind-to", "none", "-np", str(ranks)]
                   + [x for k in ("PYTHONPATH", "HOROVOD_CYCLE_TIME", "OMP_NUM_THREADS")
                      for x in ("-x", k)] + me)
    elif ranks > 1:
        cmd = [os.path.join(build, "bin", "hvdrun"), "-np", str(ranks), "-x", "PYTHONPATH",
               "-x", "HVD_LIBRARY_PATH", "-x", "LD_LIBRARY_PATH"] + me
    else:
        cmd = me
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    # mpirun may join two ranks' lines: each record is one JSON object after "PYOP ".
    rows = [json.loads(m) for m in re.findall(r"PYOP (\{[^}]*\})", p.stdout)]
    if p.returncode != 0 or len(rows) != ranks:
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-4000:])
        raise SystemExit(f"py_op_cost: {frontend} at {ranks} ranks with {pkg} failed "
                         f"(exit {p.returncode})")
    # The slowest rank's step is the step.
    worst = max(rows, key=lambda r: r["submit_us"] + r["wait_us"])
    return worst["submit_us"], worst["wait_us"]


def main(argv):
    a = parse_args(argv)
    if a.worker:
        return worker(a)
    pkgs = a.pkgs or [os.path.join(ROOT, "bindings", "python")]
    if len(pkgs) > 2:
        raise SystemExit("py_op_cost: give one or two package folders")
    builds = a.build.split(",")
    if len(builds) == 1:
        builds = builds * len(pkgs)
    if len(builds) != len(pkgs):
        raise SystemExit("py_op_cost: --build: one folder, or one per package folder")
    build_of = dict(zip(pkgs, builds))
    frontends = [f for f in a.frontends.split(",") if f]
    for f in frontends:
        if f not in FRONTENDS:
            raise SystemExit(f"py_op_cost: unknown frontend {f!r} (known: {', '.join(FRONTENDS)})")
    ranks_list = [int(r) for r in a.ranks.split(",") if r]
    res = {}
    for ranks in ranks_list:
        for f in frontends:
            for rep in range(a.repeats):
                order = pkgs if rep % 2 == 0 else pkgs[::-1]
                for pkg in order:
                    res.setdefault((ranks, f, pkg), []).append(
                        run_job(a, pkg, build_of[pkg], f, ranks))
                    s, w = res[(ranks, f, pkg)][-1]
                    print(f"# {ranks} ranks {f:9s} {pkg}: submit {s:.2f} wait {w:.2f} µs/tensor",
                          file=sys.stderr, flush=True)
    lines = [f"Per tensor from Python, µs (median of {a.repeats} jobs, each its best of "
             f"{a.rounds} rounds of {a.steps} steps of {a.tensors} × {a.bytes} B"
             + (f", {a.gap_us:g} µs of spinning before each submit" if a.gap_us else "") + "); "
             + "; ".join(f"{p} with {os.path.abspath(b)}" for p, b in build_of.items()), ""]
    head = "| ranks | path |"
    rule = "|--:|---|"
    for i, pkg in enumerate(pkgs):
        tag = "" if len(pkgs) == 1 else (" (before)" if i == 0 else " (after)")
        head += f" submit{tag} | wait{tag} | total{tag} |"
        rule += "--:|--:|--:|"
    if len(pkgs) == 2:
        head += " after ÷ before | paired (quartiles) |"
        rule += "--:|--:|"
    lines += [head, rule]
    for ranks in ranks_list:
        for f in frontends:
            row = f"| {ranks} | {f} |"
            totals = []
            for pkg in pkgs:
                vals = res[(ranks, f, pkg)]
                s = statistics.median(v[0] for v in vals)
                w = statistics.median(v[1] for v in vals)
                t = statistics.median(v[0] + v[1] for v in vals)
                totals.append(t)
                row += f" {s:.2f} | {w:.2f} | {t:.2f} |"
            if len(pkgs) == 2:
                # Each repeat ran both back to back: their ratio cancels the machine's
                # state at the time (it moves whole jobs by ±50 % here).
                b, f2 = res[(ranks, f, pkgs[0])], res[(ranks, f, pkgs[1])]
                ratios = sorted((x[0] + x[1]) / (y0[0] + y0[1]) for x, y0 in zip(f2, b))
                q = (statistics.quantiles(ratios, n=4) if len(ratios) > 1
                     else [ratios[0]] * 3)
                row += f" {totals[1] / totals[0]:.2f} | {q[1]:.2f} ({q[0]:.2f}–{q[2]:.2f}) |"
            lines.append(row)
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
