#!/usr/bin/env python3
"""Before/after comparison of two hvd builds with hvd's own benchmark (hvd-bench).

    python3 bench/ab.py BEFORE_BUILD AFTER_BUILD [--rounds 5] [--after-env KEY=VALUE] [--out DIR]

Measures, at 2 and 4 ranks on this host: the 4-byte step (one 4-byte allreduce per step,
back to back), the 64 KiB, 1 MiB, 16 MiB and 64 MiB allreduce, and the 200 × 16 KiB and
1000 × 4 KiB fusion steps. Every round runs each job once with each build, the two builds
one right after the other, and swaps which goes first from round to round, so that a change
in the machine's load lands on both. Writes DIR/table.md (median before, median after,
after ÷ before, and the spread across rounds as the noise), DIR/results.jsonl (every
record, tagged with build and round) and the raw output in DIR/raw/log.txt (ignored by git).
How to read the table: docs/benchmarks.md, "Before and after".
"""

import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from run_all import Runner, bench_records  # noqa: E402  (bench/run_all.py)

BUILDS = ("before", "after")
FUSION = ((200, "16K"), (1000, "4K"))
SIZES = "64K,1M,16M,64M"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before",
                    help="build folder of the code before (bin/hvd-bench, bin/hvdrun, lib/)")
    ap.add_argument("after", help="build folder of the code after")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of every job with each build (5)")
    ap.add_argument("--ranks", default="2,4", help="rank counts, comma separated (2,4)")
    ap.add_argument("--sizes", default=SIZES, help=f"allreduce sizes ({SIZES})")
    ap.add_argument("--transport", default="gloo", help="HVD_TRANSPORT of every job (gloo)")
    ap.add_argument("--iters-scale", type=float, default=1.0,
                    help="multiplies hvd-bench's timed allreduce iterations (1)")
    ap.add_argument("--latency-steps", type=int, default=400, help="timed 4-byte steps (400)")
    ap.add_argument("--fusion-steps", type=int, default=20, help="timed fusion steps (20)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="an extra variable for every job (repeatable)")
    ap.add_argument("--after-env", action="append", default=[], metavar="KEY=VALUE",
                    help="a variable of the after jobs only: one build under two settings "
                         "(the same folder twice; repeatable)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per job (600)")
    ap.add_argument("--parts", default="step,allreduce,fusion",
                    help="which jobs, comma separated (step,allreduce,fusion; also e2e: "
                         "hvd-bench e2e, a ResNet-50-shaped step whose gradients are "
                         "submitted one by one through --e2e-compute-ms of slept compute)")
    ap.add_argument("--e2e-compute-ms", type=float, default=100,
                    help="the e2e step's compute (100)")
    ap.add_argument("--out", help="results folder (bench/results/<date>-ab)")
    return ap.parse_args(argv)


def check_build(path):
    """The build's absolute path, or exits saying what is missing."""
    path = os.path.abspath(path)
    for rel in ("bin/hvd-bench", "bin/hvdrun", "lib/libhvd.so"):
        if not os.path.exists(os.path.join(path, rel)):
            sys.exit(f"ab: {path} has no {rel} (build it: cmake --build {path} --target hvd-bench)")
    return path


def jobs(args):
    """(key, ranks, hvd-bench arguments) of every job, in the table's order."""
    out = []
    parts = set(args.parts.split(","))
    for n in (int(x) for x in args.ranks.split(",")):
        if "step" in parts:
            out.append((f"{n}:step", n,
                        ["latency", "--steps", str(args.latency_steps)]))
        if "allreduce" in parts:
            out.append((f"{n}:allreduce", n,
                        ["coll", "--ops", "allreduce", "--sizes", args.sizes,
                         "--iters-scale", str(args.iters_scale)]))
        for nt, tb in (FUSION if "fusion" in parts else ()):
            out.append((f"{n}:fusion:{nt}x{tb}", n,
                        ["fusion", "--tensors", str(nt), "--tensor-bytes", tb,
                         "--steps", str(args.fusion_steps)]))
        if "e2e" in parts:
            out.append((f"{n}:e2e:{args.e2e_compute_ms:g}", n,
                        ["e2e", "--compute-ms", f"{args.e2e_compute_ms:g}"]))
    return out


def job_env(build, args, which="before"):
    env = dict(os.environ)
    env.pop("HVD_TIMELINE", None)
    env["HVD_LIBRARY_PATH"] = os.path.join(build, "lib")
    # Ahead of the binaries' RUNPATH: a build folder copied elsewhere (a saved "before")
    # still loads its own libhvd.
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (os.path.join(build, "lib"), env.get("LD_LIBRARY_PATH", "")) if p)
    env["HVD_TRANSPORT"] = args.transport
    env.setdefault("OMP_NUM_THREADS", "1")
    for kv in args.env + (args.after_env if which == "after" else []):
        k, _, v = kv.partition("=")
        env[k] = v
    return env


def run_job(build, n, argv, args, log, which="before"):
    """hvd-bench's result records of one job; None when it failed (the log says why)."""
    cmd = [os.path.join(build, "bin", "hvdrun"), "-np", str(n),
           os.path.join(build, "bin", "hvd-bench")] + argv
    log.write(f"\n$ {shlex.join(cmd)}\n")
    log.flush()
    Runner.settle()  # as run_all.py: the last job's stragglers out of this one's timings
    t0 = time.time()
    try:
        r = subprocess.run(cmd, env=job_env(build, args, which), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=args.timeout,
                           stdin=subprocess.DEVNULL)
        out, rc = r.stdout, r.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc = "timeout"
    log.write(out + f"\n[exit {rc}, {time.time() - t0:.1f} s]\n")
    log.flush()
    if rc != 0:
        print(f"ab: FAILED ({rc}): {shlex.join(cmd)}", file=sys.stderr)
        return None
    return bench_records(out)


