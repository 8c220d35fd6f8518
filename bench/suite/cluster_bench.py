"""The multi-host part of the benchmark suite: `run_all.py --parts cluster`.

Runs on the simulated cluster of tests/cluster/cluster.sh (one network, UTS,
IPC and mount namespace per host, veth links to a bridge in a switch
namespace, an sshd per host; every address lies inside the namespaces made
here). Needs root; where the cluster cannot be made, the part is skipped with
cluster.sh's reason. One cluster of 4 hosts is brought up per link setting:
unshaped (the "wire" is a memory copy through the kernel), then each rate of
HVD_BENCH_CLUSTER_RATES (default "10gbit,1gbit"; tc htb on both ends of every
host's link, each direction, via cluster.sh up --rate). On each:

  coll   hvd-bench coll (--ops; sizes 4 B, 64 KiB, 1 MiB, 16 MiB, or --sizes)
         in layouts 2x2 (2 hosts x 2 ranks) and 4x1 (4 hosts x 1 rank) (and hvd's
         allreduce at 1 and 16 MiB on 2x1, the reference of "no multi-node cliff"), with
         HVD_HIERARCHICAL=1 and 0, over every transport plugin of the build
         (gloo; ucx and mpi where built), started by hvdrun over the cluster's
         ssh; with --netdev eth0, so each record carries the bytes the hosts
         sent per operation (hvd_bench.cc, NetCounter). Beside them, in the
         same layouts: raw Gloo (gloo-bench --iface eth0) and torch.distributed
         (torch_bench.py, gloo backend, GLOO_SOCKET_IFNAME=eth0), both started
         by hvdrun and meeting in a FileStore on the shared /tmp, raw Open
         MPI (mpi-bench under mpirun over the cluster's ssh), where built, and
         from Python through Horovod's torch API: Horovod (under mpirun, where
         `import horovod.torch` works) and hvd's torch frontend (hvdrun).
  e2e    hvd-bench e2e (ResNet-50's 161 gradients, compute slept, see
         hvd_bench.cc) on 1, 2 and 4 hosts with one rank each; the same step
         for torch.distributed (torch_bench.py e2e: DDP's 25 MiB buckets).

Every job is also bracketed by a read of each host's eth0 counters
(/proc/<host's anchor>/net/dev): "cluster_job" records. Results are the
suite's records with kind "cluster_<kind>" and the tags layout, hosts,
ranks_per_host, hier and rate; report/many_hosts.py reads them
and cluster.json (the setting). Unshaped, every job runs --coll-repeats times
(the report keeps the fastest run); on capped links once (--coll-repeats 1:
every job once; HVD_BENCH_CLUSTER_RATES="": unshaped only). The iteration
schedule is ITERS_SCALE times hvd-bench's usual one. Open MPI runs with mpi_yield_when_idle=1
(its busy polling otherwise starves 4 ranks on 2 shared cores).

Narrower runs (a transport's A/B, the default's check), by the environment:
HVD_BENCH_CLUSTER_TRANSPORTS (comma list of hvd's transports; "default" is
hvd with no --transport, what a user gets without choosing, system
hvd-default), HVD_BENCH_CLUSTER_HIER (comma list of HVD_HIERARCHICAL values,
"auto" leaves it unset; default "1,0"), HVD_BENCH_CLUSTER_PEERS (comma list of
gloo, torch, mpi, horovod, hvd-torch; default all built) and HVD_BENCH_CLUSTER_E2E=0
(no e2e).

Clean-up: the cluster is torn down (cluster.sh down: its processes,
namespaces, veths, bridge and state) on every path: normal end, a failure,
Ctrl-C and SIGTERM (finally), and a SIGKILL of this process (a guard process
in its own session waits for this one to go, then runs down). Clusters left by
an earlier run that was killed before its guard could act (id bench<pid>,
pid gone) are removed first.
"""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

