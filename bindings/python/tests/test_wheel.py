"""The wheel works outside the repository.

Builds the wheel once per run with scripts/build-wheel.sh (pip wheel, then
auditwheel repair; its build folder and output in temporary folders), checks
it is a manylinux wheel (`auditwheel show`) whose every native file needs
only the policy's libraries, files inside the wheel, and (the optional
transports' plugins) their MPI, UCX, CUDA or NCCL library; installs it with `pip install --no-deps --no-index` into a fresh virtual
environment made with --system-site-packages (torch, scikit-learn and tqdm
come from this environment), and then works from a temporary folder with a
clean environment: no HVD_* variable, no PYTHONPATH, no LD_LIBRARY_PATH, no
variable naming the repository, PATH = the venv's bin + the system folders.
Checked there: the wheel's files, their RPATH/RUNPATH and ldd, that `import
hvd` loads libhvd.so from site-packages, that hvdrun comes from the venv, that
the ranks it starts map libhvd.so and the transport plugin from site-packages
and see nothing of the repository, and that examples/python/train_torch.py
reaches its usual accuracy with 2 ranks.

No framework is imported in this process: everything runs in subprocesses.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
import zipfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)  # bindings/python
REPO = os.path.abspath(os.path.join(PKG_ROOT, os.pardir, os.pardir))
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PLUGINS = ("gloo", "mpi", "ucx", "nccl")
BUILD_TIMEOUT = 1800  # a Release build of the core on 2 busy cores takes ~2 minutes
MIN_ACCURACY = 0.90  # train_torch.py reaches ~0.94-0.95 with 2 ranks


def _run(cmd, timeout, **kw):
    """subprocess.run with the whole process group killed on timeout (hvdrun's
    ranks too); returns (returncode, output)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True, **kw)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        pytest.fail(f"{cmd} did not finish within {timeout} s; output:\n"
                    f"{out.decode('utf-8', 'replace')[-6000:]}")
    return p.returncode, out.decode("utf-8", "replace")


def _check(cmd, timeout, **kw):
    rc, out = _run(cmd, timeout, **kw)
    assert rc == 0, f"{cmd} exited {rc}; output:\n{out[-6000:]}"
    return out


def _mentions_repo(value):
    return any(part == REPO or part.startswith(REPO + os.sep)
               for part in re.split(r"[\s:=,;]+", value))


def _cmake_true(value):
    return value.upper() in ("ON", "TRUE", "YES", "Y", "1")


