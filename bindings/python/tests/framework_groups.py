"""Which pytest process a test file runs in, and the guard that keeps
TensorFlow and torch out of one process.

TensorFlow and torch cannot share a process: both bring their own LLVM, and
the second copy to register LLVM's command-line options aborts the process
(with tensorflow-cpu 2.21 and torch 2.15 / triton 3.9: ``import tensorflow``,
then anything that makes torch load triton, such as the first optimizer step,
dies with "LLVM ERROR: Option 'bitcode-mdindex-threshold' registered more than
once!"). Whether a given pair of wheels clashes changes from release to
release, so the suite never puts them together: run_tests.sh runs one pytest
process per group, and this module decides the groups.

  core        neither framework (numpy, mpi4py, pyspark, ...)
  torch       the file imports torch (directly or through hvd.torch)
  tensorflow  the file imports tensorflow or keras (directly or through
              hvd.tensorflow / hvd.keras)

A test file's group is read from its source, without importing it: every
import statement in the file (also those inside test functions) and every
``pytest.importorskip("x")`` / ``importlib.import_module("x")`` /
``__import__("x")`` / ``harness.have_module("x")`` with a literal name, plus the module-level imports of the
modules it imports from this package or the tests folder (``harness``,
``workers.torch_ops``, ``hvd.keras``, ...), followed transitively. Code that
runs in subprocesses (strings for ``python -c``, worker scripts started by
hvdrun) does not count: those processes are separate. A file that needs both
frameworks in the pytest process is an error: move one side into a subprocess.

What the scan cannot see (a computed module name, a helper that imports
lazily) the guard catches at run time: in a pytest process with this plugin,
importing one framework while the other is loaded raises
``FrameworkConflictError`` (an ImportError, so the second framework is never
loaded and cannot abort the process) and fails the test or the file being
collected, even where the ImportError itself was caught and ignored. Both
frameworks found in sys.modules fails the run the same way.

As a plugin (``conftest.py`` calls ``install``; or ``pytest -p
framework_groups``) it also:
  - keeps only the files of group $HVD_TEST_GROUP (all files when unset);
    named files of other groups are dropped from the command line;
  - writes the group's counts to $HVD_TEST_REPORT (JSON, updated after every
    test, so a process that dies still leaves what it had counted).

As a script (run_tests.sh uses it):
  framework_groups.py groups              the group names, in run order
  framework_groups.py classify [FILE...]  each test file and its group
  framework_groups.py versions            python and framework versions
  framework_groups.py combine SECONDS STOP REPORT RC [REPORT RC ...]
      one closing line over the groups' reports, in pytest's format; exit
      status 0 only if every group passed (see ``combine``)
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)  # bindings/python: the hvd package lives here

# Frameworks that must not share a process, by the top-level modules that
# load them. Each one is also a group; "core" is the group of neither.
FRAMEWORKS = {
    "torch": ("torch", "torchvision", "torchaudio", "triton"),
    "tensorflow": ("tensorflow", "keras", "tf_keras"),
}
CORE = "core"
GROUPS = (CORE, "torch", "tensorflow")  # run order: cheapest first

# Calls that import the module named by their first (literal) argument.
_IMPORT_CALLS = ("importorskip", "import_module", "__import__", "have_module")


class ClassificationError(Exception):
    """A test file that needs more than one framework in the pytest process."""


def framework_of(module):
    """The framework a module name loads, or None."""
    top = module.split(".", 1)[0]
    for fw, tops in FRAMEWORKS.items():
        if top in tops:
            return fw
    return None


def _resolve(module, roots):
    """The files `import module` runs from this package or the tests folder:
    the module and its parent packages. Empty for anything else."""
    parts = module.split(".")
    for root in roots:
        files = []
        for i in range(1, len(parts) + 1):
            base = os.path.join(root, *parts[:i])
            if os.path.isfile(os.path.join(base, "__init__.py")):
                files.append(os.path.join(base, "__init__.py"))
            elif os.path.isfile(base + ".py") and i == len(parts):
                files.append(base + ".py")
            elif os.path.isdir(base) and i < len(parts):
                continue  # a namespace package (tests/workers)
            else:
                files = None
                break
        if files:
            return files
    return []


def _package_of(path, roots):
    """Dotted package name of a file under one of roots ('' at the top)."""
    for root in roots:
        rel = os.path.relpath(os.path.dirname(path), root)
        if not rel.startswith(os.pardir):
            return "" if rel == os.curdir else rel.replace(os.sep, ".")
    return ""


def _imports(path, roots, everywhere):
    """Module names imported by the file. everywhere=False: only what runs
    when the module is imported (not inside functions)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    names = []

    def visit(node, in_function):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            in_function = True
        if everywhere or not in_function:
            if isinstance(node, ast.Import):
                names.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the file's own package
                    pkg = _package_of(path, roots)
                    parts = pkg.split(".") if pkg else []
                    parts = parts[:len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                if base:
                    names.append(base)
                # `from pkg import sub` may import the submodule pkg.sub
                names.extend(f"{base}.{a.name}" if base else a.name for a in node.names
                             if a.name != "*")
            elif isinstance(node, ast.Call):
                func = node.func
                fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if (fname in _IMPORT_CALLS and node.args and isinstance(node.args[0], ast.Constant)
                        and isinstance(node.args[0].value, str)):
                    names.append(node.args[0].value)
        for child in ast.iter_child_nodes(node):
            visit(child, in_function)

    visit(tree, False)
    return names


def frameworks_of_file(path, roots=None):
    """{framework: import chain} for the frameworks a test file loads into
    the process that imports and runs it."""
    path = os.path.abspath(path)
    roots = roots or [os.path.dirname(path), PKG_ROOT]
    found = {}
    seen = {path}
    pending = [(path, True, [os.path.basename(path)])]
    while pending:
        file, everywhere, chain = pending.pop()
        for name in _imports(file, roots, everywhere):
            fw = framework_of(name)
            if fw is not None:
                found.setdefault(fw, " -> ".join(chain + [name]))
                continue
            for dep in _resolve(name, roots):
                if dep not in seen:
                    seen.add(dep)
                    pending.append((dep, False, chain + [name]))
    return found


def group_of_file(path, roots=None):
    """The group a test file runs in; ClassificationError if it needs two."""
    found = frameworks_of_file(path, roots)
    if len(found) > 1:
        raise ClassificationError(
            f"{os.path.basename(path)} loads {' and '.join(sorted(found))} into one pytest process "
            f"({'; '.join(found[k] for k in sorted(found))}); they cannot share a process "
            "(both bundle LLVM: the process can abort with 'LLVM ERROR: Option ... registered "
            "more than once!'). Move one side into a subprocess or split the file.")
    return next(iter(found), CORE)


def loaded_frameworks():
    """Frameworks with a module in sys.modules now."""
    return [fw for fw, tops in FRAMEWORKS.items() if any(t in sys.modules for t in tops)]


def versions():
    """'python 3.11.7, numpy 2.4.6, torch 2.15.0, ...' from package metadata
    (nothing is imported: importing torch and tensorflow here would be the
    very clash this module is about)."""
    import importlib.metadata as md
    import importlib.util
    dists = (("numpy", ("numpy",)), ("torch", ("torch",)), ("triton", ("triton",)),
             ("tensorflow", ("tensorflow", "tensorflow-cpu", "tensorflow-intel",
                             "tensorflow-macos", "tf-nightly", "tf-nightly-cpu")),
             ("keras", ("keras",)), ("mpi4py", ("mpi4py",)), ("pyspark", ("pyspark",)))
    out = [f"python {sys.version.split()[0]}"]
    for mod, names in dists:
        for dist in names:
            try:
                v = md.version(dist)
            except md.PackageNotFoundError:
                continue
            out.append(f"{mod} {v}" + ("" if dist == mod else f" ({dist})"))
            break
        else:
            ok = importlib.util.find_spec(mod) is not None
            out.append(f"{mod} {'(version unknown)' if ok else 'not installed'}")
    return ", ".join(out)


# ---------------------------------------------------------------------------
# The pytest plugin.

class FrameworkConflictError(ImportError):
    """Refused import of a framework that cannot share this process."""


class _Guard:
    """A sys.meta_path entry that refuses to import one framework while the
    other is loaded, and remembers every refusal. Looking a module up
    (importlib.util.find_spec, as torch does for tensorflow) still works:
    only loading it is refused."""

    def __init__(self):
        self.conflicts = []  # messages not yet turned into a failure
        self.reported_modules = False

    def find_spec(self, fullname, path=None, target=None):
        fw = framework_of(fullname)
        if fw is None or "." in fullname:
            return None
        others = [o for o in loaded_frameworks() if o != fw]
        if not others:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None  # not installed: the usual ModuleNotFoundError
        msg = (f"refused to import {fullname!r} into this pytest process: {others[0]} is already "
               f"loaded, and {fw} and {others[0]} cannot share a process (both bundle LLVM; the "
               "process can abort with \"LLVM ERROR: Option ... registered more than once!\"). "
               "Each pytest process of run_tests.sh runs one group of test files "
               f"({', '.join(GROUPS)}, by the frameworks a file imports; see "
               "tests/framework_groups.py): import the framework at module level so the file is "
               "classified, or move that code into a subprocess.")
        spec.loader = _RefusingLoader(self, msg)  # a fresh spec: ours to change
        return spec

    def take(self):
        """Messages for conflicts since the last call ([] if none)."""
        out, self.conflicts = self.conflicts, []
        loaded = loaded_frameworks()
        if len(loaded) > 1 and not self.reported_modules:
            self.reported_modules = True
            out.append(f"{' and '.join(loaded)} are both loaded in this pytest process "
                       f"(sys.modules); they cannot share a process (both bundle LLVM). "
                       "See tests/framework_groups.py.")
        return out


class _RefusingLoader:
    def __init__(self, guard, msg):
        self.guard, self.msg = guard, msg

    def create_module(self, spec):
        self.guard.conflicts.append(self.msg)
        raise FrameworkConflictError(self.msg)

    def exec_module(self, module):  # not reached: create_module refuses
        raise FrameworkConflictError(self.msg)


class Plugin:
    def __init__(self, config):
        self.config = config
        self.group = os.environ.get("HVD_TEST_GROUP") or None
        if self.group is not None and self.group not in GROUPS:
            raise ValueError(f"HVD_TEST_GROUP={self.group!r}: not one of {', '.join(GROUPS)}")
        self.report_path = os.environ.get("HVD_TEST_REPORT") or None
        self.guard = _Guard()
        self.kept_files = 0       # files of this group that were collected
        self.named_dropped = []   # named files of other groups
        self.deselected = 0
        self.collected = 0
        self.started = time.time()
        self._groups = {}

    # -- grouping --------------------------------------------------------

    def group_of(self, path):
        path = os.path.abspath(str(path))
        if path not in self._groups:
            try:
                self._groups[path] = group_of_file(path)
            except ClassificationError as e:
                self._groups[path] = e
            except (OSError, SyntaxError):
                self._groups[path] = CORE  # pytest reports the file itself
        return self._groups[path]

    def pytest_configure(self, config):
        sys.meta_path.insert(0, self.guard)
        if self.group is None:
            return
        # Files named on the command line are collected even when a hook
        # drops them, as "not found": drop other groups' files here instead.
        keep = []
        for arg in config.args:
            path = arg.split("::", 1)[0]
            full = os.path.join(str(config.invocation_params.dir), path)
            if os.path.isfile(full) and full.endswith(".py"):
                g = self.group_of(full)
                if isinstance(g, str) and g != self.group:
                    self.named_dropped.append(arg)
                    continue
            keep.append(arg)
        config.args[:] = keep

    def pytest_unconfigure(self, config):
        if self.guard in sys.meta_path:
            sys.meta_path.remove(self.guard)

    def pytest_report_header(self, config):
        return [f"framework group: {self.group or 'all (HVD_TEST_GROUP unset)'}; {versions()}"]

    @pytest.hookimpl(wrapper=True)
    def pytest_collect_file(self, file_path, parent):
        cols = yield
        if not cols or not str(file_path).endswith(".py"):
            return cols
        g = self.group_of(file_path)
        if isinstance(g, ClassificationError):
            # reported once, by the core group (or the ungrouped run)
            if self.group not in (None, CORE):
                return []
            self.kept_files += 1
            return [Unrunnable.from_parent(parent, path=file_path, message=str(g))]
        if self.group is not None and g != self.group:
            return []
        self.kept_files += 1
        return cols

    # -- the guard -------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector):
        rep = yield
        self._fail_on_conflict(rep)
        return rep

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        rep = yield
        self._fail_on_conflict(rep)
        return rep

    def _fail_on_conflict(self, rep):
        msgs = self.guard.take()
        if msgs:
            text = "\n".join(["FrameworkConflictError:"] + msgs)
            if rep.failed and rep.longrepr:
                text += "\n\n" + str(rep.longrepr)
            rep.outcome = "failed"
            rep.longrepr = text

    # -- the report ------------------------------------------------------

    def pytest_deselected(self, items):
        self.deselected += len(items)

    def pytest_collection_finish(self, session):
        self.collected = len(session.items) + self.deselected
        self._write(finished=False)

    def pytest_runtest_logreport(self, report):
        if report.when == "teardown":
            self._write(finished=False)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        self._write(finished=True, exitstatus=int(exitstatus))

    def _counts(self):
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is None:
            return {}
        parts, _ = tr.build_summary_stats_line()
        counts = {}
        for text, _markup in parts:
            m = re.match(r"(\d+) (\w+)", text)
            if m:
                key = {"errors": "error", "warnings": "warning"}.get(m.group(2), m.group(2))
                counts[key] = int(m.group(1))
        return counts

    def _write(self, finished, exitstatus=None):
        if self.report_path is None:
            return
        data = {"group": self.group, "counts": self._counts(), "collected": self.collected,
                "files": self.kept_files, "named_dropped": self.named_dropped,
                "finished": finished, "exitstatus": exitstatus,
                "seconds": round(time.time() - self.started, 2)}
        tmp = self.report_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, self.report_path)