from run_tools import log_print  # bench/suite/run_tools.py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CLUSTER_SH = os.path.join(ROOT, "tests", "cluster", "cluster.sh")
TORCH_BENCH = os.path.join(HERE, "torch_bench.py")
NHOSTS = 4
IFACE = "eth0"
SIZES = "4,64K,1M,16M"
LAYOUTS = (("2x2", 2, 2), ("4x1", 4, 1))
# hvd's own 2 hosts x 1 rank, the reference of "no multi-node cliff" (2x2 at
# >= 1 MiB >= 0.9x of it): each transport, allreduce, the large sizes only.
CLIFF_LAYOUT = ("2x1", 2, 1)
CLIFF_SIZES = "1M,16M"
E2E_HOSTS = (1, 2, 4)
E2E_COMPUTE_MS = 100
# hvd-bench's iteration schedule (bench_common.h) times this: 4 B and 64 KiB 5 + 15
# iterations, 1 MiB 3 + 6, 16 MiB 2 + 2 (and run_all.py --iters-scale on top).
ITERS_SCALE = 0.3
MPI_ENV = {"OMPI_MCA_mpi_yield_when_idle": "1"}
# The simulated hosts share this machine's CPUs, which each host's ranks cannot see: UCX's
# waits must not spin (what the plugin does by itself where a host's ranks outnumber its
# CPUs), as MPI's must yield.
UCX_ENV = {"HVD_UCX_SPIN_US": "0"}
# torch.distributed's Gloo on the cluster's interface, one compute thread per rank.
TORCH_ENV = {"GLOO_SOCKET_IFNAME": IFACE, "OMP_NUM_THREADS": "1"}
ID_PREFIX = "bench"


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class Cluster:
    """One simulated cluster (cluster.sh) named bench<pid>."""

    def __init__(self, runner):
        self.runner = runner
        self.id = f"{ID_PREFIX}{os.getpid()}"
        self.dir = f"/tmp/hvd-cluster-{self.id}"
        self.env_vars = {}
        self.rate = None
        self.guard = None

    def _env(self, id_=None):
        env = dict(os.environ)
        env["HVDC_ID"] = id_ or self.id
        env["HVDC_DIR"] = f"/tmp/hvd-cluster-{id_ or self.id}"
        return env

    def _sh(self, args, timeout=120, id_=None):
        r = subprocess.run([CLUSTER_SH] + args, env=self._env(id_), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        self.runner.logf.write(f"$ HVDC_ID={id_ or self.id} {CLUSTER_SH} {shlex.join(args)}\n"
                               f"{r.stdout}[exit {r.returncode}]\n")
        self.runner.logf.flush()
        return r

    def remove_stale(self):
        """Clusters of earlier runs killed outright (their pid is gone)."""
        r = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
        ids = set(re.findall(rf"^hvdc-({ID_PREFIX}(\d+))-", r.stdout, re.M))
        for id_, pid in sorted(ids):
            if id_ != self.id and not _alive(int(pid)):
                log_print(f"  cluster: removing cluster {id_} left by a killed run")
                self._sh(["down"], id_=id_)

    def start_guard(self):
        """A process in its own session that runs `down` once this one is gone
        (SIGKILL leaves no finally to run)."""
        script = ('while kill -0 "$1" 2>/dev/null; do sleep 1; done; '
                  'exec "$2" down >/dev/null 2>&1')
        self.guard = subprocess.Popen(["bash", "-c", script, "hvd-bench-cluster-guard",
                                       str(os.getpid()), CLUSTER_SH], env=self._env(),
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True)

    def stop_guard(self):
        if self.guard is not None:
            self.guard.kill()
            self.guard.wait()
            self.guard = None

    def up(self, rate):
        """(ok, cluster.sh's exit code, reason); 77: this machine cannot make it."""
        args = ["up", str(NHOSTS)] + (["--rate", rate] if rate else [])
        r = self._sh(args)
        if r.returncode != 0:
            lines = r.stdout.strip().splitlines()
            return False, r.returncode, (lines[-1] if lines else f"cluster.sh up exited {r.returncode}")
        self.rate = rate
        env = self._sh(["env"])
        self.env_vars = {}
        for line in env.stdout.splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                self.env_vars[k] = shlex.split(v)[0] if v else ""
        return True, 0, ""

    def down(self):
        r = self._sh(["down"])
        self.rate = None
        return r.returncode == 0

    def net(self):
        try:
            with open(os.path.join(self.dir, "net")) as f:
                return f.read().strip() + ".0/24"
        except OSError:
            return "?"

    def counters(self):
        """{host index: (rx, tx)} of each host's eth0, read through its anchor."""
        out = {}
        for i in range(1, NHOSTS + 1):
            try:
                with open(os.path.join(self.dir, f"h{i}", "anchor.pid")) as f:
                    pid = f.read().strip()
                with open(f"/proc/{pid}/net/dev") as f:
                    for line in f:
                        if ":" not in line:
                            continue
                        name, vals = line.split(":", 1)
                        if name.strip() == IFACE:
                            v = vals.split()
                            out[i] = (int(v[0]), int(v[8]))
            except (OSError, ValueError, IndexError):
                pass
        return out

    def exec_cmd(self, host, argv):
        return [CLUSTER_SH, "exec", f"h{host}"] + argv

    def job_env(self, extra=None):
        env = self.runner.base_env()
        env.update(self._env())
        env.update(self.env_vars)
        env.update(extra or {})
        return env


class Part:
    def __init__(self, runner):
        self.r = runner
        self.quick = runner.quick
        self.c = Cluster(runner)
        self.info = {"hosts": NHOSTS, "iface": IFACE, "sizes": runner.args.sizes or SIZES, "rates": [],
                     "transports": [], "peers": [], "e2e_compute_ms": E2E_COMPUTE_MS,
                     "e2e_hosts": list(E2E_HOSTS), "notes": []}

    # -- availability -----------------------------------------------------------------
    def unavailable(self):
        if not os.path.exists(CLUSTER_SH):
            return f"no {os.path.relpath(CLUSTER_SH, ROOT)}"
        if os.geteuid() != 0:
            return "the simulated cluster needs root (network namespaces, veths, sshd)"
        return None

    @staticmethod
    def _pick(var, have):
        """`have`, narrowed to the comma list in the environment variable `var` where set
        (its names in its order; names not built are dropped)."""
        spec = os.environ.get(var)
        if spec is None:
            return have
        return [x for x in spec.split(",") if x in have or x == "default"]

    def transports(self):
        t = self._pick("HVD_BENCH_CLUSTER_TRANSPORTS", self._built_transports() + ["default"])
        return [x for x in t if x != "default" or "HVD_BENCH_CLUSTER_TRANSPORTS" in os.environ]

    def peers(self):
        have = [p for p, ok in (("gloo", "gloo-bench" in self.r.bins),
                                ("mpi", "mpi-bench" in self.r.bins and bool(self.r.mpirun)),
                                ("torch", self.r.have_torch),
                                ("horovod", self.r.have_horovod and bool(self.r.mpirun)),
                                ("hvd-torch", self.r.have_torch))
                if ok]
        return self._pick("HVD_BENCH_CLUSTER_PEERS", have)

    @staticmethod
    def hier_values():
        """HVD_HIERARCHICAL's values per hvd job: 1 and 0, or HVD_BENCH_CLUSTER_HIER's
        ("auto": unset, hvd's own choice; tagged hier -2)."""
        spec = os.environ.get("HVD_BENCH_CLUSTER_HIER", "1,0")
        return [-2 if x == "auto" else int(x) for x in spec.split(",") if x]

    def _built_transports(self):
        t = []
        if self.r.have_gloo_plugin:
            t.append("gloo")
        if self.r.have_ucx_plugin:
            t.append("ucx")
        if self.r.have_mpi_plugin and self.r.mpirun:
            t.append("mpi")
        return t

    def hvd_env(self, t, extra=None):
        """(the job's -x settings, hvdrun's own extra environment) for hvd over transport t:
        the library, one compute thread, and the transport's settings for hosts that share
        this machine's CPUs (MPI_ENV, UCX_ENV)."""
        xenv = {"HVD_LIBRARY_PATH": os.path.join(self.r.build, "lib"), "OMP_NUM_THREADS": "1"}
        xenv.update(extra or {})
        env_extra = {}
        if t == "mpi":
            xenv.update(MPI_ENV)
            env_extra = dict(MPI_ENV)
        if t in ("ucx", "default"):  # the default may be UCX across hosts
            xenv.update(UCX_ENV)
        return xenv, env_extra

    def rates(self):
        if self.quick:
            return [None]
        spec = os.environ.get("HVD_BENCH_CLUSTER_RATES", "10gbit,1gbit")
        return [None] + [x for x in spec.split(",") if x]

    # -- one job ------------------------------------------------------------------------
    def job(self, label, cmd, env, tags, timeout=300, mpi=False):
        """Runs one job on the cluster (from hvd-h1), as Runner.run does (log, records,
        job list, failures), with the hosts' eth0 counters read around it. An MPI job whose
        mpirun could not start its daemons across the hosts' namespaces (no result, Open MPI's
        launch errors) is a skip, not a failure, as in tests/cluster/test_cluster.sh."""
        r = self.r
        if not self.quick:
            r.settle(1.0)
        before = self.c.counters()
        t0 = time.time()
        r.logf.write(f"\n### {label}\n$ {shlex.join(cmd)}\n")
        r.logf.flush()
        try:
            p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=timeout, stdin=subprocess.DEVNULL)
            out, rc = p.stdout, p.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            rc = "timeout"
        dt = time.time() - t0
        after = self.c.counters()
        r.logf.write(out + f"\n[exit {rc}, {dt:.1f} s]\n")
        r.logf.flush()
        n = 0
        for line in out.splitlines():
            if not line.startswith("BENCH "):
                continue
            try:
                rec = json.loads(line[6:])
            except ValueError:
                continue
            rec["kind"] = "cluster_" + rec.get("kind", "?")
            rec.update(tags)
            r.records.append(rec)
            n += 1
        host_tx = {str(i): after[i][1] - before[i][1] for i in after if i in before}
        host_rx = {str(i): after[i][0] - before[i][0] for i in after if i in before}
        # job_rep keeps the runs of one job apart (the report merges records by their
        # non-measured fields, and a job record has no time_us to merge by).
        r.records.append(dict(kind="cluster_job", label=label, seconds=round(dt, 2),
                              host_tx=host_tx, host_rx=host_rx, job_rep=tags.get("rep", 0), **tags))
        r.jobs.append(dict(label=label, seconds=round(dt, 1), rc=rc, results=n))
        status = "ok" if rc == 0 else f"FAILED ({rc})"
        log_print(f"  {label:48s} {dt:6.1f} s  {n:3d} results  {status}")
        if rc != 0:
            tail = "\n".join(out.strip().splitlines()[-8:])
            if mpi and n == 0 and re.search(r"orted|ORTE|plm_rsh|could not|unable to (start|launch)",
                                            out, re.I):
                r.skipped.append(f"{label}: mpirun cannot start its daemons across the simulated "
                                 f"hosts (exit {rc}; raw/log.txt has its output)")
            else:
                r.failures.append(dict(label=label, rc=rc, tail=tail, cmd=shlex.join(cmd)))
            # Whatever the job left running would disturb the next ones: a fresh cluster.
            rate = self.c.rate
            self.c.down()
            ok, _, why = self.c.up(rate)
            if not ok:
                raise RuntimeError(f"cluster.sh up after a failed job: {why}")
        return rc == 0

    # -- the jobs -------------------------------------------------------------------------
    @staticmethod
    def hosts_arg(nhosts, per_host):
        return ",".join(f"hvd-h{i}" + (f":{per_host}" if per_host > 1 else "")
                        for i in range(1, nhosts + 1))

    def common(self):
        a = ["--iters-scale", f"{ITERS_SCALE * self.r.args.iters_scale:g}"]
        return a + (["--quick"] if self.quick else [])

    def coll_args(self):
        return ["--sizes", self.r.args.sizes or SIZES, "--ops", self.r.args.ops] + self.common()

    def hvdrun(self, hosts, argv, transport=None, xenv=None, hvd_job=True):
        cmd = [self.r.hvdrun_path, "-H", hosts, "--network-interface", IFACE]
        cmd += ["--start-timeout", "30" if hvd_job else "0"]
        if transport and transport != "default":
            cmd += ["--transport", transport]
        for k, v in (xenv or {}).items():
            cmd += ["-x", f"{k}={v}"]
        return self.c.exec_cmd(1, cmd + argv)

    def store_job(self, label, hosts, argv, tags, xenv=None):
        """A peer whose processes meet in a FileStore folder on the shared /tmp (raw Gloo,
        torch.distributed): hvdrun only starts them."""
        store = tempfile.mkdtemp(dir=self.r.tmp)
        self.job(label, self.hvdrun(hosts, argv + ["--store", store], xenv=xenv, hvd_job=False),
                 self.c.job_env(), tags, timeout=300)

    def coll_jobs(self, rate, rep):
        hb = self.r.bins["hvd-bench"]
        shape = rate or "none"
        for layout, nh, per in LAYOUTS:
            hosts = self.hosts_arg(nh, per)
            base = dict(rep=rep, layout=layout, hosts=nh, ranks_per_host=per, rate=shape)
            for t in self.transports():
                for hier in self.hier_values():
                    xenv, env_extra = self.hvd_env(t, {} if hier == -2 else {"HVD_HIERARCHICAL": str(hier)})
                    argv = [hb, "coll", "--system", f"hvd-{t}", "--netdev", IFACE] + self.coll_args()
                    how = {1: "hier", 0: "flat", -2: "auto"}[hier]
                    self.job(f"cluster {shape} {layout} hvd-{t} {how}",
                             self.hvdrun(hosts, argv, transport=t, xenv=xenv),
                             self.c.job_env(env_extra), dict(base, hier=hier), timeout=300,
                             mpi=t == "mpi")
            peers = self.peers()
            if "gloo" in peers:
                argv = [self.r.bins["gloo-bench"], "coll", "--iface", IFACE,
                        "--variants", "allreduce,ring"] + self.coll_args()
                self.store_job(f"cluster {shape} {layout} raw gloo", hosts, argv, dict(base, hier=-1))
            if "torch" in peers:
                argv = [sys.executable, TORCH_BENCH, "coll", "--system", "torch"] + self.coll_args()
                self.store_job(f"cluster {shape} {layout} torch", hosts, argv, dict(base, hier=-1),
                               xenv=TORCH_ENV)
            mpirun = [self.r.mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                      "-np", str(nh * per), "-H", hosts,
                      "--mca", "btl_tcp_if_include", IFACE, "--mca", "oob_tcp_if_include", IFACE]
            if "mpi" in peers:
                argv = [self.r.bins["mpi-bench"], "coll", "--system", "mpi"] + self.coll_args()
                self.job(f"cluster {shape} {layout} raw mpi", self.c.exec_cmd(1, mpirun + argv),
                         self.c.job_env(MPI_ENV), dict(base, hier=-1), timeout=300, mpi=True)
            # The Python peers through Horovod's torch API: Horovod itself (its MPI
            # controller and collectives under mpirun, at its default cycle time of 1 ms,
            # which bounds a small op, and at 0.1 ms) and hvd's torch frontend (hvdrun, the
            # transport a user gets without choosing one): one negotiation per collective
            # in both, and the same Python per call.
            for cycle in ("1", "0.1") if "horovod" in peers else ():
                argv = [sys.executable, TORCH_BENCH, "coll", "--system", "horovod"] + self.coll_args()
                fwd = ["-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS", "-x", "HOROVOD_CYCLE_TIME"]
                name = "horovod" if cycle == "1" else f"horovod@{cycle}ms"
                self.job(f"cluster {shape} {layout} {name}", self.c.exec_cmd(1, mpirun + fwd + argv),
                         self.c.job_env(dict(MPI_ENV, OMP_NUM_THREADS="1", HOROVOD_CYCLE_TIME=cycle)),
                         dict(base, hier=-1, cycle_time_ms=float(cycle)), timeout=300, mpi=True)
            if "hvd-torch" in peers:
                xenv, env_extra = self.hvd_env("default")
                argv = [sys.executable, TORCH_BENCH, "coll", "--system", "hvd-torch"] + self.coll_args()
                self.job(f"cluster {shape} {layout} hvd-torch",
                         self.hvdrun(hosts, argv, transport="default", xenv=xenv),
                         self.c.job_env(env_extra), dict(base, hier=-2), timeout=300)

        layout, nh, per = CLIFF_LAYOUT
        hosts = self.hosts_arg(nh, per)
        base = dict(rep=rep, layout=layout, hosts=nh, ranks_per_host=per, rate=shape, hier=0)
        sizes = [x for x in (self.r.args.sizes or CLIFF_SIZES).split(",") if x]
        for t in self.transports():
            xenv, env_extra = self.hvd_env(t)
            argv = [hb, "coll", "--system", f"hvd-{t}", "--netdev", IFACE, "--sizes",
                    ",".join(sizes), "--ops", "allreduce"] + self.common()
            self.job(f"cluster {shape} {layout} hvd-{t}", self.hvdrun(hosts, argv, transport=t, xenv=xenv),
                     self.c.job_env(env_extra), base, timeout=300, mpi=t == "mpi")

    def e2e_jobs(self, rate, rep):
        hb = self.r.bins["hvd-bench"]
        shape = rate or "none"
        steps = ["--quick"] if self.quick else ["--steps", "6", "--warmup", "1"]
        step = ["--compute-ms", str(E2E_COMPUTE_MS), "--netdev", IFACE] + steps
        for nh in E2E_HOSTS:
            hosts = self.hosts_arg(nh, 1)
            tags = dict(rep=rep, layout=f"{nh}x1", hosts=nh, ranks_per_host=1, rate=shape)
            for t in self.transports():
                xenv, env_extra = self.hvd_env(t)
                self.job(f"cluster {shape} e2e resnet50 hvd-{t} {nh} host(s)",
                         self.hvdrun(hosts, [hb, "e2e", "--system", f"hvd-{t}"] + step, transport=t,
                                     xenv=xenv),
                         self.c.job_env(env_extra), tags, timeout=300, mpi=t == "mpi")
            if self.r.have_torch:
                self.store_job(f"cluster {shape} e2e resnet50 torch {nh} host(s)", hosts,
                               [sys.executable, TORCH_BENCH, "e2e", "--system", "torch"] + step,
                               tags, xenv=TORCH_ENV)

    # -- the part ---------------------------------------------------------------------------
    def run(self):
        why = self.unavailable()
        if why:
            self.r.skipped.append(f"many hosts (cluster): {why}")
            log_print(f"  cluster: skipped: {why}")
            return
        if "hvd-bench" not in self.r.bins:
            self.r.skipped.append("many hosts (cluster): no hvd-bench")
            return
        self.info["transports"] = self.transports()
        self.info["peers"] = self.peers()
        self.info["mpi_env"] = MPI_ENV
        self.info["ucx_env"] = UCX_ENV
        self.info["torch_env"] = TORCH_ENV
        old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}

        def on_signal(signum, _frame):
            raise SystemExit(128 + signum)
        for s in old:
            signal.signal(s, on_signal)
        t0 = time.time()
        try:
            self.c.remove_stale()
            self.c.start_guard()
            for rate in self.rates():
                ok, rc, why = self.c.up(rate)
                if not ok:
                    if rc == 77 or rate is None:
                        self.r.skipped.append(f"many hosts (cluster{', ' + rate if rate else ''}): {why}")
                        log_print(f"  cluster: skipped{' ' + rate if rate else ''}: {why}")
                        if rate is None:
                            return
                        continue
                    raise RuntimeError(f"cluster.sh up failed: {why}")
                self.info["net"] = self.c.net()
                self.info["rates"].append(rate or "none")
                log_print(f"  cluster: {NHOSTS} hosts up on {self.info['net']}, "
                          f"links {'unshaped' if not rate else rate + ' each way (tc htb)'}")
                # Unshaped: --coll-repeats runs (the fastest kept); capped links once (the cap,
                # not the machine's other tenants, sets their large-message times).
                reps = 1 if self.quick or rate else max(1, self.r.args.coll_repeats)
                for rep in range(reps):
                    self.coll_jobs(rate, rep)
                    if os.environ.get("HVD_BENCH_CLUSTER_E2E", "1") != "0":
                        self.e2e_jobs(rate, rep)
                self.c.down()
        except RuntimeError as e:
            self.r.failures.append(dict(label="cluster", rc="error", tail=str(e), cmd=CLUSTER_SH))
            log_print(f"  cluster: {e}")
        finally:
            self.c.down()
            self.c.stop_guard()
            for s, h in old.items():
                signal.signal(s, h)
            self.info["seconds"] = round(time.time() - t0, 1)
            with open(os.path.join(self.r.out, "cluster.json"), "w") as f:
                json.dump(self.info, f, indent=1)
            left = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True).stdout
            if f"hvdc-{self.c.id}-" in left:
                log_print(f"  cluster: namespaces of {self.c.id} are left after down")


def run_part(runner):
    """run_all.py's hook: the whole part on `runner` (a run_all.Runner)."""
    Part(runner).run()


if __name__ == "__main__":
    sys.exit("cluster_bench.py is run by bench/run_all.py --parts cluster")