def cell_key(job_key, rec):
    """The table row a record belongs to: allreduce jobs give one row per size."""
    if rec.get("kind") == "coll":
        return f"{job_key}:{rec['bytes']}"
    return job_key


def measure(args, builds, log, records):
    """Runs every job args.rounds times per build, alternating; {row: {build: [µs]}} and
    the number of jobs that failed."""
    times, failed = {}, 0
    for rnd in range(args.rounds):
        order = BUILDS if rnd % 2 == 0 else BUILDS[::-1]
        for key, n, argv in jobs(args):
            for which in order:
                recs = run_job(builds[which], n, argv, args, log, which)
                failed += recs is None
                for rec in recs or []:
                    rec.update(build=which, round=rnd)
                    records.append(rec)
                    row = times.setdefault(cell_key(key, rec), {b: [] for b in BUILDS})
                    row[which].append(rec["time_us"])
            print(f"ab: round {rnd + 1}/{args.rounds} {key} done", file=sys.stderr)
    return times, failed


def row_label(key):
    """'2:allreduce:65536' -> '2 ranks, allreduce 64 KiB'."""
    parts = key.split(":")
    n = parts[0]
    if parts[1] == "step":
        return f"{n} ranks, 4-byte step"
    if parts[1] == "fusion":
        nt, tb = parts[2].split("x")
        return f"{n} ranks, fusion {nt} × {tb[:-1]} {tb[-1]}iB"
    if parts[1] == "e2e":
        return f"{n} ranks, ResNet-50-shaped step, {parts[2]} ms compute"
    b = int(parts[2])
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{n} ranks, allreduce {b >> shift} {unit}"
    return f"{n} ranks, allreduce {b} B"


def noise(values):
    """The spread of one build's rounds: (max − min) ÷ median; 0 with one round."""
    if len(values) < 2:
        return 0.0
    return (max(values) - min(values)) / statistics.median(values)


def fmt_us(us):
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} µs"


def paired(before, after):
    """Each round runs both builds back to back, so their ratio within a round cancels
    what the machine was doing at the time: the median and quartiles of those ratios."""
    if len(before) != len(after) or len(before) < 2:
        return "–"
    q = statistics.quantiles([a / b for a, b in zip(after, before)], n=4)
    return f"{q[1]:.3f} ({q[0]:.3f}–{q[2]:.3f})"


def table_rows(times):
    """One Markdown row per measured cell, in the jobs' order."""
    rows = []
    for key, t in times.items():
        if not t["before"] or not t["after"]:
            rows.append(f"| {row_label(key)} | – | – | – | – | – | failed in one build |")
            continue
        mb, ma = statistics.median(t["before"]), statistics.median(t["after"])
        r = ma / mb
        nz = max(noise(t["before"]), noise(t["after"]))
        if min(len(t["before"]), len(t["after"])) < 2:  # one round: no spread to judge by
            verdict = spread = "–"
        else:
            verdict = "yes" if abs(r - 1) <= nz else "**no**"
            spread = f"±{nz * 100:.0f} %"
        rows.append(f"| {row_label(key)} | {fmt_us(mb)} | {fmt_us(ma)} | {r:.3f} | "
                    f"{paired(t['before'], t['after'])} | {spread} | {verdict} |")
    return rows


def write_table(path, args, builds, times, started):
    lines = [
        "# Before and after (bench/ab.py)\n",
        f"{started:%Y-%m-%d %H:%M} UTC, {args.rounds} round(s), builds alternating, "
        f"HVD_TRANSPORT={args.transport}, all ranks on this host ({os.cpu_count()} CPUs; load "
        f"average at the start {load_average()}).\n",
        f"- before: `{builds['before']}`\n- after: `{builds['after']}`\n",
        "Times: hvd-bench's median iteration (allreduce), median step (fusion) or the slower "
        "rank's median step (4-byte step), then the median over the rounds. Noise: the larger "
        "of the two builds' spread over the rounds, (max − min) ÷ median. Within noise: "
        "|after ÷ before − 1| ≤ noise (– with one round). Paired: the median (and quartiles) "
        "of after ÷ before within each round, which cancels the machine's state at the time.\n",
        "| cell | before (median) | after (median) | after ÷ before | paired | noise | "
        "within noise |",
        "|---|--:|--:|--:|--:|--:|---|",
    ] + table_rows(times)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def main(argv):
    args = parse_args(argv)
    builds = {"before": check_build(args.before), "after": check_build(args.after)}
    started = datetime.datetime.now(datetime.timezone.utc)
    out = args.out or os.path.join(ROOT, "bench", "results", f"{started:%Y-%m-%d}-ab")
    os.makedirs(os.path.join(out, "raw"), exist_ok=True)
    records = []
    with open(os.path.join(out, "raw", "log.txt"), "w") as log:
        times, failed = measure(args, builds, log, records)
    with open(os.path.join(out, "results.jsonl"), "w") as f:
        for r in records:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    write_table(os.path.join(out, "table.md"), args, builds, times, started)
    with open(os.path.join(out, "table.md")) as f:
        sys.stdout.write(f.read())
    if failed:
        print(f"ab: {failed} job(s) failed; raw/log.txt has their output", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
