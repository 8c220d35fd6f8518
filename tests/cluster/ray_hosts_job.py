"""The driver of test_ray_cluster.sh: hvd.ray's RayExecutor on a Ray cluster
whose head runs on hvd-h1 and whose worker node runs on hvd-h2 of the
simulated cluster. Run on hvd-h1, connected to the head at ADDRESS:

    ray_hosts_job.py ADDRESS EXAMPLE WORK LOST_BOUND_S ELASTIC_BOUND_S

train: 2 workers, SPREAD: one per host (cross_size 2, local_size 1 in both),
the main example (EXAMPLE's train) to the usual accuracy with identical
weights; then the same example through Ray Train (HvdConfig), 2 workers
spread over the nodes, 6 epochs to the usual accuracy, rank 0's checkpoint kept. Then two jobs at once, each with 2 workers (one per host) stepping
allreduces until the test kills hvd-h2 (rank 1 writes WORK/<case>.ready once
past step 5; the test writes WORK/killed_at, then kills every process of
hvd-h2). lost: run() must raise WorkerLostError naming rank 1 and hvd-h2
within LOST_BOUND_S of the kill. elastic (min_workers=1): the survivor goes
on alone from its last commit and finishes within ELASTIC_BOUND_S.

Every check that fails raises (exit 1) with what was seen; each line the test
reads starts with "ray-hosts:".
"""

import importlib.util
import os
import socket
import sys
import threading
import time
import traceback

import ray

from hvd.ray import RayExecutor, WorkerLostError


T0 = time.monotonic()


def say(*parts):
    print("ray-hosts:", *parts, f"[{time.monotonic() - T0:.1f} s]", flush=True)


def check(ok, what):
    if not ok:
        raise AssertionError(what)


