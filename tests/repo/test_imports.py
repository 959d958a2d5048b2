"""The import graph of the three packages: no cycle, and the layer rules of DESIGN "Layout".

The graph is read from the AST of every module, so it sees imports inside functions (the
lazy imports that hid the old cycles) as well as top-level ones. Imports under
``if TYPE_CHECKING:`` are left out: they never run. ``from pkg import name`` where
``pkg/name.py`` exists counts as importing the module ``pkg.name``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("runner_core", "stores", "agentworker")


def tree(name: str) -> tuple[str, ...]:
    """Patterns for a module or package and everything below it."""
    return (name, f"{name}.*")


FLEET, HTTP, CLI = tree("agentworker.fleet"), tree("agentworker.http"), tree("agentworker.cli")
WIRING = tree("agentworker.wiring")


@dataclass(frozen=True)
class Rule:
    """Modules matching ``importers`` (but not ``unless``) must not import ``forbidden``."""

    importers: tuple[str, ...]
    forbidden: tuple[str, ...]
    why: str
    unless: tuple[str, ...] = ()


#: The layer rules (DESIGN "Layers" and "Layout"); patterns are fnmatch over dotted names.
RULES = (
    Rule(tree("runner_core"), tree("stores") + tree("agentworker"), "runner_core is the bottom"),
    Rule(tree("runner_core"), tree("redis") + tree("celery") + tree("kombu"), "no Redis/Celery"),
    Rule(tree("stores"), tree("agentworker") + tree("celery"), "stores sits below agentworker"),
    Rule(("*",), tree("runner_core._engine"), "the engine is runner_core's", tree("runner_core")),
    Rule(tree("agentworker"), ("stores.redis.*",), "agentworker uses what stores.redis exports"),
    Rule(("*",), ("agentworker.fleet.app",), "only agentworker.__getattr__", ("agentworker",)),
    Rule(FLEET, HTTP + CLI, "fleet, http and cli are separate roots"),
    Rule(HTTP, FLEET + CLI, "fleet, http and cli are separate roots"),
    Rule(CLI, FLEET + HTTP, "fleet, http and cli are separate roots"),
    Rule(
        tree("agentworker.notify") + tree("agentworker.ops") + ("agentworker.settings",),
        FLEET + HTTP + CLI + WIRING,
        "notify, ops and settings sit below the roots",
    ),
)


@dataclass(frozen=True)
class Import:
    """One import statement's target, as found in ``source`` (relative) at ``line``."""

    importer: str
    imported: str
    source: str
    line: int
    lazy: bool
    #: The name of ``from <imported> import <name>``; None for a whole module.
    name: str | None = None

    def where(self) -> str:
        """``path:line`` of the statement, and whether it sits inside a function."""
        return f"{self.source}:{self.line}{' (lazy)' if self.lazy else ''}"


@dataclass
class Graph:
    """The modules found under a root and every import each of them makes."""

    root: Path
    # Left out of the repr: pytest prints the fixture when a test fails.
    modules: dict[str, Path] = field(default_factory=dict, repr=False)
    imports: list[Import] = field(default_factory=list, repr=False)

    def internal(self) -> dict[str, set[str]]:
        """Module -> the other modules of the graph it imports."""
        edges: dict[str, set[str]] = {m: set() for m in self.modules}
        for imp in self.imports:
            # A package naming itself (``from . import name`` in its __init__) is no cycle.
            if imp.imported in self.modules and imp.imported != imp.importer:
                edges[imp.importer].add(imp.imported)
        return edges


def module_name(root: Path, path: Path) -> str:
    """The dotted name of the module in ``path`` (a package for ``__init__.py``)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_type_checking(test: ast.expr) -> bool:
    """True for ``TYPE_CHECKING`` and ``typing.TYPE_CHECKING``."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def import_nodes(
    nodes: Iterable[ast.AST], lazy: bool = False
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement that can run, with whether it sits inside a function."""
    for node in nodes:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, lazy
        elif isinstance(node, ast.If) and is_type_checking(node.test):
            yield from import_nodes(node.orelse, lazy)
        else:
            inner = lazy or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            yield from import_nodes(ast.iter_child_nodes(node), inner)


def resolve_from(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module name of ``from <module> import ...`` (relative ones resolved)."""
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    # In a package's __init__, "." is the package itself; in a module, its parent.
    keep = len(base) - node.level + (1 if is_package else 0)
    parts = base[:keep] + ([node.module] if node.module else [])
    return ".".join(parts)


def targets(
    node: ast.Import | ast.ImportFrom, importer: str, graph: Graph
) -> Iterator[tuple[str, str | None]]:
    """The modules one statement imports, each with the name taken from it (if any).

    ``from pkg import mod`` names the module ``pkg.mod``; ``from pkg import attr`` names
    ``pkg`` with ``attr``.
    """
    if isinstance(node, ast.Import):
        yield from ((alias.name, None) for alias in node.names)
        return
    is_package = graph.modules[importer].name == "__init__.py"
    base = resolve_from(node, importer, is_package)
    for alias in node.names:
        if f"{base}.{alias.name}" in graph.modules:
            yield f"{base}.{alias.name}", None
        else:
            yield base, alias.name


def build_graph(root: Path, packages: Iterable[str]) -> Graph:
    """Parse every module of ``packages`` under ``root`` and collect its imports."""
    graph = Graph(root)
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            graph.modules[module_name(root, path)] = path
    for name, path in graph.modules.items():
        body = ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body
        source = path.relative_to(root).as_posix()
        for node, lazy in import_nodes(body):
            for imported, taken in targets(node, name, graph):
                graph.imports.append(Import(name, imported, source, node.lineno, lazy, taken))
    return graph


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: list[str] = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def cycles(graph: Graph) -> list[str]:
    """One message per import cycle: its modules and the imports that close it."""
    messages = []
    for component in strongly_connected(graph.internal()):
        members = set(component)
        inside = [
            i
            for i in graph.imports
            if i.importer in members and i.imported in members and i.importer != i.imported
        ]
        # One line per statement, though it may take several names.
        lines = dict.fromkeys(f"  {i.importer} -> {i.imported}  {i.where()}" for i in inside)
        messages.append(f"cycle of {len(component)}: {', '.join(component)}\n" + "\n".join(lines))
    return messages


