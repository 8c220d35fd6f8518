#!/usr/bin/env python3
"""Runs hvd's benchmark suite (issue 8) and writes a Markdown report with PNG plots.

    python3 bench/run_all.py                      # everything, ~6 min on 2 cores
    python3 bench/run_all.py --quick              # smoke test (ctest: bench.quick)
    python3 bench/run_all.py --parts coll,fusion  # a subset
    python3 bench/run_all.py --report-only DIR    # rebuild report.md and plots from DIR

Results go to bench/results/<date>/ (--out to choose): results.jsonl (one JSON
object per measurement), report.md, machine.md and the plots; the raw output
goes to raw/ beside them, which git ignores: raw/log.txt (every job's command
line and output) and raw/elastic-logs/. What is measured and how: docs/benchmarks.md.
"""

import argparse
import datetime
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITE = os.path.join(ROOT, "bench", "suite")
sys.path.insert(0, SUITE)
import report as report_mod  # noqa: E402  (bench/suite/report/)
from run_tools import Tools, free_port, log_print  # noqa: E402  (bench/suite/run_tools.py)

NOMMAP = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967296"
PARTS = ("stream", "coll", "fusion", "latency", "e2e")
# opt-in: many hosts, needs root (bench/suite/cluster_bench.py); elastic training's
# recovery and steady state against torchrun (bench/suite/elastic_bench.py)
OPT_PARTS = ("cluster", "elastic", "gpu")


def listening(port):
    """Whether a socket of this machine listens on the TCP port (/proc/net/tcp and tcp6)."""
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                rows = [ln.split() for ln in f.readlines()[1:]]
        except OSError:
            continue
        if any(r[1].endswith(f":{port:04X}") and r[3] == "0A" for r in rows):
            return True
    return False


def bench_records(out):
    """The records of a job's `BENCH {json}` lines."""
    recs = []
    for line in out.splitlines():
        if line.startswith("BENCH "):
            try:
                recs.append(json.loads(line[6:]))
            except ValueError:
                continue
    return recs


# ucx_perftest -v: a CSV header, then "iterations,50.0_percentile_lat,avg_lat,overall_lat,..."
# once a second ("[thread 0]" before the interim lines) and at the end; with UCX_LOG_LEVEL=info
# UCX names the endpoint's lanes ("ep_cfg[0]: tag(sysv/memory cma/memory)").
PERFTEST_ROW = re.compile(r"^(?:\[thread \d+\])?(\d+),([0-9.]+),([0-9.]+),([0-9.]+),")
PERFTEST_LANES = re.compile(r"ep_cfg\[0\]: tag\(([^)]*)\)")


def perftest_records(out, system, tls, nbytes):
    """ucx_perftest -t tag_lat's final line as a latency record: time_us = its median over
    the last 2048 iterations (its timing queue), overall_us = its mean over all of them; both
    one way, half a ping-pong's round trip, as ucx_perftest prints them."""
    rows = [m for m in map(PERFTEST_ROW.match, out.splitlines()) if m]
    if not rows:
        return []
    iters, p50, _, overall = rows[-1].groups()
    lanes = PERFTEST_LANES.search(out)
    return [dict(kind="latency", system=system, variant="tag_lat", ranks=2, tensors=1,
                 tensor_bytes=nbytes, iters=int(iters), time_us=float(p50),
                 overall_us=float(overall), ucx_tls=tls, lanes=lanes.group(1) if lanes else "?",
                 one_way=True)]


