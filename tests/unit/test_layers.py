"""The import graph of the project: every import (module level, inside a function, or under TYPE_CHECKING)
runs downward through the layers protocol < storage < actors < rafka < serve < jobs; protocol imports only
the standard library, kio and msgpack; storage never imports Ray; inside actors/, coordinator/ imports
neither group/ nor txn/ and channels/ sits below replication/; no two project modules import each other,
directly or around a loop. A violation names the file and line."""

from __future__ import annotations

import ast
import os
import pickle
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAYER = {"protocol": 0, "storage": 1, "actors": 2, "rafka": 3, "serve": 4, "jobs": 5}
# what protocol/ may import besides itself: the contract does no I/O
PROTOCOL_ALLOWED = {"kio", "msgpack"}
# actors/ packages that must not import each other, (importer, imported)
ACTORS_FORBIDDEN = [
    ("actors.coordinator", "actors.group"),
    ("actors.coordinator", "actors.txn"),
    ("actors.channels", "actors.replication"),
]


def _parse(source: str, path: str) -> ast.AST:
    """``ast.parse``; on CPython 3.11's spurious "AST constructor recursion depth mismatch" SystemError
    (gh-106905: the recursion counter of a long-lived test process drifts), parse in a fresh interpreter."""
    try:
        return ast.parse(source, path)
    except SystemError:
        code = "import ast, pickle, sys; sys.stdout.buffer.write(pickle.dumps(ast.parse(open(sys.argv[1]).read())))"
        out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, check=True, timeout=60)
        return pickle.loads(out.stdout)


def _modules() -> dict[str, str]:
    """Every project module's dotted name -> its file."""
    mods = {}
    for pkg in LAYER:
        for dirpath, _, files in os.walk(os.path.join(ROOT, pkg)):
            for f in sorted(files):
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(dirpath, f), ROOT)[:-3].replace(os.sep, ".")
                    mods[rel.removesuffix(".__init__")] = os.path.join(dirpath, f)
    return mods


MODULES = _modules()


def _imports(pkg: str | None = None):
    """(file, line, imported name) of every import in package ``pkg`` (every package when None), relative
    imports resolved; ``from a import b`` yields ``a.b`` when that is a module, else ``a``."""
    for mod, path in sorted(MODULES.items()):
        if pkg is not None and mod.split(".")[0] != pkg:
            continue
        with open(path, encoding="utf-8") as fh:
            tree = _parse(fh.read(), path)
        here = mod if path.endswith("__init__.py") else mod.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    yield os.path.relpath(path, ROOT), node.lineno, a.name
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = here.split(".")
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([node.module] if node.module else []))
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    yield os.path.relpath(path, ROOT), node.lineno, sub if sub in MODULES else base


def _module_of(name: str) -> str | None:
    """The project module an imported name lands in (its longest module prefix)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in MODULES:
            return ".".join(parts[:i])
    return None


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


def test_protocol_imports_only_the_stdlib_kio_and_msgpack():
    found = []
    for path, line, name in _imports("protocol"):
        top = name.split(".")[0]
        if top in ("protocol", "__future__") or top in PROTOCOL_ALLOWED:
            continue
        if top not in sys.stdlib_module_names:
            found.append(f"{path}:{line} imports {name}")
    assert not found, "\n".join(found)


def test_protocol_does_no_io():
    """The contract does no I/O: no sockets, threads, subprocesses or event loops in protocol/."""
    io = {"socket", "threading", "asyncio", "subprocess", "selectors", "ssl", "concurrent"}
    found = [f"{p}:{line} imports {n}" for p, line, n in _imports("protocol") if n.split(".")[0] in io]
    assert not found, "\n".join(found)


def test_storage_never_imports_ray():
    found = [f"{path}:{line} imports {name}" for path, line, name in _imports("storage") if name.split(".")[0] == "ray"]
    assert not found, "\n".join(found)


def test_actors_packages_keep_their_order():
    found = []
    for importer, imported in ACTORS_FORBIDDEN:
        for path, line, name in _imports("actors"):
            mod = _module_of(name)
            here = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
            if here.startswith(importer + ".") and mod and (mod == imported or mod.startswith(imported + ".")):
                found.append(f"{path}:{line} imports {name} ({importer} must not import {imported})")
    assert not found, "\n".join(found)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def import_graph() -> dict[str, set[str]]:
    """Project module -> the project modules it imports (any import, anywhere in the file)."""
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for path, _, name in _imports():
        mod = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")
        target = _module_of(name)
        if target is not None and target != mod:
            edges[mod].add(target)
    return edges


def test_cycle_finder_finds_a_loop():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    """No loop between project modules, counting imports inside functions and under TYPE_CHECKING: a loop
    hidden by a function-local import is still a loop."""
    cycles = _cycles(import_graph())
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_cli_verbs_of_upper_layers_arrive_through_entry_points():
    """`rafka serve|job|verify` come from the `rafka.commands` entry points (pyproject.toml), and building
    the parser imports neither Ray Serve nor RayDP (the verbs import them when they run)."""
    code = (
        "import sys; from rafka.cli.main import build_parser; p = build_parser(); "
        "sub = next(a for a in p._actions if a.dest == 'group'); print(sorted(sub.choices)); "
        "print(sorted(m for m in ('ray.serve', 'raydp', 'serve.http', 'jobs.spark') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    verbs, heavy = out.stdout.strip().splitlines()
    assert verbs == str(sorted(["cluster", "topic", "group", "txn", "perf", "logs", "serve", "job", "verify"]))
    assert heavy == "[]"
