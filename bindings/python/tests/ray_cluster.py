"""A local Ray cluster for the hvd.ray tests: ``ray start --head --block`` in a
session of its own, 2 CPUs' worth of resources, stopped afterwards with every
process of that session checked gone (by PID; nothing else is touched).
Ray's token authentication stays on, with a token of this cluster's own
(RAY_AUTH_TOKEN, also set in this process while the cluster runs)."""

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PYTHON_DIR = os.path.join(REPO, "bindings", "python")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _reload_ray_auth():
    """Where ray was imported before the token was set, its token loader has
    read the old one already: make it read the environment again."""
    if "ray" not in sys.modules:
        return
    try:
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    except (ImportError, AttributeError):  # a Ray without token authentication
        pass


def _session_pids(sid):
    """The PIDs of the processes in session `sid` (Linux /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # fields[3]: session id
            pids.append(int(entry))
    return pids


class Cluster:
    def __init__(self, num_cpus=2, env=None):
        ray = shutil.which("ray") or os.path.join(os.path.dirname(sys.executable), "ray")
        self.port = _free_port()
        self.tmp = tempfile.mkdtemp(prefix="hvdray-", dir="/tmp")  # short: Ray's socket paths
        self.address = f"127.0.0.1:{self.port}"
        self.auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        self._saved = {k: os.environ.get(k) for k in self.auth}
        os.environ.update(self.auth)  # this process (the driver) uses it too
        _reload_ray_auth()
        # A loaded machine starts a raylet in more than Ray's default 30 s.
        self.env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_raylet_start_wait_time_s="300",
                        **(env or {}))
        cmd = [ray, "start", "--head", "--block", f"--port={self.port}", f"--num-cpus={num_cpus}",
               "--num-gpus=0", f"--temp-dir={self.tmp}", "--include-dashboard=false",
               "--disable-usage-stats"]
        self.log = open(os.path.join(self.tmp, "ray-start.log"), "w")
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def connect(self, runtime_env=None, timeout_s=120):
        import ray

        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ray start exited {self.proc.returncode}: {self.output()}")
            try:
                ray.init(address=self.address, runtime_env=runtime_env, log_to_driver=False)
                return ray
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    def output(self):
        with open(os.path.join(self.tmp, "ray-start.log")) as f:
            return f.read()[-4000:]

    def stop(self, timeout_s=60):
        """Stops the head (SIGTERM to ``ray start --block``, which stops what
        it started), then kills by PID whatever of its session is left.
        Returns the PIDs that were still there after the grace period."""
        sid = self.proc.pid
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + 15
        while _session_pids(sid) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = _session_pids(sid)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()
        for k, v in self._saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _reload_ray_auth()
        shutil.rmtree(self.tmp, ignore_errors=True)
        return left
