"""What a run of bench/run_all.py needs besides hvd: finding the suite's programs and the
peers (raw Gloo and MPI, torch, Horovod, oneCCL, DeepSpeed, ucx_perftest), building what is
missing, and probing which UCX lanes the plugin picks. Runner in run_all.py inherits Tools."""

import glob
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys

SUITE = os.path.dirname(os.path.abspath(__file__))


def log_print(*a):
    print(*a, flush=True)


def free_port():
    """A TCP port nobody listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Tools:
    # -- discovery -------------------------------------------------------------------
    def find_tools(self):
        b = self.build
        self.hvdrun_path = os.path.join(b, "bin", "hvdrun")
        if not os.path.exists(os.path.join(b, "lib", "libhvd.so")) or not os.path.exists(self.hvdrun_path):
            raise SystemExit(f"run_all: no hvd build in {b} (lib/libhvd.so, bin/hvdrun); build "
                             "it first: cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release && "
                             "cmake --build build-bench -j2")
        self.bins = {}
        missing = []
        for name in ("hvd-bench", "gloo-bench", "mpi-bench", "stream-bench"):
            p = self._find_bin(name)
            if p:
                self.bins[name] = p
            else:
                missing.append(name)
        if "hvd-bench" in missing or "stream-bench" in missing:
            self._build_standalone()
            for name in list(missing):
                p = self._find_bin(name)
                if p:
                    self.bins[name] = p
                    missing.remove(name)
        if "hvd-bench" not in self.bins:
            raise SystemExit("run_all: hvd-bench could not be built")
        self.have_gloo_plugin = os.path.exists(os.path.join(b, "lib", "libhvd_transport_gloo.so"))
        self.have_mpi_plugin = os.path.exists(os.path.join(b, "lib", "libhvd_transport_mpi.so"))
        self.have_ucx_plugin = os.path.exists(os.path.join(b, "lib", "libhvd_transport_ucx.so"))
        self.ucx_perftest = shutil.which("ucx_perftest")
        self.mpirun = shutil.which("mpirun")
        self.have_torch = self._py_ok("import torch, torch.distributed")
        self.have_horovod = self._py_ok("import horovod.torch")
        self.horovod_origin = None
        if self.have_horovod:  # version and folder, for the report
            r = subprocess.run([sys.executable, "-c", "import horovod, os; "
                                "print(horovod.__version__, os.path.dirname(horovod.__file__))"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self.horovod_origin = r.stdout.strip() or None
        self.have_mpl = self._py_ok("import matplotlib")
        self.find_peers()
        status = {
            "hvd transport gloo": self.have_gloo_plugin,
            "hvd transport mpi": self.have_mpi_plugin and bool(self.mpirun),
            "hvd transport ucx": self.have_ucx_plugin,
            "raw UCX (ucx_perftest)": bool(self.ucx_perftest),
            "raw gloo (gloo-bench)": "gloo-bench" in self.bins,
            "raw MPI (mpi-bench)": "mpi-bench" in self.bins and bool(self.mpirun),
            "torch.distributed": self.have_torch,
            "Horovod": self.have_horovod,
            "oneCCL (oneccl-bench)": bool(self.oneccl_bin),
            "DeepSpeed shm allreduce": self.have_deepspeed,
            "matplotlib": self.have_mpl,
        }
        self.availability = status
        for k, v in status.items():
            log_print(f"  {k:24s} {'yes' if v else 'NO'}")
        if not self.have_mpi_plugin:
            self.skipped.append("hvd over MPI: lib/libhvd_transport_mpi.so is not built")
        if not self.have_horovod:
            self.skipped.append("Horovod: `import horovod.torch` fails (see the Horovod section)")
        parts = self.args.parts.split(",")
        if not self.ucx_perftest and "latency" in parts:
            self.skipped.append("raw UCX latency: no ucx_perftest (Debian's ucx-utils; "
                                "bench/suite/install_peers.sh --only ucx installs it)")
        self.ucx_lanes = {}
        if any(p in parts for p in ("coll", "fusion", "latency")):
            self.probe_ucx_lanes()

    def probe_ucx_lanes(self):
        """What each hvd-ucx series' ranks connect over, from the plugin's debug line ("ucx:
        rank 0 of 2 connected over UCX's default devices: sysv/memory to rank 1") in one short
        2-rank job per series, outside the timed jobs: the report shows it beside the series,
        so that hvd-ucx-shm is seen to be on UCX's shared memory and hvd-ucx-tcp on tcp."""
        for system, extra in self.ucx_systems():
            env = self.base_env()
            env.update(HVD_TRANSPORT="ucx", HVD_LOG_LEVEL="debug", **extra)
            cmd = self.hvdrun(2, [self.bins["hvd-bench"], "latency", "--system", system, "--quick"])
            try:
                out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, timeout=60, stdin=subprocess.DEVNULL).stdout
            except subprocess.TimeoutExpired:
                out = "(timed out after 60 s)"
            self.logf.write(f"\n### {system}: UCX lanes\n$ {shlex.join(cmd)}\n{out}\n")
            m = re.search(r"ucx: rank 0 of \d+ connected over .*?: (.+)", out)
            self.ucx_lanes[system] = m.group(1).strip() if m else "? (no connection line; raw/log.txt)"

    # -- optional peers (bench/suite/install_peers.sh) ----------------------------------
    def find_peers(self):
        """oneCCL (PREFIX/oneccl from install_peers.sh, launched with its Intel MPI hydra) and
        DeepSpeed's shared-memory allreduce (importable deepspeed whose CPU op builds). Each
        one missing is a skip with its reason, never a failure."""
        self.oneccl_bin = None
        self.have_deepspeed = False
        self.peer_versions = {}
        if "coll" not in self.args.parts.split(","):
            return  # they run in the coll part only
        prefix = os.environ.get("HVD_BENCH_PEERS", "/opt/hvd-bench-peers")
        self.oneccl_root = os.environ.get("HVD_ONECCL_ROOT") or os.path.join(prefix, "oneccl")
        self.hydra = os.path.join(self.oneccl_root, "bin", "mpiexec.hydra")
        if not os.path.exists(self.hydra):
            self.skipped.append(f"oneCCL: not installed (no {self.hydra}; "
                                "bench/suite/install_peers.sh installs it)")
        else:
            self.oneccl_bin = self._find_bin("oneccl-bench") or self._build_oneccl()
            self.peer_versions["oneCCL"] = self._wheel_version(self.oneccl_root, "oneccl_cpu")
            self.peer_versions["Intel MPI (impi-rt)"] = self._wheel_version(self.oneccl_root, "impi_rt")
        if not self._py_ok("import deepspeed"):
            self.skipped.append("DeepSpeed: `import deepspeed` fails (bench/suite/install_peers.sh "
                                "installs it)")
            return
        # Its shared-memory op is compiled on first use (a minute or two): done here, outside
        # any timed job; deepspeed_bench.py checks again that inference_all_reduce will use it.
        code = ("import deepspeed; from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder as B; "
                "b = B(); assert b.is_compatible(), 'ShareMemCommBuilder is not compatible here'; "
                "m = b.load(); assert m.vector_kernel_level() >= 1, 'no AVX2 for the fp32 kernel'; "
                "print('DEEPSPEED', deepspeed.__version__)")
        env = self.base_env()
        env["DS_ACCELERATOR"] = "cpu"
        cmd = [sys.executable, "-c", code]
        try:
            r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=900)
            out, rc = r.stdout, r.returncode
        except subprocess.TimeoutExpired:
            out, rc = "", "timeout (900 s)"
        self.logf.write("\n### DeepSpeed shm op\n$ " + shlex.join(cmd) + "\n" + out + "\n")
        ver = [ln.split()[1] for ln in out.splitlines() if ln.startswith("DEEPSPEED ")]
        if rc == 0 and ver:
            self.have_deepspeed = True
            self.peer_versions["DeepSpeed"] = ver[0]
        else:
            tail = [ln for ln in out.strip().splitlines() if ln.strip()][-1:] or [f"exit {rc}"]
            self.skipped.append(f"DeepSpeed: its CPU shared-memory op (ShareMemCommBuilder) does "
                                f"not build or load: `{tail[0][:200]}` (raw/log.txt has the output)")

    @staticmethod
    def _wheel_version(root, dist):
        import glob
        found = glob.glob(os.path.join(root, "lib", "python3*", "site-packages", dist + "-*.dist-info"))
        return os.path.basename(found[0])[len(dist) + 1:-len(".dist-info")] if found else "?"

    def _build_oneccl(self):
        """oneccl-bench against PREFIX/oneccl when the build tree has none (CMake builds it when
        it finds oneCCL at configure time): one compiler call, as bench/suite/CMakeLists.txt."""
        include = os.path.join(self.oneccl_root, "include")
        archive = os.path.join(self.oneccl_root, "lib", "ccl", "cpu", "lib", "libccl.a")
        if self.args.no_build:
            self.skipped.append("oneCCL: oneccl-bench is not built (reconfigure the build now that "
                                "oneCCL is installed, or run without --no-build)")
            return None
        if not (os.path.exists(os.path.join(include, "oneapi", "ccl.hpp")) and os.path.exists(archive)):
            self.skipped.append(f"oneCCL: {self.oneccl_root} lacks the oneccl-cpu-devel headers or "
                                "lib/ccl/cpu/lib/libccl.a (bench/suite/install_peers.sh)")
            return None
        out = os.path.join(self.build, "bench-suite", "bin", "oneccl-bench")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        cmd = [os.environ.get("CXX", "c++"), "-O2", "-std=c++17", "-DHVD_ONECCL_STATIC=1",
               "-I", SUITE, "-isystem", include, os.path.join(SUITE, "oneccl_bench.cc"), archive,
               "-lhwloc", "-lpthread", "-ldl", "-lrt", "-o", out]
        log_print(f"run_all: building {out}")
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.logf.write("$ " + shlex.join(cmd) + "\n" + r.stdout + "\n")
        if r.returncode != 0:
            tail = [ln for ln in r.stdout.strip().splitlines() if ln.strip()][-1:] or ["?"]
            self.skipped.append(f"oneCCL: building oneccl-bench failed: `{tail[0][:200]}`")
            return None
        return out

    def oneccl_cmd(self, n, argv):
        """oneCCL's documented launch: Intel MPI's hydra (from impi-rt), ATL/MPI (oneCCL's
        default), Intel MPI's shared memory between the ranks of this host (I_MPI_FABRICS=shm)
        and its default pinning (with I_MPI_PIN=0 every call took milliseconds here)."""
        env = self.base_env()
        lib = os.path.join(self.oneccl_root, "lib")
        env["I_MPI_ROOT"] = self.oneccl_root
        env["FI_PROVIDER_PATH"] = lib
        env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        env.setdefault("I_MPI_FABRICS", "shm")
        return [self.hydra, "-n", str(n), self.oneccl_bin] + argv, env

    def deepspeed_cmd(self, n, argv):
        """DeepSpeed's own launcher (deepspeed --num_accelerators N), which sets RANK,
        WORLD_SIZE, LOCAL_RANK, LOCAL_SIZE, MASTER_ADDR/PORT, on a free port."""
        port = free_port()
        env = self.base_env()
        env["DS_ACCELERATOR"] = "cpu"
        return [sys.executable, "-m", "deepspeed.launcher.runner", "--num_accelerators", str(n),
                "--master_addr", "127.0.0.1", "--master_port", str(port), "--no_local_rank",
                os.path.join(SUITE, "deepspeed_bench.py")] + argv, env

    def _find_bin(self, name):
        for d in ("bin", os.path.join("bench-suite", "bin")):
            p = os.path.join(self.build, d, name)
            if os.path.exists(p):
                return p
        return None

    def _build_standalone(self):
        if self.args.no_build:
            return
        bdir = os.path.join(self.build, "bench-suite")
        log_print(f"run_all: building the suite's programs in {bdir}")
        for cmd in (["cmake", "-S", SUITE, "-B", bdir, "-DCMAKE_BUILD_TYPE=Release",
                     f"-DHVD_BUILD_DIR={self.build}"],
                    ["cmake", "--build", bdir, "-j2"]):
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.logf.write("$ " + shlex.join(cmd) + "\n" + r.stdout + "\n")
            if r.returncode != 0:
                log_print(r.stdout[-3000:])
                raise SystemExit("run_all: building bench/suite failed")

    @staticmethod
    def _py_ok(code):
        r = subprocess.run([sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        return r.returncode == 0
