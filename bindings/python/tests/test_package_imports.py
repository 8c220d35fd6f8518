"""The hvd package's import graph has no cycle, read from the sources (no
framework is imported here).

Two graphs over the modules in bindings/python/hvd: the imports a module runs
when it is imported (statements outside function bodies), and every import in
it (also those inside functions). The first must be acyclic so that no module
is ever used half-initialised; the second too, so that no cycle is dodged by
moving an import into a function. An edge goes to the module an import names
(``from .mpi_ops import x`` -> hvd.torch.mpi_ops; ``from . import ops`` -> the
submodule hvd.torch.ops where there is one, else the package); the parents
Python initialises on the way are not edges (a package importing its own
submodules is how a package is built).

Also here: the size limits of the package's files and functions, and that
the framework packages are real packages (no module posing as one, no
import hook serving one)."""

from __future__ import annotations

import ast
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(os.path.dirname(HERE), "hvd")

MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 100


def _modules():
    """{module name: file path} for every .py file of the hvd package."""
    out = {}
    root = os.path.dirname(PKG)
    for folder, dirs, files in os.walk(PKG):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for f in files:
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(folder, f), root)[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join(rel)] = os.path.join(folder, f)
    return out


def _package_of(name, path):
    return name if path.endswith("__init__.py") else name.rpartition(".")[0]


def _imports(tree, module_level):
    """The import statements of tree, only those run at import time when
    module_level (function bodies skipped; class bodies and if/try kept)."""
    pending = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        if module_level and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        pending.extend(ast.iter_child_nodes(node))


def _targets(node, package, modules):
    """The modules of the package that one import statement names."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in modules]
    if node.level:
        base = package.split(".")
        base = base[:len(base) - (node.level - 1)]
        base = ".".join(base + ([node.module] if node.module else []))
    else:
        base = node.module
    out = []
    for a in node.names:
        sub = f"{base}.{a.name}"
        if sub in modules:
            out.append(sub)
        elif base in modules:
            out.append(base)
    return out


def _graph(module_level):
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        package = _package_of(name, path)
        edges = set()
        for node in _imports(tree, module_level):
            edges.update(t for t in _targets(node, package, modules) if t != name)
        graph[name] = sorted(edges)
    return graph


def _cycle(graph):
    """One cycle of graph as a list of names (first == last), or None."""
    state = {}
    stack = []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for m in graph.get(n, ()):
            if state.get(m) == "open":
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = "done"
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_the_walk_sees_the_framework_packages():
    graph = _graph(module_level=True)
    for name in ("hvd", "hvd.torch", "hvd.torch.optimizer", "hvd.tensorflow",
                 "hvd.tensorflow.mpi_ops", "hvd.keras"):
        assert name in graph, sorted(graph)
    assert "hvd.torch.optimizer" in graph["hvd.torch"]
    assert _cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert _cycle({"a": ["b"], "b": [], "c": ["a"]}) is None


@pytest.mark.parametrize("module_level", [True, False], ids=["module-level", "all-imports"])
def test_no_import_cycle(module_level):
    found = _cycle(_graph(module_level))
    assert found is None, "import cycle: " + " -> ".join(found)


def test_framework_packages_are_packages():
    for pkg in ("torch", "tensorflow", os.path.join("torch", "elastic"),
                os.path.join("tensorflow", "keras")):
        assert os.path.isfile(os.path.join(PKG, pkg, "__init__.py")), pkg
    assert not os.path.exists(os.path.join(PKG, "torch.py"))
    assert not os.path.exists(os.path.join(PKG, "tensorflow.py"))
    for name, path in _modules().items():
        with open(path) as f:
            text = f.read()
        assert "__path__ =" not in text, f"{name} sets __path__"
        assert "meta_path" not in text, f"{name} installs an import hook"


def _long_functions(tree):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if node.end_lineno - first + 1 > MAX_FUNCTION_LINES:
                yield node.name, node.end_lineno - first + 1


def test_file_and_function_sizes():
    too_long = []
    for folder, _dirs, files in os.walk(PKG):
        for f in files:
            if not f.endswith((".py", ".cc")):
                continue
            path = os.path.join(folder, f)
            with open(path) as fh:
                text = fh.read()
            n = text.count("\n")
            rel = os.path.relpath(path, PKG)
            if n > MAX_FILE_LINES:
                too_long.append(f"{rel}: {n} lines")
            if f.endswith(".py"):
                for name, lines in _long_functions(ast.parse(text, path)):
                    too_long.append(f"{rel}: {name}() {lines} lines")
    assert not too_long, "\n".join(too_long)