def exported(path: Path) -> set[str]:
    """The names in the ``__all__`` list of the module in ``path``."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return {
                e.value
                for e in ast.walk(node.value)
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            }
    return set()


def unexported(graph: Graph, importers: Iterable[str], packages: Iterable[str]) -> list[str]:
    """Imports by ``importers`` of a name that ``packages`` leave out of ``__all__``."""
    public = {p: exported(graph.modules[p]) for p in packages if p in graph.modules}
    found = []
    for imp in graph.imports:
        if imp.imported in public and imp.name is not None and matches(imp.importer, importers):
            if imp.name not in public[imp.imported]:
                found.append(f"{imp.importer} takes {imp.imported}.{imp.name}  {imp.where()}")
    return sorted(set(found))


def matches(name: str, patterns: Iterable[str]) -> bool:
    """True if the dotted ``name`` matches one of the fnmatch ``patterns``."""
    return any(fnmatchcase(name, p) for p in patterns)


def violations(graph: Graph, rules: Iterable[Rule] = RULES) -> list[str]:
    """One message per import that breaks a rule, naming the statement and the rule."""
    found = []
    for rule in rules:
        for imp in graph.imports:
            if not matches(imp.importer, rule.importers) or matches(imp.importer, rule.unless):
                continue
            if matches(imp.imported, rule.forbidden):
                found.append(f"{imp.importer} imports {imp.imported}  {imp.where()}: {rule.why}")
    return sorted(set(found))


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph(ROOT, PACKAGES)


def test_the_graph_sees_every_package(graph: Graph) -> None:
    # A checker that found nothing to check would pass for the wrong reason.
    assert {"runner_core", "stores.redis.store", "agentworker.fleet.app"} <= set(graph.modules)
    assert any(i.lazy for i in graph.imports)
    assert len(graph.imports) > 200


def test_agentworker_takes_only_what_stores_exports(graph: Graph) -> None:
    found = unexported(graph, tree("agentworker"), ["stores", "stores.redis"])
    assert not found, "names stores/stores.redis do not export (__all__):\n" + "\n".join(found)


def test_no_import_cycle_lazy_imports_included(graph: Graph) -> None:
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(found)


def test_imports_follow_the_layer_rules(graph: Graph) -> None:
    found = violations(graph)
    assert not found, f"{len(found)} imports break the layer rules:\n" + "\n".join(found)


# The checker itself, on a tiny package written for the purpose.


def write(root: Path, files: dict[str, str]) -> Graph:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return build_graph(root, ["pkg"])


def test_a_cycle_through_a_function_level_import_is_caught(tmp_path: Path) -> None:
    graph = write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import helper\n",
            "pkg/b.py": "def helper():\n    from pkg import a\n    return a\n",
            "pkg/c.py": "from . import a\n",
        },
    )
    found = cycles(graph)
    assert len(found) == 1 and found[0].startswith("cycle of 2: pkg.a, pkg.b")
    assert "pkg/b.py:2 (lazy)" in found[0] and "pkg.c" not in found[0]


def test_a_type_checking_import_makes_no_cycle(tmp_path: Path) -> None:
    graph = write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "import pkg.b\n",
            "pkg/b.py": (
                "import typing\nfrom typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from pkg.a import X\n"
                "if typing.TYPE_CHECKING:\n    import pkg.a\nelse:\n    import pkg.c\n"
            ),
            "pkg/c.py": "",
        },
    )
    assert cycles(graph) == []
    assert graph.internal()["pkg.b"] == {"pkg.c"}


def test_relative_imports_resolve_from_module_and_package(tmp_path: Path) -> None:
    graph = write(
        tmp_path,
        {
            "pkg/__init__.py": "from .sub import x, name\n",
            "pkg/sub/__init__.py": "from . import x\nfrom ..top import name\nname = 1\n",
            "pkg/sub/x.py": "from .. import top\n",
            "pkg/top.py": "",
        },
    )
    edges = graph.internal()
    assert edges["pkg"] == {"pkg.sub.x", "pkg.sub"}
    assert edges["pkg.sub"] == {"pkg.sub.x", "pkg.top"}
    assert edges["pkg.sub.x"] == {"pkg.top"}


def test_a_rule_names_the_import_that_breaks_it(tmp_path: Path) -> None:
    graph = write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/low.py": "def f():\n    import redis.asyncio\n",
            "pkg/high.py": "from pkg import low\n",
            "pkg/_inner.py": "",
            "pkg/ok.py": "from pkg import _inner\n",
        },
    )
    rules = [
        Rule(tree("pkg.low"), tree("redis"), "low stays low"),
        Rule(("*",), ("pkg._inner",), "inner is ok's", ("pkg.ok",)),
    ]
    assert violations(graph, rules) == [
        "pkg.low imports redis.asyncio  pkg/low.py:2 (lazy): low stays low"
    ]


def test_a_name_left_out_of_all_is_caught(tmp_path: Path) -> None:
    graph = write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.lib import Public, private\n__all__ = ['Public']\n",
            "pkg/lib.py": "",
            "pkg/user.py": "from pkg import Public, private\n",
        },
    )
    assert unexported(graph, ["pkg.user"], ["pkg"]) == ["pkg.user takes pkg.private  pkg/user.py:1"]
