"""No import cycle among hierl's modules, except through ``if TYPE_CHECKING:`` imports.

Every module's imports (at the top level and inside functions alike: an import deferred
into a function to dodge a loop still closes it; only those under ``if TYPE_CHECKING:``
are left out) are read with ``ast``, never executed, and form a graph; a strongly
connected component of more than one module (or a module that imports itself) is a
cycle.  A base module that needs its subclasses' types imports them under
``TYPE_CHECKING``; one that needs their behaviour calls a class hook instead (e.g.
``BaseTrainer.actor_groups``, read by ``hierl.algorithms.resources``).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hierl"

KNOWN_CYCLES: list[set[str]] = []
"""Cycles that remain, each with the reason it cannot go yet: none."""


def modules_of(package: Path) -> dict[str, Path]:
    """Dotted module name → source file, for every module of ``package`` (a directory)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(body: list[ast.stmt]):
    """The import statements in ``body`` that can run: all of them, in functions and
    classes too (an import deferred into a function still closes a loop when it runs),
    except those under ``if TYPE_CHECKING:``."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _runtime_imports(node.orelse)
            continue
        for block in ("body", "orelse", "finalbody", "handlers", "cases"):
            for child in getattr(node, block, None) or ():
                yield from _runtime_imports([child])


def _resolve(name: str, package: str, level: int) -> str:
    if not level:
        return name
    base = package.split(".")[: len(package.split(".")) - level + 1]
    return ".".join([*base, name] if name else base)


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module → the hierl modules it imports (at any time, ``TYPE_CHECKING`` aside)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text(), str(path)).body):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
                continue
            base = _resolve(node.module or "", package, node.level)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in modules else base)
        graph[name] = {t for t in targets if t in modules}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components that are cycles (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_imports_that_run_and_skips_type_checking_ones(tmp_path):
    pkg = tmp_path / "hierl"
    (pkg / "sub").mkdir(parents=True)
    sources = {
        "__init__.py": "",
        "a.py": "from hierl import b\n",
        "b.py": "import hierl.sub.c\n",
        "sub/__init__.py": "",
        "sub/c.py": (
            "from .. import a\nfrom hierl.sub import d\n"
            "try:\n    import hierl.sub.e\nexcept ImportError:\n    pass\n"
        ),
        "sub/d.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from hierl import a\n"
        ),
        "sub/e.py": "def f():\n    from hierl.sub import c\n",
    }
    for rel, text in sources.items():
        (pkg / rel).write_text(text)
    graph = import_graph(modules_of(pkg))
    assert graph["hierl.sub.c"] == {"hierl.a", "hierl.sub.d", "hierl.sub.e"}
    assert graph["hierl.sub.d"] == set()  # TYPE_CHECKING only
    assert graph["hierl.sub.e"] == {"hierl.sub.c"}  # inside a function
    assert sorted(map(sorted, cycles(graph))) == [
        ["hierl.a", "hierl.b", "hierl.sub.c", "hierl.sub.e"]
    ]


def test_no_import_cycle_among_hierl_modules():
    modules = modules_of(PACKAGE)
    assert "hierl.algorithms.resources" in modules
    graph = import_graph(modules)
    remaining = [c for c in cycles(graph) if c not in KNOWN_CYCLES]
    assert not remaining, (
        "import cycles (break them, or import for types under TYPE_CHECKING):\n"
        + ("\n".join(" <-> ".join(sorted(c)) for c in remaining))
    )
    # the loop this test was written for: a base module deciding on its subclasses
    assert "hierl.algorithms.trainer" not in graph["hierl.algorithms.resources"]