class Runner(Tools):
    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        self.build = os.path.abspath(args.build_dir)
        self.out = os.path.abspath(args.out)
        self.raw = os.path.join(self.out, "raw")  # ignored by git (.gitignore)
        os.makedirs(self.raw, exist_ok=True)
        self.records = []
        self.failures = []
        self.skipped = []
        self.jobs = []
        self.logf = open(os.path.join(self.raw, "log.txt"), "w")
        self.tmp = tempfile.mkdtemp(prefix="hvd-bench-")
        self.t_start = time.time()

    # -- launchers -------------------------------------------------------------------
    def base_env(self):
        env = dict(os.environ)
        env["HVD_LIBRARY_PATH"] = os.path.join(self.build, "lib")
        env.pop("HVD_TIMELINE", None)
        env.setdefault("OMP_NUM_THREADS", "1")
        return env

    def hvdrun(self, n, argv, hvd_job=True):
        cmd = [self.hvdrun_path, "-np", str(n)]
        if not hvd_job:  # the ranks never connect to hvdrun's store
            cmd += ["--start-timeout", "0"]
        return cmd + argv

    def mpirun_cmd(self, n, argv, xenv=None):
        cmd = [self.mpirun]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        cmd += ["--oversubscribe", "--bind-to", "none", "-np", str(n)]
        for k, v in (xenv or {}).items():
            cmd += ["-x", f"{k}={v}"]
        return cmd + argv

    def store(self):
        return tempfile.mkdtemp(dir=self.tmp)

    @staticmethod
    def settle(limit_s=3.0):
        """Waits (up to limit_s) until at most one task is runnable on the
        machine, so that one job's stragglers (exiting Python interpreters,
        MPI daemons) do not land in the next job's first timings."""
        try:
            with open("/proc/loadavg") as f:
                f.read()
        except OSError:
            return
        end = time.time() + limit_s
        calm = 0
        while time.time() < end and calm < 5:
            with open("/proc/loadavg") as f:
                running = int(f.read().split()[3].split("/")[0])
            calm = calm + 1 if running <= 1 else 0
            time.sleep(0.02)

    def run(self, label, cmd, env=None, timeout=300, tags=None, parse=bench_records):
        env = env or self.base_env()
        if not self.quick:  # --quick runs beside other test suites: never calm
            self.settle()
        t0 = time.time()
        self.logf.write(f"\n### {label}\n$ {shlex.join(cmd)}\n")
        self.logf.flush()
        try:
            r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=timeout, stdin=subprocess.DEVNULL)
            out, rc = r.stdout, r.returncode
        except subprocess.TimeoutExpired as e:
            out = (e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or ""))
            rc = "timeout"
        dt = time.time() - t0
        self.logf.write(out + f"\n[exit {rc}, {dt:.1f} s]\n")
        self.logf.flush()
        n = 0
        for rec in parse(out):
            rec.update(tags or {})
            self.records.append(rec)
            n += 1
        self.jobs.append(dict(label=label, seconds=round(dt, 1), rc=rc, results=n))
        status = "ok" if rc == 0 else f"FAILED ({rc})"
        log_print(f"  {label:48s} {dt:6.1f} s  {n:3d} results  {status}")
        if rc != 0:
            tail = "\n".join(out.strip().splitlines()[-8:])
            self.failures.append(dict(label=label, rc=rc, tail=tail, cmd=shlex.join(cmd)))
        return rc == 0

    # -- parts -----------------------------------------------------------------------
    def sizes(self):
        return self.args.sizes or ("4,64K,1M" if self.quick else "4:256M")

    def common(self):
        a = ["--iters-scale", str(self.args.iters_scale)]
        return a + (["--quick"] if self.quick else [])

    def part_gpu(self):
        """The core's batched copy kernel against cudaMemcpyAsync on one GPU
        (bench/suite/cuda_copy_bench.cc), then the torch parts; each skipped
        with the reason elsewhere."""
        self.part_gpu_copies()
        self.part_gpu_torch()

    def part_gpu_torch(self):
        """hvd.torch on one GPU: the staged allreduce of CUDA tensors against
        host tensors (2 ranks sharing the GPU, gloo: bench/suite/gpu_coll_bench.py),
        and the example CNN's training step on CUDA, 1 process and 2 sharing
        the GPU (e2e_bench.py --device cuda)."""
        if not self.have_torch:
            self.skipped.append("GPU torch parts: torch is not installed")
            return
        probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if probe.stdout.strip().splitlines()[-1:] != ["True"]:
            self.skipped.append("GPU torch parts: torch.cuda.is_available() is not True (no CUDA "
                                "device, or a CPU-only torch)")
            return
        q = ["--quick"] if self.quick else []
        env = self.base_env()
        env["HVD_TRANSPORT"] = "gloo"
        self.run("gpu: staged allreduce, CUDA vs host tensors, 2 ranks",
                 self.hvdrun(2, [sys.executable, os.path.join(SUITE, "gpu_coll_bench.py")] + q),
                 env=env, timeout=900)
        e2e = [sys.executable, os.path.join(SUITE, "e2e_bench.py"), "--model", "cnn",
               "--device", "cuda"] + q
        self.run("gpu: e2e cnn on CUDA, 1 process", e2e + ["--mode", "single"], timeout=600)
        self.run("gpu: e2e cnn on CUDA, hvd 2 processes sharing the GPU",
                 self.hvdrun(2, e2e + ["--mode", "hvd"]), env=env, timeout=600)

    def part_gpu_copies(self):
        exe = self._find_bin("cuda-copy-bench")
        lib = os.path.join(self.build, "lib", "libhvd_cuda_kernels.so")
        if not exe or not os.path.exists(lib):
            self.skipped.append("GPU copies: cuda-copy-bench or lib/libhvd_cuda_kernels.so is not "
                                "built (no CUDA toolkit)")
            return
        probe = subprocess.run([exe, "--kernels", lib, "--tensors", "1", "--sizes", "4K", "--quick"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        skip = [l for l in probe.stdout.splitlines() if l.startswith("SKIP ")]
        if skip:
            self.skipped.append("GPU copies: " + skip[0][5:])
            return
        args = [exe, "--kernels", lib]
        if self.quick:
            args += ["--tensors", "64", "--sizes", "16K,1M", "--quick"]
        self.run("gpu: batched copies vs cudaMemcpyAsync", args, timeout=600)

    def part_stream(self):
        if "stream-bench" not in self.bins:
            return
        self.run("stream (1 and 2 threads)", [self.bins["stream-bench"]] + (["--quick"] if self.quick else []))

    def part_coll(self, n, rep=0):
        sizes = self.sizes()
        ops = self.args.ops
        c = ["--sizes", sizes, "--ops", ops] + self.common()
        hb = self.bins["hvd-bench"]
        for system, extra in self.gloo_systems():
            env = self.base_env()
            env["HVD_TRANSPORT"] = "gloo"
            env.update(extra)
            self.run(f"{system} coll {n} ranks", self.hvdrun(n, [hb, "coll", "--system", system] + c),
                     env=env, timeout=600, tags={"rep": rep})
        for system, extra in self.ucx_systems():
            env = self.base_env()
            env["HVD_TRANSPORT"] = "ucx"
            env.update(extra)
            self.run(f"{system} coll {n} ranks", self.hvdrun(n, [hb, "coll", "--system", system] + c),
                     env=env, timeout=600, tags={"rep": rep})
        for system, extra in self.mpi_systems():
            self.run(f"{system} coll {n} ranks",
                     self.mpirun_cmd(n, [hb, "coll", "--system", system] + c,
                                     dict(HVD_TRANSPORT="mpi", **extra)), timeout=600, tags={"rep": rep})
        for system, transport, sargs in self.set_systems(n):
            ps = [hb, "coll", "--system", system] + sargs + c
            if transport == "gloo":
                env = self.base_env()
                env["HVD_TRANSPORT"] = "gloo"
                self.run(f"{system} coll {n} ranks", self.hvdrun(n, ps), env=env, timeout=600,
                         tags={"rep": rep})
            else:
                self.run(f"{system} coll {n} ranks",
                         self.mpirun_cmd(n, ps, dict(HVD_TRANSPORT="mpi")), timeout=600,
                         tags={"rep": rep})
        if "gloo-bench" in self.bins:
            self.run(f"gloo coll {n} ranks",
                     self.hvdrun(n, [self.bins["gloo-bench"], "coll", "--store", self.store()] + c,
                                 hvd_job=False), timeout=600, tags={"rep": rep})
        if "mpi-bench" in self.bins and self.mpirun:
            mb = self.bins["mpi-bench"]
            self.run(f"mpi coll {n} ranks", self.mpirun_cmd(n, [mb, "coll", "--system", "mpi"] + c),
                     timeout=600, tags={"rep": rep})
            c2 = ["--sizes", sizes, "--ops", "allreduce"] + self.common()
            self.run(f"mpi-nommap allreduce {n} ranks",
                     self.mpirun_cmd(n, [mb, "coll", "--system", "mpi-nommap"] + c2,
                                     {"GLIBC_TUNABLES": NOMMAP}), timeout=600, tags={"rep": rep})
        if self.have_torch:
            self.run(f"torch.distributed coll {n} ranks",
                     self.hvdrun(n, [sys.executable, os.path.join(SUITE, "torch_bench.py"), "coll",
                                     "--system", "torch", "--store", self.store()] + c,
                                 hvd_job=False), timeout=600, tags={"rep": rep})
        if self.oneccl_bin:
            cmd, env = self.oneccl_cmd(n, ["coll", "--store", self.store()] + c)
            self.run(f"oneccl coll {n} ranks", cmd, env=env, timeout=600, tags={"rep": rep})
        if self.have_deepspeed and "allreduce" in ops.split(","):
            cmd, env = self.deepspeed_cmd(n, ["coll"] + c)
            self.run(f"deepspeed-shm allreduce {n} ranks", cmd, env=env, timeout=600,
                     tags={"rep": rep})
            # DeepSpeed's shared-memory kernel leaves its buffers in /dev/shm (one per rank,
            # the job's buffer size each); remove this job's, named by its master port.
            port = cmd[cmd.index("--master_port") + 1]
            for leftover in glob.glob(f"/dev/shm/deepspeed_allreduce_buffer_*_{port}_*"):
                try:
                    os.unlink(leftover)
                except OSError:
                    pass
        if self.have_horovod and self.mpirun:
            self.run(f"horovod coll {n} ranks",
                     self.mpirun_cmd(n, [sys.executable, os.path.join(SUITE, "torch_bench.py"),
                                         "coll", "--system", "horovod"] + c), timeout=600, tags={"rep": rep})

    def gloo_systems(self):
        """hvd over its default transport as users get it (shared memory between ranks of one
        host), and over Gloo's TCP alone (HVD_GLOO_SHM=0): the like-for-like line next to raw
        Gloo, which only has TCP."""
        if not self.have_gloo_plugin:
            return []
        return [("hvd-gloo", {}), ("hvd-gloo-tcp", {"HVD_GLOO_SHM": "0"})]

    def ucx_systems(self):
        """hvd over its UCX plugin as users get it (hvd-ucx: the core's shared memory between
        ranks of one host, UCX between hosts); with every byte over UCX (hvd-ucx-shm,
        HVD_SHM=0: on one host UCX's own shared-memory transports, posix or sysv, its choice),
        the line to read beside the core's shared memory (hvd-gloo); and with every byte over
        UCX's tcp (hvd-ucx-tcp, HVD_SHM=0 UCX_TLS=tcp,self: loopback on one host), the line to
        read beside hvd-gloo-tcp and raw Gloo."""
        if not self.have_ucx_plugin:
            return []
        return [("hvd-ucx", {}), ("hvd-ucx-shm", {"HVD_SHM": "0"}),
                ("hvd-ucx-tcp", {"HVD_SHM": "0", "UCX_TLS": "tcp,self"})]

    def mpi_systems(self):
        """hvd over its MPI plugin as shipped (shared memory between ranks of one host) and
        with MPI point-to-point and collectives alone (HVD_MPI_SHM=0)."""
        if not (self.have_mpi_plugin and self.mpirun):
            return []
        return [("hvd-mpi", {}), ("hvd-mpi-p2p", {"HVD_MPI_SHM": "0"})]

    def set_systems(self, n):
        """hvd's process sets: a set of every rank beside its parent (the same size, the same
        transport), and at 4+ ranks two half-size sets running at once (the ensemble pattern;
        reported at the set's size, to read beside the parent's half-size line)."""
        out = []
        if self.have_gloo_plugin:
            out.append(("hvd-gloo-set", "gloo", ["--process-set", "all"]))
            if n >= 4:
                out.append(("hvd-gloo-halves", "gloo", ["--process-set", "halves"]))
        if self.have_mpi_plugin and self.mpirun:
            out.append(("hvd-mpi-set", "mpi", ["--process-set", "all"]))
        return out

    def fusion_specs(self):
        return ["200x16K"] if self.quick else ["200x16K", "1000x4K"]

    def reps(self):
        return 1 if self.quick else max(1, self.args.repeats)

    def part_fusion(self, rep=0):
        n = 2
        tag = {"rep": rep}
        hb = self.bins["hvd-bench"]
        q = ["--quick"] if self.quick else []
        cycles = ["1"] if self.quick else self.args.fusion_cycles.split(",")
        for spec in self.fusion_specs():
            nt, tb = spec.split("x")
            f = ["--tensors", nt, "--tensor-bytes", tb] + q
            for cyc in cycles:
                for system, extra in self.gloo_systems():
                    env = self.base_env()
                    env.update(HVD_TRANSPORT="gloo", HVD_CYCLE_TIME=cyc, **extra)
                    self.run(f"{system} fusion {spec} cycle {cyc} ms",
                             self.hvdrun(n, [hb, "fusion", "--system", system] + f), env=env, tags=tag)
                    if system == "hvd-gloo" and cyc == cycles[0]:
                        # The same tensors as one grouped allreduce: the per-call floor.
                        self.run(f"{system} fusion {spec} grouped cycle {cyc} ms",
                                 self.hvdrun(n, [hb, "fusion", "--system", system, "--grouped"] + f),
                                 env=env, tags=tag)
                for system, extra in self.ucx_systems():
                    env = self.base_env()
                    env.update(HVD_TRANSPORT="ucx", HVD_CYCLE_TIME=cyc, **extra)
                    self.run(f"{system} fusion {spec} cycle {cyc} ms",
                             self.hvdrun(n, [hb, "fusion", "--system", system] + f), env=env, tags=tag)
                for system, extra in self.mpi_systems():
                    self.run(f"{system} fusion {spec} cycle {cyc} ms",
                             self.mpirun_cmd(n, [hb, "fusion", "--system", system] + f,
                                             dict(HVD_TRANSPORT="mpi", HVD_CYCLE_TIME=cyc, **extra)),
                             tags=tag)
            if "gloo-bench" in self.bins:
                self.run(f"gloo fusion {spec}",
                         self.hvdrun(n, [self.bins["gloo-bench"], "fusion", "--store", self.store()] + f,
                                     hvd_job=False), tags=tag)
            if "mpi-bench" in self.bins and self.mpirun:
                self.run(f"mpi fusion {spec}",
                         self.mpirun_cmd(n, [self.bins["mpi-bench"], "fusion", "--system", "mpi"] + f),
                         tags=tag)

    def part_latency(self, rep=0):
        n = 2
        tag = {"rep": rep}
        hb = self.bins["hvd-bench"]
        q = ["--quick"] if self.quick else []
        cycles = ["1"] if self.quick else self.args.cycles.split(",")
        for cyc in cycles:
            for system, extra in self.gloo_systems():
                env = self.base_env()
                env.update(HVD_TRANSPORT="gloo", HVD_CYCLE_TIME=cyc, **extra)
                self.run(f"{system} latency cycle {cyc} ms",
                         self.hvdrun(n, [hb, "latency", "--system", system] + q), env=env, tags=tag)
            for system, extra in self.ucx_systems():
                env = self.base_env()
                env.update(HVD_TRANSPORT="ucx", HVD_CYCLE_TIME=cyc, **extra)
                self.run(f"{system} latency cycle {cyc} ms",
                         self.hvdrun(n, [hb, "latency", "--system", system] + q), env=env, tags=tag)
            for system, extra in self.mpi_systems():
                self.run(f"{system} latency cycle {cyc} ms",
                         self.mpirun_cmd(n, [hb, "latency", "--system", system] + q,
                                         dict(HVD_TRANSPORT="mpi", HVD_CYCLE_TIME=cyc, **extra)),
                         tags=tag)
        if "gloo-bench" in self.bins:
            self.run("gloo latency", self.hvdrun(n, [self.bins["gloo-bench"], "latency", "--store",
                                                     self.store()] + q, hvd_job=False), tags=tag)
        if "mpi-bench" in self.bins and self.mpirun:
            self.run("mpi latency", self.mpirun_cmd(n, [self.bins["mpi-bench"], "latency",
                                                        "--system", "mpi"] + q), tags=tag)
        for system, tls in self.ucx_perftest_systems():
            for nbytes in ([4] if self.quick else [4, 64 << 10]):
                self.ucx_perftest_job(system, tls, nbytes, tag)

    # -- raw UCX: ucx_perftest (Debian's ucx-utils) --------------------------------------
    def ucx_perftest_systems(self):
        """Raw UCX beside hvd-ucx-tcp and hvd-ucx-shm: ucx_perftest over tcp, and over UCX's
        shared-memory transports (sm: posix, sysv, cma..., UCX's choice)."""
        if not self.ucx_perftest:
            return []
        return [("ucx_perftest-tcp", "tcp,self"), ("ucx_perftest-shm", "sm,self")]

    def ucx_perftest_job(self, system, tls, nbytes, tags):
        """One `ucx_perftest -t tag_lat` (UCP tag-matching ping-pong) on this host: its server
        (no host argument) on a free port, then its client (`localhost`) as the job. Every wait
        is bounded: the server's listen (10 s), the client (60 s), the server's exit (10 s,
        then it is killed)."""
        iters = 2000 if self.quick or nbytes > 4096 else 20000
        port = free_port()
        argv = ["-t", "tag_lat", "-s", str(nbytes), "-n", str(iters), "-w", str(iters // 10),
                "-p", str(port), "-v"]
        env = self.base_env()
        env.update(UCX_TLS=tls, UCX_LOG_LEVEL="info")  # info: the lanes, once
        with tempfile.TemporaryFile("w+", dir=self.tmp) as log:
            server = subprocess.Popen([self.ucx_perftest] + argv, env=env, stdout=log,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                end = time.time() + 10
                while not listening(port) and server.poll() is None and time.time() < end:
                    time.sleep(0.02)
                self.run(f"{system} tag_lat {report_mod.fmt_bytes(nbytes)}",
                         [self.ucx_perftest, "localhost"] + argv, env=env, timeout=60, tags=tags,
                         parse=lambda out: perftest_records(out, system, tls, nbytes))
            finally:
                try:
                    server.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()
                log.seek(0)
                self.logf.write(f"(server, exit {server.returncode}:)\n{log.read()}\n")

    def part_python_peers(self, parts, rep=0):
        """torch.distributed and Horovod fusion + latency, one job each."""
        modes = [m for m in ("fusion", "latency") if m in parts]
        if not modes:
            return
        n = 2
        tb = os.path.join(SUITE, "torch_bench.py")
        common = ["--fusion", ",".join(self.fusion_specs())] + (["--quick"] if self.quick else [])
        if self.have_torch:
            self.run(f"torch.distributed {'+'.join(modes)}",
                     self.hvdrun(n, [sys.executable, tb, ",".join(modes), "--system", "torch",
                                     "--store", self.store()] + common, hvd_job=False),
                     tags={"rep": rep})
        if self.have_horovod and self.mpirun:
            cycles = ["1"] if self.quick else self.args.cycles.split(",")[:2]
            for cyc in cycles:
                self.run(f"horovod {'+'.join(modes)} cycle {cyc} ms",
                         self.mpirun_cmd(n, [sys.executable, tb, ",".join(modes), "--system",
                                             "horovod"] + common, {"HOROVOD_CYCLE_TIME": cyc}),
                         tags={"rep": rep})

    def part_e2e(self, rep=0):
        if not self.have_torch:
            return
        e2e = os.path.join(SUITE, "e2e_bench.py")
        models = ["cnn"] if self.quick else ["cnn", "mlp", "resnet50"]
        q = ["--quick"] if self.quick else []
        for model in models:
            base = [sys.executable, e2e, "--model", model] + q
            if model == "resnet50":
                # 64 x 64 images: a twelfth of 224's compute for the same 25.6 M gradients,
                # so that a step fits two cores and communication weighs more, not less.
                base += ["--image-size", "64"]
            tag = {"rep": rep}
            self.run(f"e2e {model} 1 process", base + ["--mode", "single"], tags=tag)
            if model == "resnet50":  # 1 process through each framework too
                self.run(f"e2e {model} hvd 1 process", self.hvdrun(1, base + ["--mode", "hvd"]),
                         tags=tag)
                self.run(f"e2e {model} DDP 1 process",
                         self.hvdrun(1, base + ["--mode", "ddp", "--store", self.store()],
                                     hvd_job=False), tags=tag)
            self.run(f"e2e {model} hvd 2 processes", self.hvdrun(2, base + ["--mode", "hvd"]),
                     tags=tag)
            self.run(f"e2e {model} DDP 2 processes",
                     self.hvdrun(2, base + ["--mode", "ddp", "--store", self.store()], hvd_job=False),
                     tags=tag)
            if self.have_horovod and self.mpirun:
                self.run(f"e2e {model} Horovod 2 processes",
                         self.mpirun_cmd(2, base + ["--mode", "horovod"]), tags=tag)

    def close(self):
        self.logf.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def uptime():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: 3 sizes, 1 iteration, 2 ranks, one fusion shape, cnn only")
    ap.add_argument("--build-dir", default=None,
                    help="hvd build tree (default: build-bench, else build)")
    ap.add_argument("--out", default=None, help="results folder (default bench/results/<date>)")
    ap.add_argument("--parts", default=",".join(PARTS), help="comma list of " + ", ".join(PARTS + OPT_PARTS))
    ap.add_argument("--ranks", default=None, help="rank counts for coll (default 2,4; quick: 2)")
    ap.add_argument("--sizes", default=None, help='e.g. "4:256M" (powers of 4) or "4K,1M"')
    ap.add_argument("--ops", default="allreduce,allgather,broadcast")
    ap.add_argument("--cycles", default="1,0.1,0.01", help="HVD_CYCLE_TIME values for latency (ms)")
    ap.add_argument("--fusion-cycles", default="1,0.1",
                    help="HVD_CYCLE_TIME values for the fusion runs (ms; the first is the default)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="repetitions of the fusion, latency and e2e jobs (median reported)")
    ap.add_argument("--coll-repeats", type=int, default=2,
                    help="runs of every coll job (the faster run per size is reported)")
    ap.add_argument("--iters-scale", type=float, default=1.0,
                    help="multiply the timed iterations of every size")
    ap.add_argument("--no-build", action="store_true", help="never build bench/suite")
    ap.add_argument("--report-only", metavar="DIR", help="only rebuild DIR's report and plots")
    return ap.parse_args()


def resolve_defaults(args):
    """Fills in the build and results folders; the parts and rank counts to run."""
    if args.build_dir is None:
        for cand in ("build-bench", "build"):
            if os.path.exists(os.path.join(ROOT, cand, "lib", "libhvd.so")):
                args.build_dir = os.path.join(ROOT, cand)
                break
        else:
            args.build_dir = os.path.join(ROOT, "build-bench")
    if args.out is None:
        if args.quick:
            args.out = os.path.join(args.build_dir, "bench-quick")
        else:
            args.out = os.path.join(ROOT, "bench", "results", datetime.date.today().isoformat())
    parts = [p for p in args.parts.split(",") if p]
    for p in parts:
        if p not in PARTS + OPT_PARTS:
            raise SystemExit(f"run_all: unknown part {p!r} (parts: {', '.join(PARTS + OPT_PARTS)})")
    ranks = [int(x) for x in (args.ranks or ("2" if args.quick else "2,4")).split(",")]
    return parts, ranks


def run_parts(r, args, parts, ranks):
    """Runs the chosen parts in the suite's order."""
    if "stream" in parts:
        r.part_stream()
    if "coll" in parts:
        # Every coll job runs --coll-repeats times; the report keeps the faster run per
        # point (interference on a shared machine only ever slows a run down).
        for rep in range(1 if args.quick else max(1, args.coll_repeats)):
            for n in ranks:
                r.part_coll(n, rep)
    # The short parts run --repeats times, interleaved, so a disturbance
    # hits one repetition of every system rather than all of one system's.
    for rep in range(r.reps()):
        if "fusion" in parts:
            r.part_fusion(rep)
        if "latency" in parts:
            r.part_latency(rep)
        if rep == 0:  # torch/Horovod: seconds per job, far from hvd's figures
            r.part_python_peers(parts, rep)
    for rep in range(r.reps()):
        if "e2e" in parts:
            r.part_e2e(rep)
    if "gpu" in parts:
        r.part_gpu()
    if "cluster" in parts:
        import cluster_bench  # bench/suite/cluster_bench.py
        cluster_bench.run_part(r)
    if "elastic" in parts:
        run_elastic(r, args)


def run_elastic(r, args):
    """The elastic part: bench/suite/elastic_bench.py in a process of its own."""
    out = os.path.join(r.out, "elastic.jsonl")
    cmd = [sys.executable, os.path.join(ROOT, "bench", "suite", "elastic_bench.py"),
           "--build-dir", r.build, "--out", out, "--logs", os.path.join(r.raw, "elastic-logs"),
           "--repeats", "1" if args.quick else "3"]
    log_print("  elastic: " + shlex.join(cmd))
    p = subprocess.run(cmd, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    log_print(p.stdout)
    if p.returncode != 0:
        r.failures.append(dict(label="elastic", rc=p.returncode, tail=p.stdout[-2000:],
                               cmd=shlex.join(cmd)))
    if os.path.exists(out):
        with open(out) as f:
            r.records.extend(json.loads(line) for line in f if line.strip())


def write_results(r, args, parts, ranks, load_before):
    """results.jsonl, meta.json, machine.md and the report."""
    total = time.time() - r.t_start
    meta = dict(
        date=datetime.datetime.now().isoformat(timespec="seconds"),
        quick=args.quick, build_dir=r.build, parts=parts, ranks=ranks, sizes=r.sizes(),
        load_before=load_before, load_after=uptime(), seconds=round(total, 1),
        results=len(r.records),
        jobs=r.jobs, failures=r.failures, skipped=r.skipped, availability=r.availability,
        horovod=r.horovod_origin, peer_versions=r.peer_versions, ucx_lanes=r.ucx_lanes,
        command=shlex.join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]))
    with open(os.path.join(r.out, "results.jsonl"), "w") as f:
        for rec in r.records:
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
    with open(os.path.join(r.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    report_mod.write_machine(r.out, r.build)
    report_mod.write_all(r.out)
    log_print(f"run_all: {len(r.records)} results in {total:.0f} s; report: "
              f"{os.path.join(r.out, 'report.md')}")


def main():
    args = parse_args()
    if args.report_only:
        report_mod.write_all(os.path.abspath(args.report_only))
        return 0
    parts, ranks = resolve_defaults(args)
    r = Runner(args)
    log_print(f"run_all: {'quick' if args.quick else 'full'} run, build {r.build}, results {r.out}")
    load_before = uptime()
    log_print(f"  load average before: {load_before}")
    r.find_tools()
    try:
        run_parts(r, args, parts, ranks)
    finally:
        r.close()
    write_results(r, args, parts, ranks, load_before)
    if r.failures:
        log_print(f"run_all: {len(r.failures)} job(s) failed: "
                  + ", ".join(f["label"] for f in r.failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