def connect(address, nodes=2, limit_s=240):
    """Connects once the head answers, and waits for `nodes` live nodes."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            ray.init(address=address, log_to_driver=False)
            break
        except Exception as e:  # the head's GCS not up yet
            if time.monotonic() > deadline:
                raise TimeoutError(f"no Ray head at {address} after {limit_s} s: {e}") from e
            time.sleep(1)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    while sum(1 for n in ray.nodes() if n["Alive"]) < nodes:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Ray has not {nodes} live nodes after {limit_s} s: {ray.nodes()}")
        time.sleep(0.5)
    say(f"connected to {address}: {nodes} live nodes")


def spread_executor(**kwargs):
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=2,
                     cpus_per_worker=1, placement_strategy="SPREAD", **kwargs)
    t0 = time.monotonic()
    ex.start()
    return ex, t0


def one_per_node(ex):
    ips = [w["node_ip"] for w in ex.workers()]
    check(len(set(ips)) == 2, f"SPREAD did not put the workers on two nodes: {ex.workers()}")


def _where():
    """Runs in a worker: the job as hvd sees it from there."""
    import numpy as np

    import hvd

    hvd.init()
    total = hvd.allreduce(np.array([hvd.rank() + 1.0]), op=hvd.Sum, name="where")
    out = dict(rank=hvd.rank(), size=hvd.size(), local_size=hvd.local_size(),
               cross_size=hvd.cross_size(), host=socket.gethostname(), sum=float(total[0]),
               store=os.environ["HVD_RENDEZVOUS_ADDR"])
    hvd.shutdown()
    return out


def train(example, work):
    spec = importlib.util.spec_from_file_location("train_torch_ray", example)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules["train_torch_ray"] = mod
    ray.cloudpickle.register_pickle_by_value(mod)
    ex, t0 = spread_executor()
    try:
        where = ex.run(_where)
        say(f"start() to the first allreduce: {time.monotonic() - t0:.1f} s")
        for w in where:
            say("worker", " ".join(f"{k}={v}" for k, v in w.items()))
        check([(w["rank"], w["size"], w["local_size"], w["cross_size"], w["sum"])
               for w in where] == [(0, 2, 1, 2, 3.0), (1, 2, 1, 2, 3.0)],
              f"not one rank per host (cross_size 2, local_size 1): {where}")
        check(sorted(w["host"] for w in where) == ["hvd-h1", "hvd-h2"],
              f"the workers are not on hvd-h1 and hvd-h2: {where}")
        check(not where[0]["store"].startswith("127."),
              f"the rendezvous address is a loopback one: {where[0]['store']}")
        results = ex.run(mod.train, kwargs={"epochs": 6})
        for r in results:
            say(f"rank {r[0]}/{r[1]}: test accuracy {r[2]:.4f} weights {r[3][:16]} "
                f"step {r[4] * 1e3:.2f} ms")
        check(results[0][2] > 0.7, f"test accuracy {results[0][2]}, not above 0.7")
        check(results[0][3] == results[1][3], "the ranks' weights differ")
    finally:
        ex.shutdown()
    say("PASS train")
    # The same example through Ray Train (HvdConfig), its 2 workers spread
    # over the two nodes; storage on the file system both hosts share.
    t0 = time.monotonic()
    result = mod.run_ray_train(2, 6, os.path.join(work, "ray-train"), placement_strategy="SPREAD")
    m = result.metrics or {}
    say(f"ray train: {time.monotonic() - t0:.1f} s, last report {m}")
    check(result.error is None, f"Ray Train failed: {result.error}")
    check((m.get("epoch"), m.get("size"), m.get("cross_size"), m.get("local_size")) == (6, 2, 2, 1),
          f"not 2 ranks on 2 hosts after 6 epochs: {m}")
    check(m.get("test_accuracy", 0) > 0.7, f"test accuracy {m.get('test_accuracy')}, not above 0.7")
    with result.checkpoint.as_directory() as d:
        check(os.path.exists(os.path.join(d, "model.pt")), "rank 0's checkpoint has no model.pt")
    say("PASS ray-train")


def _steps_until_killed(ready, limit_s):
    """Allreduce steps until hvd-h2 is killed (rank 1, there, never returns)."""
    import numpy as np

    import hvd

    hvd.init()
    t0 = time.monotonic()
    step = 0
    while time.monotonic() - t0 < limit_s:
        hvd.allreduce(np.ones(2), name=f"step{step}")
        if step == 5 and hvd.rank() == 1:
            with open(ready, "w") as f:
                f.write(socket.gethostname())
        step += 1
        time.sleep(0.05)
    return f"rank {hvd.rank()} ran {limit_s} s and was not killed"


def _elastic_steps(ready, limit_s):
    """hvd.elastic training: steps at 2 workers until hvd-h2 is killed, then
    20 more alone from the last commit."""
    import numpy as np

    import hvd

    hvd.init()
    state = hvd.elastic.ObjectState(step=0, total=0.0, sizes=[])
    t0 = time.monotonic()

    @hvd.elastic.run
    def loop(state):
        while state.sizes.count(1) < 20:
            if time.monotonic() - t0 > limit_s:
                raise TimeoutError(f"still {hvd.size()} worker(s) after {limit_s} s")
            s = hvd.allreduce(np.array([1.0]), op=hvd.Sum, name="count")
            if state.step == 5 and hvd.rank() == 1:
                with open(ready, "w") as f:
                    f.write(socket.gethostname())
            state.total += float(s[0])
            state.sizes.append(hvd.size())
            state.step += 1
            state.commit()
            time.sleep(0.05)
        return state.total, state.sizes, hvd.rank(), hvd.size(), socket.gethostname()

    return loop(state)


def _since_kill(work):
    with open(os.path.join(work, "killed_at")) as f:
        return time.time() - float(f.read())


def lost(work, bound_s):
    ex, _ = spread_executor()
    try:
        one_per_node(ex)
        try:
            out = ex.run(_steps_until_killed, args=(os.path.join(work, "lost.ready"), 240))
            raise AssertionError(f"run returned after hvd-h2 was killed: {out}")
        except WorkerLostError as e:
            took = _since_kill(work)
            say(f"run failed {took:.1f} s after the kill: {type(e).__name__}: {e}")
            check(took < bound_s, f"run failed {took:.1f} s after the kill, not within {bound_s} s")
            check(e.rank == 1 and "rank 1" in str(e) and "hvd-h2" in str(e),
                  f"the error names neither rank 1 nor hvd-h2: rank={e.rank}: {e}")
            check(e.node_ip == ex.workers()[1]["node_ip"], f"node_ip {e.node_ip}")
        try:
            ex.run(_where)
            raise AssertionError("a run after the loss succeeded")
        except WorkerLostError as e:
            check("rank 1" in str(e) and "hvd-h2" in str(e), f"the later run's error: {e}")
    finally:
        ex.shutdown()
    say("PASS lost")


def elastic(work, bound_s):
    ex, _ = spread_executor(min_workers=1, max_workers=2)
    try:
        one_per_node(ex)
        t0 = time.monotonic()
        [(total, sizes, rank, size, host)] = ex.run(
            _elastic_steps, args=(os.path.join(work, "elastic.ready"), 240))
        took = _since_kill(work)
        say(f"elastic job finished on {host} {took:.1f} s after the kill "
            f"({time.monotonic() - t0:.1f} s in all): sizes {sizes.count(2)} x 2 then "
            f"{sizes.count(1)} x 1, total {total}")
        check((rank, size, host) == (0, 1, "hvd-h1"), f"the survivor: {(rank, size, host)}")
        n2 = sizes.count(2)
        check(n2 >= 6 and sizes == [2] * n2 + [1] * 20 and total == 2 * n2 + 20,
              f"sizes {sizes}, total {total}")
        check(took < bound_s, f"finished {took:.1f} s after the kill, not within {bound_s} s")
        lost_ = [w for w in ex.workers() if w["lost"]]
        check(len(lost_) == 1 and lost_[0]["rank"] == 1, f"workers: {ex.workers()}")
    finally:
        ex.shutdown()
    say("PASS elastic")


def main():
    address, example, work = sys.argv[1:4]
    lost_bound_s, elastic_bound_s = float(sys.argv[4]), float(sys.argv[5])
    connect(address)
    try:
        train(example, work)
        errors = []

        def case(fn, *args):
            try:
                fn(*args)
            except BaseException as e:  # reported below, the other case goes on
                errors.append(e)
                traceback.print_exc()

        cases = [threading.Thread(target=case, args=(lost, work, lost_bound_s)),
                 threading.Thread(target=case, args=(elastic, work, elastic_bound_s))]
        for t in cases:
            t.start()
        for t in cases:
            t.join()
        if errors:
            raise errors[0]
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