class Unrunnable(pytest.File):
    """A test file that cannot run in any group: one collection error."""

    def __init__(self, *, message, **kw):
        super().__init__(**kw)
        self.message = message

    def collect(self):
        raise ClassificationError(self.message)

    def repr_failure(self, excinfo):
        return f"ClassificationError: {excinfo.value}"


PLUGIN_NAME = "hvd-framework-groups"


def install(config):
    """Registers the plugin (from conftest.py's pytest_configure)."""
    if not config.pluginmanager.has_plugin(PLUGIN_NAME):
        config.pluginmanager.register(Plugin(config), PLUGIN_NAME)


pytest_configure = install  # for `pytest -p framework_groups`


# ---------------------------------------------------------------------------
# run_tests.sh's side.

_ORDER = ("failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "warning", "error")


def _fmt_counts(counts, seconds):
    parts = []
    for key in _ORDER:
        n = counts.get(key, 0)
        if n:
            word = key + "s" if key in ("warning", "error") and n != 1 else key
            parts.append(f"{n} {word}")
    dur = f"{seconds:.2f}s"
    if seconds >= 60:
        s = int(seconds)
        dur += f" ({s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d})"
    return f"{', '.join(parts) or 'no tests ran'} in {dur}"


def combine(seconds, stopped, runs):
    """runs: [(report path, exit code of its pytest process)], in GROUPS order
    as run. Returns (lines to print, exit status). A group fails when its
    pytest failed (exit 1), did not finish (crashed, killed: no final report),
    exited with a usage or internal error, or collected nothing (not even a
    skipped module, nor tests that -k/-m deselected). A group is left out when
    files were named on the command line and none of them is in the group.
    The whole run fails when nothing passed or failed at all."""
    total = {}
    lines = []
    status = 0
    for path, rc in runs:
        try:
            with open(path) as f:
                rep = json.load(f)
        except (OSError, ValueError):
            rep = {}
        group = rep.get("group") or os.path.basename(path).split(".")[0]
        counts = dict(rep.get("counts") or {})
        problem = None
        if not rep.get("finished"):
            problem = (f"pytest did not finish (exit status {rc}"
                       + (f", signal {rc - 128}" if rc > 128 else "") + "); counts up to then kept")
        elif rc == 5 and rep.get("files", 0) == 0 and rep.get("named_dropped"):
            lines.append(f"run_tests.sh: [{group}] none of the named test files is in this group")
            continue
        elif rc == 5 and rep.get("collected", 0) == 0 and not counts.get("skipped"):
            problem = "collected no tests"
        elif rc not in (0, 1, 5):
            problem = f"pytest exited with status {rc}" + (" (interrupted)" if rc == 2 else "")
        elif rc == 1 and not (counts.get("failed") or counts.get("error")):
            problem = "pytest exited with status 1 without a failed test"
        if problem:
            # one error for the group, unless its own counts show what went wrong
            if not rep.get("finished") or not (counts.get("failed") or counts.get("error")):
                counts["error"] = counts.get("error", 0) + 1
            status = 1
        if rc == 1:
            status = 1
        lines.append(f"run_tests.sh: [{group}] {_fmt_counts(counts, rep.get('seconds', 0))}"
                     + (f" -- ERROR: {problem}" if problem else ""))
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
    for g in stopped:
        lines.append(f"run_tests.sh: [{g}] not run (-x: stopped after a failing group)")
    if not any(total.get(k) for k in ("passed", "failed", "xfailed", "xpassed", "error")):
        lines.append("run_tests.sh: no test ran in any group")
        status = 1
    if any(total.get(k) for k in ("failed", "error")):
        status = 1
    lines.append(f"=== {_fmt_counts(total, seconds)} ===")
    return lines, status


def main(argv):
    cmd = argv[0] if argv else ""
    if cmd == "groups":
        print(" ".join(GROUPS))
    elif cmd == "versions":
        print(versions())
    elif cmd == "classify":
        import glob
        files = argv[1:] or sorted(glob.glob(os.path.join(HERE, "test_*.py")))
        bad = 0
        for f in files:
            try:
                g = group_of_file(f)
                why = frameworks_of_file(f).get(g, "")
                print(f"{g:<11} {os.path.relpath(f)}" + (f"  ({why})" if why else ""))
            except ClassificationError as e:
                bad = 1
                print(f"{'ERROR':<11} {os.path.relpath(f)}  ({e})")
        return bad
    elif cmd == "combine":
        seconds, stopped = float(argv[1]), [g for g in argv[2].split(",") if g]
        rest = argv[3:]
        runs = [(rest[i], int(rest[i + 1])) for i in range(0, len(rest), 2)]
        lines, status = combine(seconds, stopped, runs)
        print("\n".join(lines))
        return status
    else:
        print(__doc__.split("As a script")[1], file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