@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    """Builds the wheel; yields (wheel path, transports the build reported,
    build folder). The build folder is removed afterwards."""
    if importlib.util.find_spec("scikit_build_core") is None:
        pytest.fail(f"scikit-build-core is not installed for {sys.executable}: "
                    "pip install -r bindings/python/requirements-test.txt "
                    "(scripts/install-deps.sh python does)")
    version = importlib.metadata.version("scikit-build-core")
    major, minor = (int(x) for x in version.split(".")[:2])
    assert (major, minor) >= (0, 10), f"scikit-build-core {version} is older than 0.10"
    for tool in ("auditwheel", "patchelf"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed: scripts/install-deps.sh wheel")
    root = tmp_path_factory.mktemp("wheel")
    build_dir, out_dir = root / "build", root / "dist"
    env = dict(os.environ)
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    env["HVD_WHEEL_BUILD_DIR"] = str(build_dir)
    env["PYTHON"] = sys.executable
    t0 = time.monotonic()
    rc, log = _run([os.path.join(REPO, "scripts", "build-wheel.sh"), str(out_dir)],
                   BUILD_TIMEOUT, env=env, cwd=str(root))
    seconds = time.monotonic() - t0
    (root / "build.log").write_text(log)
    assert rc == 0, f"build-wheel.sh exited {rc} after {seconds:.0f} s; log tail:\n{log[-8000:]}"
    print(f"wheel built and repaired in {seconds:.0f} s (log: {root / 'build.log'})")
    wheels = sorted(out_dir.glob("hvd-*.whl"))
    assert len(wheels) == 1, f"expected one hvd wheel in {out_dir}, found {wheels}"
    m = re.search(r"hvd transports: local=\S+((?: \w+=\S+)+)", log)
    assert m, f"the CMake configure line 'hvd transports: ...' is not in the log:\n{log[-4000:]}"
    said = dict(kv.split("=", 1) for kv in m.group(1).split())
    built = {t: _cmake_true(said.get(t, "OFF")) for t in PLUGINS + ("cuda_kernels",)}
    yield str(wheels[0]), built, str(build_dir)
    shutil.rmtree(build_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def venv(wheel, tmp_path_factory):
    """A fresh venv holding the wheel; a dict with its paths, a clean
    environment and an empty working folder outside the repository."""
    whl, _, _ = wheel
    root = tmp_path_factory.mktemp("venv")
    vdir = root / "venv"
    _check([sys.executable, "-m", "venv", "--system-site-packages", str(vdir)], 300)
    py = str(vdir / "bin" / "python")
    env = {}
    dropped = []
    for k, v in os.environ.items():
        if (k.startswith("HVD_") or k in ("PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONHOME",
                                           "VIRTUAL_ENV", "PWD", "OLDPWD")
                or _mentions_repo(v)):
            dropped.append(k)
            continue
        env[k] = v
    env["PATH"] = f"{vdir / 'bin'}:{SYSTEM_PATH}"
    env["VIRTUAL_ENV"] = str(vdir)
    env["PIP_ROOT_USER_ACTION"] = "ignore"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    print(f"clean environment: dropped {sorted(dropped)}")
    cwd = root / "work"
    cwd.mkdir()
    _check([py, "-m", "pip", "install", "--no-deps", "--no-index", whl], 300, env=env,
           cwd=str(cwd))
    rc, out = _run([py, "-c", "import torch, sklearn, tqdm"], 300, env=env, cwd=str(cwd))
    assert rc == 0, ("the venv (--system-site-packages) cannot import torch, scikit-learn and "
                     f"tqdm, which train_torch.py needs: install them for {sys.executable} "
                     f"(scripts/install-deps.sh python)\n{out[-3000:]}")
    platlib = _check([py, "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
                     60, env=env, cwd=str(cwd)).strip()
    return {"dir": str(vdir), "python": py, "bin": str(vdir / "bin"), "env": env,
            "cwd": str(cwd), "pkg": os.path.join(platlib, "hvd"),
            "libs": os.path.join(platlib, "hvd.libs")}


def _native_files(v):
    files = [os.path.join(v["pkg"], f) for f in sorted(os.listdir(v["pkg"])) if f.endswith(".so")]
    files += [os.path.join(v["libs"], f) for f in sorted(os.listdir(v["libs"]))]
    return files + [os.path.join(v["bin"], "hvdrun")]


# What auditwheel repair copies into hvd.libs/ (as <name>-<hash>.so.<n>): Gloo
# (Debian's libgloo.so.0) with what it links. libcrypto is linked statically.
VENDORED = {"libgloo", "libhiredis", "libibverbs", "libnl-3", "libnl-route-3"}
# The optional transports' own libraries: never in the wheel; each plugin may
# need these (found on the user's machine at run time) and nothing else
# outside the policy.
OPTIONAL = {"mpi": r"libmpi\.so\.\d+", "ucx": r"libuc[pstm]\.so\.\d+",
            "nccl": r"lib(cudart|nccl)\.so\.\d+", "cuda_kernels": r"libcudart\.so\.\d+"}


def _vendored_stem(name):
    m = re.fullmatch(r"(.+)-[0-9a-f]{8}\.so(\.\d+)*", name)
    return m.group(1) if m else None


def _policy(tag):
    """auditwheel's manylinux policy for a tag: its library whitelist."""
    import auditwheel  # installed with the wheel tools (checked by the fixture)
    path = os.path.join(os.path.dirname(auditwheel.__file__), "policy", "manylinux-policy.json")
    with open(path) as f:
        policies = {p["name"]: p for p in json.load(f)}
    name = tag[:-len("_x86_64")] if tag.endswith("_x86_64") else tag
    assert name in policies, f"{name} is no manylinux policy of auditwheel's: {sorted(policies)}"
    return policies[name]


def _wheel_tag(whl):
    m = re.fullmatch(r"hvd-0\.1\.0-py3-none-(manylinux_2_(\d+)_x86_64)\.whl",
                     os.path.basename(whl))
    assert m, f"{whl} is not a py3-none-manylinux_2_N_x86_64 wheel"
    return m.group(1), int(m.group(2))


def test_wheel_contents(wheel):
    whl, built, _ = wheel
    _wheel_tag(whl)
    print(f"wheel {os.path.basename(whl)}: {os.path.getsize(whl) / 2**20:.1f} MiB")
    with zipfile.ZipFile(whl) as z:  # auditwheel's zip also lists folders
        infos = {i.filename: i for i in z.infolist() if not i.is_dir()}
    names = set(infos)
    vendored = {n for n in names if n.startswith("hvd.libs/")}
    stems = {_vendored_stem(n.split("/", 1)[1]) for n in vendored}
    assert stems == VENDORED, f"hvd.libs/ holds {sorted(vendored)}, expected {sorted(VENDORED)}"
    native = {n for n in names if (n.endswith(".so") or ".data/" in n) and n not in vendored}
    want = {"hvd/libhvd.so", "hvd-0.1.0.data/scripts/hvdrun"}
    want |= {f"hvd/libhvd_transport_{t}.so" for t in PLUGINS if built.get(t)}
    if built.get("cuda_kernels"):  # the core's CUDA kernels, loaded next to libhvd.so
        want.add("hvd/libhvd_cuda_kernels.so")
    assert built["gloo"], "the wheel build found no Gloo: the wheel would have no multi-host transport"
    assert native == want, f"native files {sorted(native)}, expected {sorted(want)}"
    for py in ("__init__", "_api", "_c_api", "_numpy", "_ops", "torch/__init__",
               "tensorflow/__init__", "keras", "spark", "torch/mpi_ops", "torch/functions",
               "torch/_collectives", "torch/_optimizer", "torch/elastic/__init__",
               "torch/elastic/sampler", "torch/elastic/state", "tensorflow/mpi_ops",
               "tensorflow/functions", "tensorflow/_collectives", "tensorflow/_execution",
               "tensorflow/_keras_optimizer", "tensorflow/elastic", "_tf_kernels"):
        assert f"hvd/{py}.py" in names, f"hvd/{py}.py missing from the wheel"
    for src in ("_tf_kernels.cc", "_tf_ops.cc"):  # built on the user's machine
        assert f"hvd/{src}" in names, f"hvd/{src} missing from the wheel"
    for n in want:  # real files (a wheel cannot hold links), hvdrun executable
        mode = infos[n].external_attr >> 16
        assert not stat.S_ISLNK(mode), f"{n} is a symlink in the wheel"
        assert infos[n].file_size > 10000, f"{n} is only {infos[n].file_size} bytes"
    assert (infos["hvd-0.1.0.data/scripts/hvdrun"].external_attr >> 16) & 0o111, \
        "hvdrun is not executable in the wheel"
    assert not [n for n in names if n.endswith(".pyc")]


def _without_optional_plugins(whl, out_dir):
    """A copy of the wheel without the optional transports' plugins (and
    their RECORD lines): auditwheel show follows a plugin's MPI/UCX/CUDA/NCCL
    library into this machine's copy of it, which is the user's business (the
    repair excluded those libraries); the plugins themselves are checked by
    test_needed_libraries_are_the_policys."""
    optional = {f"hvd/libhvd_transport_{t}.so" for t in ("mpi", "ucx", "nccl")}
    optional.add("hvd/libhvd_cuda_kernels.so")
    os.makedirs(out_dir, exist_ok=True)
    dst = os.path.join(out_dir, os.path.basename(whl))
    with zipfile.ZipFile(whl) as z, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as o:
        for info in z.infolist():
            if info.filename in optional:
                continue
            data = z.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                data = b"".join(line for line in data.splitlines(True)
                                if line.split(b",")[0].decode() not in optional)
            o.writestr(info, data)
    return dst


def test_auditwheel_show(wheel, tmp_path):
    whl, _, _ = wheel
    tag, glibc_minor = _wheel_tag(whl)
    out = _check(["auditwheel", "show", _without_optional_plugins(whl, str(tmp_path))], 120)
    flat = " ".join(out.split())
    m = re.search(r'consistent with the following platform tag: "(manylinux_2_\d+_x86_64)"', flat)
    assert m, f"auditwheel show names no manylinux tag:\n{out}"
    assert m.group(1) == tag, f"auditwheel show says {m.group(1)}, the file name {tag}"
    print(f"auditwheel show: {tag} (glibc 2.{glibc_minor})")


def test_needed_libraries_are_the_policys(wheel, venv):
    """Every native file's DT_NEEDED: the policy's libraries, files inside the
    wheel, or (optional transports) their own MPI/UCX/CUDA/NCCL library; and
    for the files every user loads (libhvd.so, Gloo, hvdrun, hvd.libs/) ldd
    resolves every library to the wheel or to the policy's libraries."""
    whl, _, _ = wheel
    tag, _ = _wheel_tag(whl)
    allowed = set(_policy(tag)["lib_whitelist"]) | {"ld-linux-x86-64.so.2"}
    inside = set(os.listdir(venv["libs"])) | {"libhvd.so"}
    for f in _native_files(venv):
        name = os.path.basename(f)
        m = re.fullmatch(r"libhvd_(?:transport_)?(\w+)\.so", name)
        optional = OPTIONAL.get(m.group(1)) if m else None
        dyn = _check(["readelf", "-d", f], 60, env=venv["env"])
        for needed in re.findall(r"\(NEEDED\)\s+Shared library: \[(.*?)\]", dyn):
            ok = needed in allowed or needed in inside or \
                (optional is not None and re.fullmatch(optional, needed))
            assert ok, f"{f} needs {needed}: not in {tag}'s policy, the wheel or its transport"
        if optional is not None:
            continue
        ldd = _check(["ldd", f], 60, env=venv["env"])
        for line in ldd.splitlines():
            parts = line.split("=>")
            lib = parts[0].strip().split(" (")[0]
            target = parts[-1].strip().split(" (")[0]
            if lib.startswith("linux-vdso") or os.path.basename(lib) in allowed:
                continue
            assert target.startswith((venv["pkg"] + os.sep, venv["libs"] + os.sep)), \
                f"{f} resolves {line.strip()} outside the wheel and the policy's libraries"


def test_available_transports(wheel, venv):
    """hvd.available_transports() says what loads here: local and Gloo always
    (Gloo is inside the wheel); the optional ones where their library is."""
    _, built, _ = wheel
    script = ("import json, hvd; print('RESULT ' + json.dumps("
              "{k: list(v) for k, v in hvd.available_transports().items()}))")
    out = _check([venv["python"], "-c", script], 120, env=venv["env"], cwd=venv["cwd"])
    res = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])
    assert res["local"] == [True, "built in"], res
    assert res["gloo"] == [True, "loads"], res
    for t in ("mpi", "ucx", "nccl"):
        ok, why = res[t]
        if not built[t]:
            assert not ok and f"libhvd_transport_{t}.so was not found" in why, res[t]
        elif not ok:  # the plugin is there; its library is not: say what to install
            assert "install" in why and ".so" in why, res[t]
    print("available transports: " + ", ".join(f"{k}={'yes' if v[0] else 'no'}"
                                                for k, v in res.items()))


def test_rpath_and_ldd(wheel, venv):
    _, _, build_dir = wheel
    files = _native_files(venv)
    assert len(files) >= 3, files  # libhvd.so, a plugin, hvdrun
    for f in files:
        dyn = _check(["readelf", "-d", f], 60, env=venv["env"])
        for m in re.finditer(r"\((RPATH|RUNPATH)\).*\[(.*)\]", dyn):
            for d in m.group(2).split(":"):
                assert not (d.startswith(build_dir) or _mentions_repo(d)), \
                    f"{f}: {m.group(1)} {d} points into the build tree or the repository"
        ldd = _check(["ldd", f], 60, env=venv["env"])
        assert "not found" not in ldd, f"{f} has unresolved libraries:\n{ldd}"
        for line in ldd.splitlines():
            target = line.split("=>")[-1].strip().split(" (")[0]
            assert not (target.startswith(build_dir) or _mentions_repo(target)), \
                f"{f} resolves {line.strip()} into the build tree"


def test_import_finds_package_library(venv):
    script = textwrap.dedent("""
        import json, shutil, sys
        import hvd, hvd._c_api as C
        hvd.init()
        print("RESULT " + json.dumps({
            "module": hvd.__file__, "library": hvd.library_path(),
            "candidates": [p for _, p in C.candidate_paths()],
            "plugins": {t: C.plugin_path(t) for t in ("gloo", "mpi")},
            "size": hvd.size(), "transport": hvd.transport(), "prefix": sys.prefix,
            "sys_path": sys.path, "hvdrun": shutil.which("hvdrun")}))
        hvd.shutdown()
    """)
    out = _check([venv["python"], "-c", script], 120, env=venv["env"], cwd=venv["cwd"])
    res = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])
    pkg = venv["pkg"]
    assert res["module"] == os.path.join(pkg, "__init__.py")
    assert res["library"] == os.path.join(pkg, "libhvd.so")
    assert res["candidates"] == [os.path.join(pkg, "libhvd.so")], res["candidates"]
    assert res["plugins"]["gloo"] == os.path.join(pkg, "libhvd_transport_gloo.so")
    assert (res["size"], res["transport"], res["prefix"]) == (1, "local", venv["dir"])
    assert res["hvdrun"] == os.path.join(venv["bin"], "hvdrun")
    assert not [p for p in res["sys_path"] if _mentions_repo(p)], res["sys_path"]
    version = _check(["hvdrun", "--version"], 60, env=venv["env"], cwd=venv["cwd"])
    assert version.startswith("hvdrun 0.1.0"), version


