"""Elastic training on one host: `run_all.py --parts elastic`, or alone:

    python3 bench/suite/elastic_bench.py --build-dir build [--np 3] [--repeats 3]

Two measurements, with elastic_worker.py (a small MLP, the same work per step
in every form):

  steady    the step time of hvd's elastic mode (hvdrun --min-np, the loop in
            hvd.elastic.run, a TorchState committed every --commit-every
            steps) against plain hvd (hvdrun -np) on the same ranks; runs
            alternate, --repeats each; the median step time of each run after
            its first 5 steps, then the median over runs.
  recovery  the worker of the highest rank kills itself (SIGKILL) at
            --kill-step; the time from its death to the first step the job
            completes afterwards: hvd elastic (the survivors reset and go on
            with one worker fewer) against torchrun --max-restarts 3 (torch
            restarts every worker, which reload the last checkpoint).

Prints a table and writes the records (JSON lines) to --out when given.
"""

import argparse
import json
import re
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "elastic_worker.py")


def env_for(build):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "bindings", "python") + os.pathsep + env.get("PYTHONPATH", "")
    env["HVD_LIBRARY_PATH"] = os.path.join(build, "lib")
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run(cmd, env, timeout, marker=None):
    """(exit code, output, seconds); exit code None when it ran past timeout (its
    whole process group is then killed, and every process whose command line
    holds marker: no worker is left behind)."""
    t0 = time.time()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        if marker:
            kill_by_cmdline(marker)  # they would keep the output pipe open
        out, _ = p.communicate(timeout=60)
        rc = None
    return rc, out, time.time() - t0


STEP_RE = re.compile(r"STEP (\d+) (\d+) (\d+) (\d+\.\d{6}) (\d+\.\d{6})")
DIE_RE = re.compile(r"DIE (\d+\.\d{6})")


def parse(out):
    """The STEP records and the DIE time; lines of several ranks may interleave."""
    steps = [{"step": int(m.group(1)), "rank": int(m.group(2)), "size": int(m.group(3)),
              "t": float(m.group(4)), "dt": float(m.group(5))} for m in STEP_RE.finditer(out)]
    m = DIE_RE.search(out)
    return steps, (float(m.group(1)) if m else None)


