"""The suite's framework groups (framework_groups.py): how test files are
classified, the guard that keeps TensorFlow and torch out of one pytest
process, the group filter and report, and run_tests.sh's closing line.

The guard runs in pytest subprocesses over stand-in `torch` / `tensorflow`
packages: the logic is the same, and no real framework is loaded."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

import framework_groups as fg
import harness

HERE = os.path.dirname(os.path.abspath(__file__))


def _write(root, files):
    for name, text in files.items():
        path = os.path.join(str(root), name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text))


# -- classification ---------------------------------------------------------

def test_real_test_files():
    want = {"test_single_torch.py": "torch", "test_mp_torch.py": "torch",
            "test_examples.py": "torch", "test_mp_keras.py": "tensorflow",
            "test_single_numpy.py": "core", "test_c_api.py": "core", "test_mp_numpy.py": "core",
            "test_framework_groups.py": "core", "test_framework_warnings.py": "core"}
    for name, group in want.items():
        assert fg.group_of_file(os.path.join(HERE, name)) == group, name
    # every file classifies (none needs both frameworks)
    for name in os.listdir(HERE):
        if name.startswith("test_") and name.endswith(".py"):
            assert fg.group_of_file(os.path.join(HERE, name)) in fg.GROUPS, name


def test_files_loaded_in_every_group_load_no_framework():
    # conftest.py (and what it imports) runs in every pytest process
    for name in ("conftest.py", "harness.py", "framework_groups.py"):
        assert fg.frameworks_of_file(os.path.join(HERE, name)) == {}, name


def test_classification_rules(tmp_path):
    _write(tmp_path, {
        "test_top.py": "import torch\n",
        "test_in_function.py": "def test_x():\n    import tensorflow as tf\n",
        "test_importorskip.py": "import pytest\ntf = pytest.importorskip('keras')\n",
        "test_import_module.py": "import importlib\nimportlib.import_module('torch.nn')\n",
        "test_subprocess_string.py": "CODE = 'import torch; import tensorflow'\n",
        "test_hvd_keras.py": "import hvd.keras as hvd\n",
        "test_hvd_from.py": "from hvd import torch as ht\n",
        "test_hvd_numpy.py": "import hvd\nfrom hvd import _ops\n",
        "helper_eager.py": "import torch\n",
        "helper_lazy.py": "def f():\n    import tensorflow\n",
        "pkg/__init__.py": "",
        "pkg/sub.py": "from . import deep\n",
        "pkg/deep.py": "import tensorflow\n",
        "test_helper_eager.py": "import helper_eager\n",
        "test_helper_lazy.py": "import helper_lazy\n",
        "test_relative.py": "from pkg import sub\n",
        "test_both.py": "import hvd.torch\n\ndef test_x():\n    import keras\n",
    })
    roots = [str(tmp_path), harness.PKG_ROOT]
    want = {"test_top.py": "torch", "test_in_function.py": "tensorflow",
            "test_importorskip.py": "tensorflow", "test_import_module.py": "torch",
            "test_subprocess_string.py": "core", "test_hvd_keras.py": "tensorflow",
            "test_hvd_from.py": "torch", "test_hvd_numpy.py": "core",
            "test_helper_eager.py": "torch", "test_helper_lazy.py": "core",
            "test_relative.py": "tensorflow"}
    for name, group in want.items():
        assert fg.group_of_file(str(tmp_path / name), roots) == group, name
    assert (fg.frameworks_of_file(str(tmp_path / "test_relative.py"), roots)["tensorflow"]
            == "test_relative.py -> pkg.sub -> pkg.deep -> tensorflow")
    with pytest.raises(fg.ClassificationError, match=r"test_both.py loads tensorflow and torch"):
        fg.group_of_file(str(tmp_path / "test_both.py"), roots)


# -- the guard, the filter and the report, in pytest subprocesses -------------

GUARD_FILES = {
    "standins/torch/__init__.py": "",
    "standins/tensorflow/__init__.py": "",
    "suite/pytest.ini": "[pytest]\n",
    "suite/test_a_tf.py": """\
        import tensorflow

        def test_tf():
            pass
        """,
    "suite/test_b_torch.py": """\
        import importlib.util
        import sys

        def test_lookup_is_not_refused():
            spec = importlib.util.find_spec("torch")
            assert spec is not None and spec.origin.endswith("__init__.py")

        def test_import():
            import torch
            assert "torch" in sys.modules

        def test_import_swallowed():
            try:
                import torch  # noqa: F401
            except ImportError:
                pass

        def test_after():
            pass
        """,
    "suite/test_c_both.py": "import torch\nimport tensorflow\n\ndef test_x():\n    pass\n",
    "suite/test_d_core.py": """\
        import sys
        import types

        def test_smuggled():
            sys.modules.setdefault("torch", types.ModuleType("torch"))
            sys.modules.setdefault("tensorflow", types.ModuleType("tensorflow"))

        def test_later():
            pass
        """,
}


def _pytest(tmp_path, group, *args):
    report = tmp_path / f"report-{group}.json"
    env = dict(os.environ)
    for k in ("HVD_TEST_GROUP", "HVD_TEST_REPORT"):
        env.pop(k, None)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "standins"), HERE, harness.PKG_ROOT])
    if group:
        env["HVD_TEST_GROUP"] = group
    env["HVD_TEST_REPORT"] = str(report)
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "framework_groups", "-p",
                        "no:cacheprovider", "-rA", "--continue-on-collection-errors", *args],
                       cwd=str(tmp_path / "suite"), env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=120)
    out = p.stdout.decode("utf-8", "replace")
    with open(report) as f:
        return p.returncode, out, json.load(f)


def test_guard_in_one_process(tmp_path):
    _write(tmp_path, GUARD_FILES)
    rc, out, rep = _pytest(tmp_path, None)
    assert rc == 1, out
    results = {name: status for status, name in re.findall(r"^(PASSED|FAILED|ERROR) (\S+)", out, re.M)}
    assert results == {
        "test_a_tf.py::test_tf": "PASSED",
        "test_b_torch.py::test_lookup_is_not_refused": "PASSED",
        "test_b_torch.py::test_import": "FAILED",
        "test_b_torch.py::test_import_swallowed": "FAILED",  # caught, still a failure
        "test_b_torch.py::test_after": "PASSED",
        "test_c_both.py": "ERROR",  # not runnable in any group
        # both already "loaded" (guard bypassed): reported once, by the test that did it
        "test_d_core.py::test_smuggled": "FAILED",
        "test_d_core.py::test_later": "PASSED",
    }, out
    assert "refused to import 'torch' into this pytest process: tensorflow is already loaded" in out
    assert "ClassificationError: test_c_both.py loads tensorflow and torch" in out
    assert "torch and tensorflow are both loaded in this pytest process" in out
    assert rep["finished"] and rep["exitstatus"] == 1 and rep["group"] is None
    assert rep["counts"] == {"failed": 3, "passed": 4, "error": 1}, rep
    assert rep["collected"] == 7 and rep["files"] == 4


def test_groups_filter_and_report(tmp_path):
    _write(tmp_path, GUARD_FILES)
    # the torch group: only test_b, where nothing conflicts
    rc, out, rep = _pytest(tmp_path, "torch")
    assert rc == 0, out
    assert rep["counts"] == {"passed": 4} and rep["files"] == 1 and rep["collected"] == 4, rep
    assert "framework group: torch" in out
    # core: test_d, and test_c's classification error
    rc, out, rep = _pytest(tmp_path, "core")
    assert rc == 1, out
    assert rep["counts"] == {"failed": 1, "passed": 1, "error": 1}, rep
    # a named file of another group is dropped, not "not found"
    rc, out, rep = _pytest(tmp_path, "tensorflow", "test_b_torch.py::test_after")
    assert rc == 5, out
    assert rep["named_dropped"] == ["test_b_torch.py::test_after"] and rep["files"] == 0, rep
    rc, out, rep = _pytest(tmp_path, "torch", "test_b_torch.py::test_after", "-k", "after")
    assert rc == 0 and rep["counts"] == {"passed": 1}, out
    # -k deselecting everything: collected, none selected
    rc, out, rep = _pytest(tmp_path, "tensorflow", "-k", "no_such_test")
    assert rc == 5 and rep["collected"] == 1 and rep["counts"] == {"deselected": 1}, (out, rep)


# -- run_tests.sh's closing line ------------------------------------------------

def _combine(tmp_path, seconds, runs, stopped=()):
    paths = []
    for i, (rep, rc) in enumerate(runs):
        path = tmp_path / f"{rep.get('group', 'g%d' % i) if rep else 'gone%d' % i}.json"
        if rep is not None:
            path.write_text(json.dumps(rep))
        paths.append((str(path), rc))
    return fg.combine(seconds, list(stopped), paths)


def _rep(group, counts, rc_finished=True, **kw):
    d = {"group": group, "counts": counts, "collected": sum(counts.values()), "files": 1,
         "named_dropped": [], "finished": rc_finished, "exitstatus": 0, "seconds": 1.5}
    d.update(kw)
    return d


def test_combine_all_pass(tmp_path):
    lines, status = _combine(tmp_path, 75.25, [
        (_rep("core", {"passed": 80, "skipped": 2, "warning": 1}), 0),
        (_rep("torch", {"passed": 20}), 0),
        (_rep("tensorflow", {"passed": 7, "deselected": 0}), 0)])
    assert status == 0
    assert lines[-1] == "=== 107 passed, 2 skipped, 1 warning in 75.25s (0:01:15) ==="
    assert lines[0] == "run_tests.sh: [core] 80 passed, 2 skipped, 1 warning in 1.50s"
    # scripts/test.sh finds the closing line with its grep -E pattern (the groups' own
    # "N passed in Xs" lines under -q must not match it)
    with open(os.path.join(harness.REPO, "scripts", "test.sh")) as f:
        pattern = re.search(r'line=\$\(grep -E "([^"]+)" "\$log"', f.read()).group(1)
    assert re.search(pattern, lines[-1])
    assert not any(re.search(pattern, line) for line in lines[:-1])
    assert not re.search(pattern, "80 passed, 2 skipped, 1 warning in 1.50s")


def test_combine_failures(tmp_path):
    lines, status = _combine(tmp_path, 3.0, [
        (_rep("core", {"passed": 3, "failed": 1}), 1),
        # died (the LLVM abort is SIGABRT: 134): partial counts kept, plus an error
        (_rep("torch", {"passed": 2}, rc_finished=False), 134),
        (None, 137)])  # died before its first report
    assert status == 1
    assert lines[-1] == "=== 1 failed, 5 passed, 2 errors in 3.00s ==="
    assert "[torch] 2 passed, 1 error in 1.50s -- ERROR: pytest did not finish (exit status " \
           "134, signal 6)" in lines[1]
    assert "ERROR: pytest did not finish (exit status 137, signal 9)" in lines[2]


def test_combine_empty_groups(tmp_path):
    # a group that collected nothing fails
    lines, status = _combine(tmp_path, 1.0, [
        (_rep("core", {"passed": 3}), 0),
        (_rep("torch", {}, files=0, collected=0), 5)])
    assert status == 1 and "[torch] 1 error in 1.50s -- ERROR: collected no tests" in lines[1]
    assert lines[-1] == "=== 3 passed, 1 error in 1.00s ==="
    # deselected by -k, skipped at module level, or named files elsewhere: fine
    lines, status = _combine(tmp_path, 1.0, [
        (_rep("core", {"passed": 3}), 0),
        (_rep("torch", {"deselected": 4}), 5),
        (_rep("tensorflow", {"skipped": 1}, collected=0), 5)])
    assert status == 0 and lines[-1] == "=== 3 passed, 1 skipped, 4 deselected in 1.00s ===", lines
    lines, status = _combine(tmp_path, 1.0, [
        (_rep("core", {}, files=0, collected=0, named_dropped=["tests/test_x.py"]), 5),
        (_rep("torch", {"passed": 1}), 0)], stopped=["tensorflow"])
    assert status == 0 and lines[-1] == "=== 1 passed in 1.00s ===", lines
    assert "[core] none of the named test files is in this group" in lines[0]
    assert "[tensorflow] not run" in lines[2]
    # nothing ran anywhere: a failure, as pytest's "no tests collected" was
    lines, status = _combine(tmp_path, 1.0, [(_rep("core", {"deselected": 5}), 5)])
    assert status == 1 and lines[-1] == "=== 5 deselected in 1.00s ==="
    # a usage error (a bad option) fails even though nothing failed
    lines, status = _combine(tmp_path, 1.0, [(_rep("core", {"passed": 1}), 4)])
    assert status == 1 and "pytest exited with status 4" in lines[0]


def test_combine_interrupted_group(tmp_path):
    # a collection error stops pytest (exit 2): its error is counted once
    lines, status = _combine(tmp_path, 1.0, [
        (_rep("core", {"passed": 3}), 0),
        (_rep("torch", {"error": 1}, collected=0), 2)])
    assert status == 1
    assert lines[1] == ("run_tests.sh: [torch] 1 error in 1.50s -- ERROR: pytest exited with "
                        "status 2 (interrupted)")
    assert lines[-1] == "=== 3 passed, 1 error in 1.00s ==="
