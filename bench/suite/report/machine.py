"""machine.md: the machine, the compilers and the library versions of a run."""

import os
import platform
import subprocess
import sys

from .common import ROOT, load, table


def _cmd(argv):
    try:
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=30)
        return r.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _py_version(mod):
    code = f"import {mod} as m; print(getattr(m, '__version__', '?'))"
    r = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    return r.stdout.strip() if r.returncode == 0 else "not installed"


def write_machine(out, build_dir):
    lscpu = _cmd(["lscpu"])
    info = {}
    for line in lscpu.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            info[k.strip()] = v.strip()
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    osname = "?"
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    osname = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    git = _cmd(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    dirty = _cmd(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"])
    gloo = _cmd(["dpkg-query", "-W", "-f=${Version}", "libgloo-dev"]) or "?"
    ompi = (_cmd(["mpirun", "--version"]).splitlines() or ["not installed"])[0]
    cxx = (_cmd(["c++", "--version"]).splitlines() or ["?"])[0]
    cmake = (_cmd(["cmake", "--version"]).splitlines() or ["?"])[0]
    glibc = (_cmd(["ldd", "--version"]).splitlines() or ["?"])[0]
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    rows = [
        ["CPU", info.get("Model name", platform.processor() or "?")],
        ["CPUs (cores × threads)", f"{info.get('CPU(s)', os.cpu_count())} "
                                   f"({info.get('Core(s) per socket', '?')} cores/socket × "
                                   f"{info.get('Thread(s) per core', '?')} threads/core, "
                                   f"{info.get('Socket(s)', '?')} socket(s))"],
        ["Caches", ", ".join(f"{k} {info[k]}" for k in ("L1d cache", "L2 cache", "L3 cache") if k in info)],
        ["Hypervisor", info.get("Hypervisor vendor", "none")],
        ["Memory", mem],
        ["OS", osname],
        ["Kernel", platform.release() + " " + platform.version()],
        ["glibc", glibc],
        ["Compiler", cxx],
        ["CMake", cmake],
        ["Open MPI", ompi],
        ["Gloo (libgloo-dev)", gloo],
        ["Python", platform.python_version()],
        ["torch", _py_version("torch")],
        ["numpy", _py_version("numpy")],
        ["matplotlib", _py_version("matplotlib")],
        ["Horovod", _py_version("horovod")],
        ["DeepSpeed", _py_version("deepspeed")],
        ["hvd", f"{git}{' + uncommitted changes' if dirty else ''}, build {build_dir}"],
        ["Load average when written", load],
    ]
    with open(os.path.join(out, "machine.md"), "w") as f:
        f.write("# Machine\n\n" + table(["", ""], rows, ["---", "---"]) + "\n")
