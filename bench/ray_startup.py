#!/usr/bin/env python3
"""hvd on Ray against hvdrun, in one run on one machine (docs/ray.md, "Start and step time").

    python3 bench/ray_startup.py [--rounds 3] [--epochs 2] [--out bench/results/DIR/ray.md]

Starts a local Ray (2 CPUs), then per round:
  - start: RayExecutor.start() until every rank's first allreduce is done (ms);
  - step:  the main example's median training step at 2 ranks
           (examples/ray/train_torch_ray.py's train()) under RayExecutor, then
           the same function under `hvdrun -np 2`, alternating.
Prints a Markdown table (median over the rounds and the ratio Ray / hvdrun).
Needs ray, torch, scikit-learn, a built libhvd (HVD_LIBRARY_PATH) and hvdrun
(HVD_HVDRUN, or build/bin/hvdrun).
"""

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "ray", "train_torch_ray.py")
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))


def _example():
    spec = importlib.util.spec_from_file_location("train_torch_ray", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules["train_torch_ray"] = mod  # pickled by value below: it must be registered
    return mod


def _first_allreduce():
    import time as t

    import numpy as np

    import hvd

    hvd.init()
    hvd.allreduce(np.ones(1), name="first")
    done = t.time()
    hvd.shutdown()
    return done


def start_time_ms():
    from hvd.ray import RayExecutor

    ex = RayExecutor(RayExecutor.create_settings(timeout_s=120), num_workers=2)
    t0 = time.time()
    ex.start()
    try:
        done = ex.run(_first_allreduce)
    finally:
        ex.shutdown()
    return (max(done) - t0) * 1e3


def ray_step_ms(mod, epochs):
    from hvd.ray import RayExecutor

    ex = RayExecutor(RayExecutor.create_settings(timeout_s=120), num_workers=2)
    ex.start()
    try:
        results = ex.run(mod.train, kwargs={"epochs": epochs})
    finally:
        ex.shutdown()
    return statistics.median(r[4] for r in results) * 1e3


HVDRUN_BODY = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("m", {example!r})
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
r = m.train(epochs={epochs})
print("RESULT " + json.dumps(r[4]))
"""


def hvdrun_step_ms(epochs):
    hvdrun = os.environ.get("HVD_HVDRUN") or os.path.join(ROOT, "build", "bin", "hvdrun")
    body = HVDRUN_BODY.format(example=EXAMPLE, epochs=epochs)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "bindings", "python"))
    out = subprocess.run([hvdrun, "-np", "2", sys.executable, "-c", body], env=env,
                         capture_output=True, text=True, timeout=600)
    steps = [json.loads(line.split(" ", 1)[1]) for line in out.stdout.splitlines()
             if line.startswith("RESULT ")]
    if out.returncode != 0 or len(steps) != 2:
        raise RuntimeError(f"hvdrun failed ({out.returncode}): {out.stdout[-2000:]}"
                           f"{out.stderr[-2000:]}")
    return statistics.median(steps) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    # A loaded machine starts a raylet in more than Ray's default 30 s.
    os.environ.setdefault("RAY_raylet_start_wait_time_s", "180")
    import ray

    mod = _example()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={
        "env_vars": {k: v for k, v in os.environ.items() if k == "HVD_LIBRARY_PATH"} | {
            "PYTHONPATH": os.path.join(ROOT, "bindings", "python")}})
    ray.cloudpickle.register_pickle_by_value(mod)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    starts, ray_steps, hvdrun_steps = [], [], []
    try:
        for _ in range(args.rounds):
            starts.append(start_time_ms())
            ray_steps.append(ray_step_ms(mod, args.epochs))
            hvdrun_steps.append(hvdrun_step_ms(args.epochs))
    finally:
        ray.shutdown()
    load = os.getloadavg()[0]
    rs, hs = statistics.median(ray_steps), statistics.median(hvdrun_steps)
    table = "\n".join([
        f"hvd on Ray vs hvdrun: {args.rounds} rounds, 2 ranks, {os.cpu_count()} CPUs, "
        f"load average {load:.1f} at the end", "",
        "| what | median | rounds |", "| --- | --- | --- |",
        f"| RayExecutor.start() to the first allreduce | {statistics.median(starts):.0f} ms | "
        f"{', '.join(f'{x:.0f}' for x in starts)} |",
        f"| training step, RayExecutor | {rs:.2f} ms | "
        f"{', '.join(f'{x:.2f}' for x in ray_steps)} |",
        f"| training step, hvdrun | {hs:.2f} ms | {', '.join(f'{x:.2f}' for x in hvdrun_steps)} |",
        f"| step ratio Ray / hvdrun | {rs / hs:.2f} | |"])
    print(table)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
