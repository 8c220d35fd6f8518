#!/usr/bin/env python3
"""What one submitted tensor costs, in instructions, by phase: a measure the machine's load
does not move (wall-clock ratios on a loaded 2-core machine spread by ±100 %).

    python3 bench/tensor_cost.py BUILD [BUILD2] [--cells 1000x4,200x4] [--steps 20] [--out FILE]

Runs `hvd-bench fusion --tensors N --tensor-bytes B` as one rank (the built-in local
transport: no peer, so no waiting, only the library's own work) under valgrind's callgrind,
with S and 2·S timed steps, and takes the difference of the instruction counts (Ir): the cost
of S steps with start-up, warm-up and shut-down cancelled out. Per tensor, split by where the
instructions ran (inclusive counts of the entry points):

  submit    hvd_allreduce_async (validation, the request, the handle, the queue)
  cycle     ContextImpl::RunCycle (feed the controllers, negotiate, plan, execute, complete),
            on the caller's thread (HVD_CALLER_CYCLES) or the loop's
    negotiate  ContextImpl::Negotiate (the control bytes, the cache's responses)
    execute    ContextImpl::RunScopes (take, plan, copy, reduce, complete)
  wait      hvd_handle_wait less the cycles it ran
  release   hvd_handle_release
  total     the whole process

Needs valgrind (callgrind_annotate). A cell takes about a minute per build. With two builds
the table has after ÷ before per row. Instructions are not time (cache misses and waits are
not counted), so this measures the per-tensor software path; bench/ab.py measures the steps.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

PHASES = (
    ("submit", r"src/api/op_calls\.cc:hvd_allreduce_async \["),
    ("cycle", r"src/core/loop/loop\.cc:hvd::ContextImpl::RunCycle\(std::unique_lock<std::mutex>&\) \["),
    ("negotiate", r"negotiate\.cc:hvd::ContextImpl::Negotiate\("),
    ("execute", r"src/core/loop/cycle\.cc:hvd::ContextImpl::RunScopes\("),
    ("wait", r"src/api/handle_calls\.cc:hvd_handle_wait \["),
    ("drive", r"src/core/loop/loop\.cc:hvd::ContextImpl::Drive\("),
    ("release", r"src/api/handle_calls\.cc:hvd_handle_release \["),
    ("total", r"PROGRAM TOTALS"),
)
SHOWN = ("submit", "cycle", "negotiate", "execute", "wait", "release", "total")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="+", help="build folders (bin/hvd-bench, lib/); 1 or 2")
    ap.add_argument("--cells", default="1000x4,200x4",
                    help="TENSORSxBYTES, comma separated (1000x4,200x4)")
    ap.add_argument("--steps", type=int, default=20, help="S: runs with S and 2·S steps (20)")
    ap.add_argument("--name-prefix", default=None,
                    help="hvd-bench fusion --name-prefix: tensor names past 15 characters, as a "
                         "frontend's are (\"DistributedOptimizer.<parameter>\")")
    ap.add_argument("--out", help="also write the table to this file")
    return ap.parse_args(argv)


def counts(build, tensors, nbytes, steps, tmp, prefix=None):
    """Inclusive Ir per phase of one run."""
    out = os.path.join(tmp, f"cg.{os.getpid()}.{steps}")
    lib = os.path.join(build, "lib")  # ahead of RUNPATH: a copied build loads its own libhvd
    env = dict(os.environ, HVD_LIBRARY_PATH=lib,
               LD_LIBRARY_PATH=os.pathsep.join(p for p in (lib, os.environ.get("LD_LIBRARY_PATH")) if p))
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
           os.path.join(build, "bin", "hvd-bench"), "fusion", "--tensors", str(tensors),
           "--tensor-bytes", str(nbytes), "--steps", str(steps)]
    if prefix:
        cmd += ["--name-prefix", prefix]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        sys.exit(f"tensor_cost: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
                         capture_output=True, text=True, check=True).stdout
    os.unlink(out)
    got = {}
    for name, pat in PHASES:
        rx = re.compile(pat)
        for line in ann.splitlines():
            if rx.search(line):
                m = re.match(r"\s*([\d,]+)", line)
                if m:
                    got[name] = int(m.group(1).replace(",", ""))
                    break
        got.setdefault(name, 0)
    return got


def per_tensor(build, tensors, nbytes, steps, tmp, prefix=None):
    a = counts(build, tensors, nbytes, steps, tmp, prefix)
    b = counts(build, tensors, nbytes, 2 * steps, tmp, prefix)
    per = {k: (b[k] - a[k]) / steps / tensors for k in a}
    per["wait"] -= per.pop("drive")  # the cycles a wait ran count under cycle
    return per


def main(argv):
    args = parse_args(argv)
    if len(args.builds) > 2:
        sys.exit("tensor_cost: one or two builds")
    builds = [os.path.abspath(b) for b in args.builds]
    cells = []
    for c in args.cells.split(","):
        n, b = c.lower().split("x")
        cells.append((int(n), int(b)))
    lines = []
    head = "| cell | phase | " + " | ".join(f"Ir/tensor ({os.path.basename(os.path.dirname(b)) or b})"
                                            for b in builds)
    head += " | after ÷ before |" if len(builds) == 2 else " |"
    lines.append(head)
    lines.append("|---|---|" + "--:|" * (len(builds) + (1 if len(builds) == 2 else 0)))
    with tempfile.TemporaryDirectory() as tmp:
        for n, nbytes in cells:
            res = [per_tensor(b, n, nbytes, args.steps, tmp, args.name_prefix) for b in builds]
            for ph in SHOWN:
                row = f"| {n} × {nbytes} B | {ph} | " + " | ".join(f"{r[ph]:.0f}" for r in res)
                if len(res) == 2:
                    row += f" | {res[1][ph] / res[0][ph]:.3f}" if res[0][ph] else " | –"
                lines.append(row + " |")
            print("\n".join(lines[-len(SHOWN):]), flush=True)
    table = "\n".join(lines) + "\n"
    print("\n" + table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