# Each rank writes what it sees to probe-<rank>.json (output lines of two
# ranks may interleave under mpirun).
PROBE = """
import json, os, sys
import numpy as np
import hvd
hvd.init()
total = hvd.allreduce(np.array([hvd.rank() + 1.0]), op=hvd.Sum, name="probe")
with open("/proc/self/maps") as f:
    mapped = sorted({line.split()[-1] for line in f if "libhvd" in line})
with open(os.path.join(sys.argv[1], f"probe-{hvd.rank()}.json"), "w") as f:
    json.dump({"rank": hvd.rank(), "size": hvd.size(), "transport": hvd.transport(),
               "sum": float(total[0]), "library": hvd.library_path(), "mapped": mapped,
               "prefix": sys.prefix, "sys_path": sys.path, "env": dict(os.environ)}, f)
hvd.shutdown()
"""


@pytest.mark.parametrize("transport", ["gloo", "mpi"])
def test_hvdrun_ranks_use_package_files(wheel, venv, transport):
    _, built, _ = wheel
    if not built[transport]:
        pytest.skip(f"the wheel build found no {transport} (CMake configure reported it off)")
    if transport == "mpi" and shutil.which("mpirun", path=venv["env"]["PATH"]) is None:
        pytest.skip("mpirun is not on the system PATH")
    probe = os.path.join(venv["cwd"], "probe.py")
    with open(probe, "w") as f:
        f.write(PROBE)
    out_dir = os.path.join(venv["cwd"], f"probe-{transport}")
    os.mkdir(out_dir)
    out = _check(["hvdrun", "-np", "2", "--transport", transport, "python", "probe.py", out_dir],
                 300, env=venv["env"], cwd=venv["cwd"])
    assert sorted(os.listdir(out_dir)) == ["probe-0.json", "probe-1.json"], out[-4000:]
    results = []
    for name in sorted(os.listdir(out_dir)):
        with open(os.path.join(out_dir, name)) as f:
            results.append(json.load(f))
    assert [r["rank"] for r in results] == [0, 1]
    pkg = venv["pkg"]
    for r in results:
        assert (r["size"], r["transport"], r["sum"]) == (2, transport, 3.0), r
        assert r["prefix"] == venv["dir"], r["prefix"]
        assert r["library"] == os.path.join(pkg, "libhvd.so")
        assert r["mapped"] == [os.path.join(pkg, "libhvd.so"),
                               os.path.join(pkg, f"libhvd_transport_{transport}.so")], r["mapped"]
        assert not [p for p in r["sys_path"] if _mentions_repo(p)], r["sys_path"]
        leaked = {k: v for k, v in r["env"].items() if _mentions_repo(v)}
        assert not leaked, f"rank {r['rank']} sees the repository in {leaked}"
        assert "HVD_LIBRARY_PATH" not in r["env"] and "LD_LIBRARY_PATH" not in r["env"]


