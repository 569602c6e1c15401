"""The import graph of the packages: every import (module level or inside a function) runs downward
through the layers protocol < storage < actors < rafka < serve < jobs; storage never imports Ray and
protocol only inside functions (its Ray helpers import it when called). A violation names the file and line."""

from __future__ import annotations

import ast
import os
import pickle
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAYER = {"protocol": 0, "storage": 1, "actors": 2, "rafka": 3, "serve": 4, "jobs": 5}


def _in_function(tree: ast.AST) -> set[int]:
    """ids of the nodes inside a function body."""
    inside: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside.update(id(n) for n in ast.walk(fn) if n is not fn)
    return inside


def _parse(source: str, path: str) -> ast.AST:
    """``ast.parse``; on CPython 3.11's spurious "AST constructor recursion depth mismatch" SystemError
    (gh-106905: the recursion counter of a long-lived test process drifts), parse in a fresh interpreter."""
    try:
        return ast.parse(source, path)
    except SystemError:
        code = "import ast, pickle, sys; sys.stdout.buffer.write(pickle.dumps(ast.parse(open(sys.argv[1]).read())))"
        out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, check=True, timeout=60)
        return pickle.loads(out.stdout)


def _imports(pkg: str, module_level_only: bool = False):
    """(file, line, imported module) of every absolute import in package ``pkg`` (or only of those that run
    when the module is imported)."""
    for dirpath, _, files in os.walk(os.path.join(ROOT, pkg)):
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            with open(path, encoding="utf-8") as fh:
                tree = _parse(fh.read(), path)
            skip = _in_function(tree) if module_level_only else set()
            for node in ast.walk(tree):
                if id(node) in skip:
                    continue
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    yield os.path.relpath(path, ROOT), node.lineno, name


def test_every_package_is_scanned():
    for pkg in LAYER:
        assert any(True for _ in _imports(pkg)), f"{pkg}/ has no imports: moved or misnamed?"


def test_imports_run_downward_only():
    upward = []
    for pkg, level in LAYER.items():
        for path, line, name in _imports(pkg):
            top = name.split(".")[0]
            if top in LAYER and top != pkg and LAYER[top] > level:
                upward.append(f"{path}:{line} imports {name} ({pkg} is below {top})")
    assert not upward, "\n".join(upward)


def test_storage_never_imports_ray_and_protocol_not_at_import_time():
    found = [f"{path}:{line} imports {name}" for path, line, name in _imports("storage") if name.split(".")[0] == "ray"]
    found += [
        f"{path}:{line} imports {name} at module level"
        for path, line, name in _imports("protocol", True)
        if name.split(".")[0] == "ray"
    ]
    assert not found, "\n".join(found)


def test_cli_verbs_of_upper_layers_arrive_through_entry_points():
    """`rafka serve|job|verify` come from the `rafka.commands` entry points (pyproject.toml), and building
    the parser imports neither Ray Serve nor RayDP (the verbs import them when they run)."""
    import subprocess
    import sys

    code = (
        "import sys; from rafka.cli import build_parser; p = build_parser(); "
        "sub = next(a for a in p._actions if a.dest == 'group'); print(sorted(sub.choices)); "
        "print(sorted(m for m in ('ray.serve', 'raydp', 'serve.http', 'jobs.spark') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    verbs, heavy = out.stdout.strip().splitlines()
    assert verbs == str(sorted(["cluster", "topic", "group", "txn", "perf", "logs", "serve", "job", "verify"]))
    assert heavy == "[]"
