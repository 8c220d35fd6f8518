"""hvd.torch, hvd.tensorflow and hvd.keras warn when imported into a process
that has already loaded the other framework (TensorFlow and torch cannot share
a process). Each case runs in a subprocess that imports both frameworks but
never makes torch load triton (the step that aborts), so it survives; this
pytest process loads neither."""

import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest

import harness

for _mod in ("torch", "tensorflow", "keras"):
    if importlib.util.find_spec(_mod) is None:  # (looked up, not imported)
        pytest.skip(f"{_mod} is not installed", allow_module_level=True)

SCRIPT = """\
import json, sys, warnings

log = []

def step(what):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        exec(what, {})
    log.append([what, [[x.category.__name__, x.filename, x.lineno, str(x.message)] for x in w
                       if "share a process" in str(x.message)]])

for what in sys.argv[2:]:
    step(what)
with open(sys.argv[1], "w") as f:
    json.dump(log, f)
"""


def _run(tmp_path, *steps):
    script = tmp_path / "steps.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out.json"
    p = subprocess.run([sys.executable, str(script), str(out), *steps], env=harness.child_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    text = p.stdout.decode("utf-8", "replace")
    assert p.returncode == 0, text
    return [warns for _what, warns in json.loads(out.read_text())]


def _check(warn, imported, other):
    category, filename, _lineno, message = warn
    assert category == "RuntimeWarning"
    assert filename == "<string>"  # the importing line (the step's exec), not hvd's own code
    assert message.startswith(f"{imported} was imported into a process that has already loaded "
                              f"{other}"), message
    assert "TensorFlow and PyTorch cannot share a process" in message
    assert "LLVM ERROR: Option '...' registered more than once!" in message


def test_torch_first(tmp_path):
    w = _run(tmp_path, "import hvd.torch", "import tensorflow", "import hvd.keras",
             "import hvd.tensorflow")
    assert w[0] == [] and w[1] == []  # hvd.torch alone: no warning
    assert len(w[2]) == 1, w  # hvd.keras (through hvd.tensorflow): one warning, naming hvd.keras
    _check(w[2][0], "hvd.keras", "PyTorch (torch)")
    assert w[3] == []  # hvd.tensorflow was imported (and warned) already


def test_tensorflow_first(tmp_path):
    w = _run(tmp_path, "import hvd.tensorflow", "import torch", "import hvd.torch",
             "import hvd.keras")
    assert w[0] == [] and w[1] == []  # hvd.tensorflow alone: no warning
    assert len(w[2]) == 1, w
    _check(w[2][0], "hvd.torch", "TensorFlow")
    assert len(w[3]) == 1, w  # hvd.keras after hvd.tensorflow: warns itself
    _check(w[3][0], "hvd.keras", "PyTorch (torch)")
