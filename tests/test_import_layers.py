"""Import layering: no import loops in the library, and the sketch layer never imports Beam.

Two checks, because each catches what the other cannot:

* a static one over the source (every ``import`` statement, including those inside functions,
  since a lazy import closes a loop as surely as a top-level one, only later);
* a dynamic one that imports each module of the Beam-free layer alone in a fresh interpreter, so
  a module that only works when some other module happened to be imported first fails here.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "beam_dpsketch"
PACKAGE = PACKAGE_DIR.name

# Modules below the Beam layer: pure numpy / arrow code that must stay usable without Beam.
BEAM_FREE_PREFIXES = (
    f"{PACKAGE}.checks",
    f"{PACKAGE}.hashing",
    f"{PACKAGE}.noise",
    f"{PACKAGE}.serialization",
    f"{PACKAGE}.privacy",
    f"{PACKAGE}.sketches",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _library_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def _is_type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _import_nodes(tree: ast.AST, at_import_time: bool) -> list[ast.Import | ast.ImportFrom]:
    """Import statements of a module: all of them, or only those run when it is imported
    (function bodies and ``if TYPE_CHECKING:`` blocks left out)."""
    if not at_import_time:
        return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    found: list[ast.Import | ast.ImportFrom] = []
    todo = list(ast.iter_child_nodes(tree))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) and not (
            _is_type_checking_block(node)
        ):
            todo.extend(ast.iter_child_nodes(node))
    return found


def _imported_names(
    module: str, path: Path, modules: Iterable[str], at_import_time: bool = False
) -> set[str]:
    """Absolute dotted names the module imports. ``from a import b`` gives ``a.b`` when that is
    a library module and ``a`` otherwise, so importing a submodule through its package
    (``from beam_dpsketch import serialization``) does not count as importing the package."""
    known = set(modules)
    names: set[str] = set()
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in _import_nodes(tree, at_import_time):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = module.split(".") if is_package else module.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            names.add(sub if sub in known else base)
    return names


def _import_graph() -> dict[str, set[str]]:
    """Library module -> library modules it imports directly.

    Parent packages are left out on purpose: ``from beam_dpsketch.sketches.x import y`` runs
    ``beam_dpsketch/sketches/__init__.py`` first, but a package importing its own submodules is
    not a loop Python trips over.
    """
    modules = _library_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph[name] = {dep for dep in _imported_names(name, path, modules) if dep in modules} - {
            name
        }
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_sees_a_loop():
    # The checker itself must be able to fail: a two-module and a three-module loop.
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(_cycles(graph)) == [["a", "b"], ["c", "d", "e"]]


def test_no_import_loops_in_the_library():
    graph = _import_graph()
    assert f"{PACKAGE}.hashing" in graph and f"{PACKAGE}.sketches.quantiles.dyadic" in graph
    assert _cycles(graph) == []


def test_checks_is_a_leaf_and_the_released_dyadic_sketch_sits_above_the_exact_one():
    graph = _import_graph()
    assert not {m for m in graph[f"{PACKAGE}.checks"] if m.startswith(PACKAGE)}
    assert f"{PACKAGE}.checks" in graph[f"{PACKAGE}.hashing"]
    assert f"{PACKAGE}.sketches.quantiles.dyadic" in graph[f"{PACKAGE}.sketches.quantiles.private"]
    assert (
        f"{PACKAGE}.sketches.quantiles.private" not in graph[f"{PACKAGE}.sketches.quantiles.dyadic"]
    )


def test_privacy_layer_never_imports_the_sketches():
    # Sketches calibrate their releases with the generic privacy layer, never the other way.
    graph = _import_graph()
    offenders = {
        name: sorted(d for d in deps if d.startswith(f"{PACKAGE}.sketches"))
        for name, deps in graph.items()
        if name.startswith(f"{PACKAGE}.privacy")
    }
    assert {name: deps for name, deps in offenders.items() if deps} == {}


def test_io_layer_never_imports_the_transforms_or_the_command_line():
    # The readers and sinks sit below the transforms and the command line, which import them
    # (``beam_dpsketch.transforms`` re-exports the readers); an import back up would close a
    # loop through the transforms package.
    graph = _import_graph()
    io_modules = sorted(m for m in graph if m == f"{PACKAGE}.io" or m.startswith(f"{PACKAGE}.io."))
    assert {f"{PACKAGE}.io.read", f"{PACKAGE}.io.ordered", f"{PACKAGE}.io.sinks"} <= set(io_modules)
    above = (f"{PACKAGE}.transforms", f"{PACKAGE}.pipelines")
    offenders = {m: sorted(d for d in graph[m] if d.startswith(above)) for m in io_modules}
    assert {m: deps for m, deps in offenders.items() if deps} == {}


def _beam_free_modules() -> list[str]:
    return sorted(m for m in _library_modules() if m.startswith(BEAM_FREE_PREFIXES))


def test_beam_free_layer_never_imports_apache_beam_statically():
    # Only imports run at import time count here; privacy/ imports Beam nowhere at all, not even
    # inside a function (tests/transforms/test_windowing_rules.py scans its source).
    modules = _library_modules()
    graph = {
        name: {d for d in _imported_names(name, path, modules, at_import_time=True) if d in modules}
        - {name}
        for name, path in modules.items()
    }
    offenders = {}
    for name in _beam_free_modules():
        # Everything reachable from the module through library imports, itself included.
        seen, todo = {name}, [name]
        while todo:
            for dep in graph[todo.pop()]:
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        beam = sorted(
            m
            for m in seen
            if any(
                n.split(".")[0] == "apache_beam"
                for n in _imported_names(m, modules[m], modules, at_import_time=True)
            )
        )
        if beam:
            offenders[name] = beam
    assert offenders == {}


_IMPORT_ALONE = """
import importlib, sys
importlib.import_module(sys.argv[1])
print("apache_beam" in sys.modules)
"""


def test_each_beam_free_module_imports_alone_without_beam():
    modules = _beam_free_modules()
    # The modules at both ends of the layering this file guards are among them.
    for name in ("checks", "hashing", "sketches.quantiles.dyadic", "sketches.quantiles.private"):
        assert f"{PACKAGE}.{name}" in modules
    # One fresh interpreter per module, run side by side to keep the test short.
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-c", _IMPORT_ALONE, name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in modules
    }
    results = {name: proc.communicate(timeout=120) for name, proc in procs.items()}
    failed = {
        name: err.strip().splitlines()[-1:]
        for name, (_, err) in results.items()
        if procs[name].returncode != 0
    }
    assert failed == {}
    with_beam = sorted(name for name, (out, _) in results.items() if out.strip() != "False")
    assert with_beam == []