def test_train_torch_example(venv):
    example = os.path.join(venv["cwd"], "train_torch.py")
    shutil.copyfile(os.path.join(REPO, "examples", "python", "train_torch.py"), example)
    ckpt = os.path.join(venv["cwd"], "checkpoints")
    t0 = time.monotonic()
    out = _check(["hvdrun", "-np", "2", "python", "train_torch.py", "--checkpoint-dir", ckpt],
                 600, env=venv["env"], cwd=venv["cwd"])
    seconds = time.monotonic() - t0
    m = re.search(r"test accuracy: (\d\.\d+) \((\d+)/(\d+), 2 rank\(s\)\)", out)
    assert m, f"no 2-rank test accuracy line in the output:\n{out[-4000:]}"
    acc, correct, total = float(m.group(1)), int(m.group(2)), int(m.group(3))
    print(f"train_torch.py, 2 ranks from the wheel: accuracy {acc:.4f} "
          f"({correct}/{total}) in {seconds:.0f} s")
    assert total == 450 and abs(acc - correct / total) < 1e-4
    assert acc >= MIN_ACCURACY, f"accuracy {acc} below {MIN_ACCURACY}:\n{out[-4000:]}"
    assert len(re.findall(r"epoch \d+: mean train loss", out)) == 10
    assert os.path.isfile(os.path.join(ckpt, "checkpoint.pt"))
