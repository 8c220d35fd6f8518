#!/usr/bin/env python3
"""Before/after of two hvd builds by the CPU time a collective costs, for machines too
loaded for wall-clock comparisons (bench/ab.py's spread on a shared 2-core machine can
exceed ±100 %, while the CPU a job burns barely moves with the load).

    python3 bench/cpu_ab.py BEFORE_BUILD AFTER_BUILD [--ranks 3,4] [--sizes 64K,1M,16M]
                            [--rounds 2] [--env KEY=VALUE ...] [--after-env KEY=VALUE ...]
                            [--sim-hosts 2,2 ...] [--out DIR]

Each cell runs `hvdrun -np N hvd-bench coll --ops allreduce --sizes S` twice per build and
round, with --iters-scale 1 and 3, and takes the difference of the jobs' CPU time (user +
system of hvdrun and every rank, from getrusage of the children): the CPU of the extra
iterations, with the start-up and shut-down cancelled out. Builds alternate within a round
and swap order each round. --after-env compares one build under two settings (the same folder twice);
--sim-hosts runs each job as hosts of LAYOUT ranks simulated on this machine
(tests/integration/core/launch_sim_hosts.sh: per-rank HVD_HOST_ID, so the hierarchical
collectives run) instead of hvdrun, one cell per layout. Writes DIR/table.md (CPU per cell and build, median over the
rounds, and the median of the per-round after ÷ before) and DIR/results.jsonl.
"""

import argparse
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--ranks", default="3,4")
    ap.add_argument("--sizes", default="64K,1M,16M")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--transport", default="gloo")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--after-env", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting of the after jobs only")
    ap.add_argument("--sim-hosts", action="append", default=[], metavar="LAYOUT",
                    help="ranks per simulated host, e.g. 2,2 (replaces --ranks)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", default=None)
    return ap.parse_args(argv)


def cpu_of(cmd, env, timeout):
    """(CPU seconds of the command and its children, wall seconds); None on failure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.stderr.write(r.stdout.decode("utf-8", "replace")[-2000:])
        return None
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main(argv):
    a = parse_args(argv)
    builds = {"before": os.path.abspath(a.before), "after": os.path.abspath(a.after)}
    out = a.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                datetime.date.today().isoformat() + "-cpu-ab")
    os.makedirs(out, exist_ok=True)
    groups = a.sim_hosts or a.ranks.split(",")
    cells = [(g, s) for g in groups for s in a.sizes.split(",")]
    sim = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
                       "integration", "core", "launch_sim_hosts.sh")
    rows = {c: {"before": [], "after": []} for c in cells}
    records = []
    load = os.getloadavg()
    for rnd in range(a.rounds):
        order = ("before", "after") if rnd % 2 == 0 else ("after", "before")
        for n, size in cells:
            for which in order:
                b = builds[which]
                env = dict(os.environ, HVD_LIBRARY_PATH=os.path.join(b, "lib"),
                           HVD_TRANSPORT=a.transport, OMP_NUM_THREADS="1")
                env.update(kv.partition("=")[::2] for kv in a.env)
                if which == "after":
                    env.update(kv.partition("=")[::2] for kv in a.after_env)
                launch = ([sim, n, str(int(a.timeout))] if a.sim_hosts else
                          [os.path.join(b, "bin", "hvdrun"), "-np", n])
                got = []
                for scale in (1, 3):
                    cmd = launch + [os.path.join(b, "bin", "hvd-bench"), "coll", "--ops",
                                    "allreduce", "--sizes", size, "--iters-scale", str(scale)]
                    got.append(cpu_of(cmd, env, a.timeout))
                if None in got:
                    print(f"cpu_ab: {which} {n} ranks {size} failed", file=sys.stderr)
                    continue
                extra = got[1][0] - got[0][0]
                rows[(n, size)][which].append(extra)
                records.append({"build": which, "round": rnd, "ranks": n, "size": size,
                                "cpu_s": [got[0][0], got[1][0]], "wall_s": [got[0][1], got[1][1]],
                                "extra_cpu_s": extra})
            print(f"cpu_ab: round {rnd + 1}/{a.rounds} {n} ranks {size} done", file=sys.stderr)
    with open(os.path.join(out, "results.jsonl"), "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    lines = ["# CPU before and after (bench/cpu_ab.py)", "",
             f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC, {a.rounds} round(s), "
             f"HVD_TRANSPORT={a.transport}, {' '.join(a.env) or 'no extra settings'}"
             f"{', after only: ' + ' '.join(a.after_env) if a.after_env else ''}"
             f"{', simulated hosts' if a.sim_hosts else ''}, all ranks "
             f"on this host ({os.cpu_count()} CPUs; load average at the start "
             f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}).", "",
             f"- before: `{builds['before']}`", f"- after: `{builds['after']}`", "",
             "CPU: user + system seconds of the whole job (hvdrun and every rank) for the "
             "iterations of `--iters-scale 3` beyond those of `--iters-scale 1`; median over "
             "the rounds. Paired: the median of after ÷ before within each round.", "",
             "| cell | before CPU s | after CPU s | paired after ÷ before | rounds |",
             "|---|--:|--:|--:|--:|"]
    for (n, size), v in rows.items():
        pairs = [x / y for x, y in zip(v["after"], v["before"]) if y > 0]
        med = lambda xs: f"{statistics.median(xs):.3f}" if xs else "–"  # noqa: E731
        where = f"hosts {n}" if a.sim_hosts else f"{n} ranks"
        lines.append(f"| {where}, allreduce {size} | {med(v['before'])} | {med(v['after'])} | "
                     f"{med(pairs)} | {len(pairs)} |")
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