def kill_by_cmdline(marker):
    """SIGKILLs every process whose command line contains marker."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    os.kill(int(pid), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


def save_log(args, name, out):
    if args.logs:
        os.makedirs(args.logs, exist_ok=True)
        with open(os.path.join(args.logs, name + ".log"), "w") as f:
            f.write(out)


def hvdrun(build):
    return os.path.join(build, "bin", "hvdrun")


def steady_cmd(args, elastic):
    n = args.steady_np
    w = [sys.executable, WORKER, "--steps", str(args.steps), "--hidden", str(args.hidden),
         "--commit-every", str(args.commit_every)]
    if elastic:
        return [hvdrun(args.build_dir), "-np", str(n), "--min-np", str(max(1, n - 1)),
                "--max-np", str(n)] + w + ["--framework", "hvd-elastic"]
    return [hvdrun(args.build_dir), "-np", str(n)] + w + ["--framework", "hvd"]


def step_time(steps):
    dts = [s["dt"] for s in steps if s["step"] > 5]
    return statistics.median(dts) if dts else float("nan")


def measure_steady(args, env, records):
    times = {"hvd": [], "hvd-elastic": []}
    for rep in range(args.repeats):
        for elastic in (False, True):
            name = "hvd-elastic" if elastic else "hvd"
            rc, out, wall = run(steady_cmd(args, elastic), env, 600)
            save_log(args, f"steady-{name}-{rep}", out)
            if rc != 0:
                raise SystemExit(f"elastic_bench: {name} failed (exit {rc}):\n{out[-3000:]}")
            steps, _ = parse(out)
            t = step_time(steps)
            times[name].append(t)
            records.append({"kind": "elastic_steady", "framework": name, "np": args.steady_np,
                            "rep": rep, "step_s": t, "wall_s": wall})
    return {k: statistics.median(v) for k, v in times.items()}


def recovery(steps, die, expect_size):
    after = [s for s in steps if s["t"] > die and s["size"] == expect_size]
    if die is None or not after:
        return float("nan")
    return min(s["t"] for s in after) - die


def measure_recovery(args, env, records):
    res = {"hvd-elastic": [], "torchrun": []}
    for rep in range(args.repeats):
        w = ["--steps", str(args.steps), "--hidden", str(args.hidden), "--commit-every",
             str(args.commit_every), "--kill-step", str(args.kill_step)]
        cmd = [hvdrun(args.build_dir), "-np", str(args.np), "--min-np", str(args.np - 1),
               "--max-np", str(args.np), sys.executable, WORKER, "--framework", "hvd-elastic"] + w
        rc, out, wall = run(cmd, env, 300)
        save_log(args, f"recovery-hvd-{rep}", out)
        steps, die = parse(out)
        r = recovery(steps, die, args.np - 1)
        if rc != 0 or r != r:
            raise SystemExit(f"elastic_bench: hvd elastic recovery run failed (exit {rc}):\n{out[-3000:]}")
        res["hvd-elastic"].append(r)
        records.append({"kind": "elastic_recovery", "framework": "hvd-elastic", "np": args.np,
                        "rep": rep, "recovery_s": r, "wall_s": wall})
        tmp = tempfile.mkdtemp(prefix="hvd-elastic-bench-")
        try:
            ck = os.path.join(tmp, "ck.pt")
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node", str(args.np), "--max-restarts", "3", WORKER,
                   "--framework", "torchrun", "--checkpoint", ck] + w
            rc, out, wall = run(cmd, env, args.peer_timeout, marker=tmp)
            save_log(args, f"recovery-torchrun-{rep}", out)
        finally:
            # torchrun starts its workers in sessions of their own: a run that
            # failed may leave them behind, outside the process group.
            kill_by_cmdline(tmp)
            shutil.rmtree(tmp, ignore_errors=True)
        steps, die = parse(out)
        r = recovery(steps, die, args.np)
        if rc != 0 or r != r:
            # Counted, not hidden: a peer run that hangs or fails is a result.
            what = f"ran past {args.peer_timeout} s (killed)" if rc is None else f"exit {rc}"
            print(f"elastic_bench: torchrun recovery run {rep}: {what}; no step after the death",
                  file=sys.stderr)
            res["torchrun_failed"] = res.get("torchrun_failed", 0) + 1
            records.append({"kind": "elastic_recovery", "framework": "torchrun", "np": args.np,
                            "rep": rep, "recovery_s": None, "failed": what, "wall_s": wall})
            continue
        res["torchrun"].append(r)
        records.append({"kind": "elastic_recovery", "framework": "torchrun", "np": args.np,
                        "rep": rep, "recovery_s": r, "wall_s": wall})
    failed = res.pop("torchrun_failed", 0)
    out = {k: (statistics.median(v) if v else float("nan")) for k, v in res.items()}
    out["torchrun_failed"] = failed
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--np", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--commit-every", type=int, default=5)
    ap.add_argument("--kill-step", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--parts", default="steady,recovery")
    ap.add_argument("--peer-timeout", type=float, default=120.0,
                    help="seconds a torchrun run may take (a hang is killed and counted)")
    ap.add_argument("--out", default="")
    ap.add_argument("--logs", default="", help="a folder for every run's output")
    ap.add_argument("--steady-np", type=int, default=2,
                    help="ranks for the steady-state part (one per core is the fair setting)")
    args = ap.parse_args()
    args.build_dir = os.path.abspath(args.build_dir)
    env = env_for(args.build_dir)
    records = []
    parts = args.parts.split(",")
    if "steady" in parts:
        st = measure_steady(args, env, records)
        print(f"steady state, {args.steady_np} ranks, median step time (commit every {args.commit_every} steps):")
        print(f"  hvd {st['hvd'] * 1e3:.2f} ms   hvd elastic {st['hvd-elastic'] * 1e3:.2f} ms   "
              f"ratio {st['hvd-elastic'] / st['hvd']:.3f}")
    if "recovery" in parts:
        rc = measure_recovery(args, env, records)
        print(f"recovery, {args.np} ranks, one killed at step {args.kill_step} (median of {args.repeats}):")
        print(f"  death -> first completed step: hvd elastic {rc['hvd-elastic']:.2f} s   "
              f"torchrun (restart all) {rc['torchrun']:.2f} s "
              f"({rc['torchrun_failed']} of {args.repeats} torchrun runs never recovered)")
    if args.out:
        with open(args.out, "a") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
