"""Modules import one way: down the layers of the design, and one concern never reaches
into another above it. Every import counts, also one inside a function or under
TYPE_CHECKING: an import hidden from the cycle is still a cycle.

The layers, top to bottom, follow the design's flow (web → intake → handlers → engine →
sandbox / proxy / GitHub client → render); the composition root on top may import
everything. Inside the engine each concern is its own layer, so a concern may use the
rows of a concern below it but never one above it, and the engine core knows none of
them: concerns register their rows with it.
"""

from __future__ import annotations

import ast
import functools
import gc
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "handlers", "sandbox", "proxy", "fakehub")

# Top to bottom. A module belongs to the layer with its longest matching prefix.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("composition root", ("app.wiring", "app.cli", "app.service", "app.demo", "app.doctor",
                          "app.startup")),
    ("fakehub", ("fakehub",)),
    ("web", ("app.web",)),  # the webhook route, the API, MCP, pages, the sandbox gate
    ("intake", ("app.intake",)),  # deliveries stored and dispatched, redelivery
    ("handlers", ("handlers",)),
    ("concern: repositories", ("app.repositories",)),  # renamed, removed, rebuilt
    ("concern: notifications", ("app.notify",)),
    ("concern: review requests", ("app.reviewers",)),
    ("concern: review threads", ("app.review_threads",)),  # replies in a turn's threads
    ("concern: auto-fix", ("app.autofix",)),
    ("concern: landing", ("app.landing",)),
    ("concern: fan-out", ("app.fanout",)),
    ("concern: jobs and runs", ("app.runs",)),
    # what every command shares, below the concerns whose commands use it
    ("concern: commands", ("app.commands",)),
    ("concern: environment builds", ("app.envbuilds",)),
    ("sandbox egress", ("app.egress",)),  # the runs' and builds' side of the egress proxy
    ("engine", ("app.engine", "app.rows")),  # the loop, and the rows every step uses
    # which changed files are sensitive: a pure rule on the proxy's path matcher
    ("path rules", ("app.sensitive",)),
    ("clients", ("app.github", "sandbox", "proxy")),
    ("rules", ("app.github.ci",)),
    ("render", ("app.render",)),
    # the payload parts a webhook carries are data every layer may read
    ("foundation", ("app.models", "app.settings", "app.store", "app.database",
                    "app.migrations", "app.intake.payloads",
                    "app.metrics", "app.logs", "app.changes", "app.datadir", "app.redact",
                    "app.repoconfig", "app")),
]

# Imports that break the rules today, each to be removed (the test fails when one is gone
# and still listed, so this list only shrinks).
KNOWN: frozenset[tuple[str, str]] = frozenset()


def modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imports_of(
    name: str, source: str, known: Iterable[str], *, is_package: bool = False
) -> set[str]:
    """The known modules that `name`'s source imports, wherever the import stands."""
    known = set(known)
    package = name if is_package else name.rpartition(".")[0]

    def owner(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(filter(None, (owner(alias.name) for alias in node.names)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in known else owner(base) or "")
    found.discard("")
    found.discard(name)
    return found


@functools.cache
def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Every module's imports, read once per test session (the tests only read it)."""
    found = modules(root)
    graph = {}
    # The parsed trees are dropped as soon as read: the collector walking them as they are
    # built would more than double the time of the parse.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for name, path in found.items():
            graph[name] = imports_of(name, path.read_text(), found,
                                     is_package=path.name == "__init__.py")
    finally:
        if collecting:
            gc.enable()
    return graph


def layer_of(module: str) -> int:
    best, rank = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    if rank < 0:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS where it belongs")
    return rank


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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


def upward(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(a, b) for a, targets in graph.items() for b in targets
            if layer_of(a) > layer_of(b)}


def without_known(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    return {a: {b for b in targets if (a, b) not in KNOWN} for a, targets in graph.items()}


@pytest.mark.parametrize(("name", "source", "expected"), [
    ("app.a", "import app.b", {"app.b"}),
    ("app.a", "from app import b", {"app.b"}),
    ("app.a", "from app.b import thing", {"app.b"}),
    ("app.a", "from . import b", {"app.b"}),
    ("app.a", "from .b import thing", {"app.b"}),
    ("app.a", "def f():\n    from app.b import thing\n", {"app.b"}),
    ("app.a", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import app.b\n",
     {"app.b"}),
    ("app.a", "import app.b.deep", {"app.b"}),
    ("app.a", "from app import a", set()),
    ("app.a", "import os, json", set()),
    ("app.b", "from . import a", {"app.a"}),
])
def test_every_form_of_import_is_read(name, source, expected):
    assert imports_of(name, source, ["app", "app.a", "app.b"]) == expected


def test_the_graph_reader_finds_a_cycle_hidden_in_a_function():
    graph = {"app.a": {"app.b"}, "app.b": {"app.c"}, "app.c": {"app.a"}, "app.d": set()}
    assert cycles(graph) == [["app.a", "app.b", "app.c"]]


def test_every_module_has_a_layer():
    for module in import_graph():
        layer_of(module)


def test_no_module_imports_itself_back_in_a_cycle():
    found = cycles(without_known(import_graph()))
    assert not found, "import cycles (break each; a concern talks through rows and the " \
                      "engine's wake-up): " + "; ".join(" ⇄ ".join(c) for c in found)


def test_imports_go_down_the_layers():
    graph = without_known(import_graph())
    wrong = sorted(upward(graph))
    assert not wrong, "imports against the layers (lower layers never import higher " \
                      "ones):\n" + "\n".join(
                          f"  {a} ({LAYERS[layer_of(a)][0]}) imports {b} "
                          f"({LAYERS[layer_of(b)][0]})" for a, b in wrong)


def test_the_list_of_known_wrong_imports_only_shrinks():
    graph = import_graph()
    gone = sorted((a, b) for a, b in KNOWN if b not in graph.get(a, ()))
    assert not gone, f"these imports are gone: take them off KNOWN: {gone}"


# -- a concern in a folder is entered through its face -----------------------------------
# A concern that is a package (app/landing/, …) keeps its files to itself: any module
# outside it, the composition root too, imports the package (its __init__, the face),
# never one of its files, so the files can be split or merged without a change elsewhere.
# Inside the folder, files import each other by their full path, never the face.


def concern_packages(root: Path = ROOT) -> set[str]:
    """The packages under app/ with modules of their own that are concerns: those whose
    layer lies between the handlers and the engine (render, say, is no concern)."""
    names = [name for name, _ in LAYERS]
    above, below = names.index("handlers"), names.index("engine")
    found = set()
    for folder in (root / "app").iterdir():
        files = {p.name for p in folder.glob("*.py")} if folder.is_dir() else set()
        if "__init__.py" in files and len(files) > 1:
            package = f"app.{folder.name}"
            if above < layer_of(package) < below:
                found.add(package)
    return found


def side_doors(graph: dict[str, set[str]], packages: Iterable[str]) -> set[tuple[str, str]]:
    """(importer, file) for each import of a concern package's file from outside it."""
    def inside(module: str, package: str) -> bool:
        return module == package or module.startswith(package + ".")

    return {(a, b) for a, targets in graph.items() for b in targets for package in packages
            if inside(b, package) and b != package and not inside(a, package)}


@pytest.mark.parametrize(("graph", "expected"), [
    ({"app.web.api": {"app.landing"}}, set()),  # through the face
    ({"app.web.api": {"app.landing.rows"}}, {("app.web.api", "app.landing.rows")}),
    ({"app.wiring": {"app.landing.steps"}}, {("app.wiring", "app.landing.steps")}),
    ({"app.landing": {"app.landing.rows"}}, set()),  # the face gathers its files
    ({"app.landing.steps": {"app.landing.rows"}}, set()),  # files of one folder
    ({"app.landing.steps": {"app.autofix.rows"}}, {("app.landing.steps", "app.autofix.rows")}),
    ({"app.landings": {"app.landing.rows"}}, {("app.landings", "app.landing.rows")}),
    ({"app.web.api": {"app.render.landing"}}, set()),  # not a concern package
])
def test_the_face_rule_catches_an_import_of_a_concerns_file(graph, expected):
    assert side_doors(graph, {"app.landing", "app.autofix"}) == expected


def test_concern_packages_are_found_not_listed(tmp_path):
    for path in ("app/__init__.py", "app/landing/__init__.py", "app/landing/rows.py",
                 "app/render/__init__.py", "app/render/landing.py", "app/runs.py",
                 "app/autofix/__init__.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    # render is a package but no concern; a package with no files of its own has no doors
    assert concern_packages(tmp_path) == {"app.landing"}
    assert "app.landing" in concern_packages()


def test_a_concern_package_is_imported_only_through_its_face():
    wrong = sorted(side_doors(import_graph(), concern_packages()))
    assert not wrong, "imports of a concern's file from outside its folder (import the " \
                      "package, and re-export the name from its __init__):\n" + "\n".join(
                          f"  {a} imports {b}" for a, b in wrong)
