"""The layout's rules, read from app/'s own imports with `ast` (issue 29): no package cycle,
nothing loose at app/'s top level but the entry points and the settings, and a size budget
for modules and functions.

A package is a module's first two dotted parts (`app.agent`, `app.api`, `app.config`), so
a cycle between two rooms of one package is not counted here, but one between packages is,
whatever the import's place: inside a function or under `TYPE_CHECKING` included, since a
type-only import still makes one package's meaning depend on the other's.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

import pytest

from tests.support.paths import REPO

ROOT = REPO
APP = ROOT / "app"

TOP_LEVEL = {"__init__.py", "main.py", "cli.py", "config.py"}
"""The only modules allowed at app/'s top level: the entry points and the settings."""

MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(APP.rglob("*.py"))}


def package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def imported(path: Path) -> set[str]:
    """The app modules `path` imports, anywhere in it."""
    return imported_by(path.read_text(), module_name(path), is_package=path.name == "__init__.py")


def imported_by(source: str, module: str, *, is_package: bool = False) -> set[str]:
    found: set[str] = set()
    here = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source, module)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*here[: len(here) - node.level + 1], *filter(None, [base])])
            # `from app.x import y` names module app.x.y when y is one, else a name in app.x.
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def package_edges() -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> the module imports behind it."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, path in MODULES.items():
        for target in imported(path):
            a, b = package(module), package(target)
            if a != b and b != "app":
                edges[(a, b)].append(f"{module} -> {target}")
    return edges


def find_cycle(edges: dict[tuple[str, str], list[str]]) -> list[str] | None:
    """One cycle of packages, as the path around it, or None."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for nxt in sorted(graph[node]):
            if cycle := visit(nxt, [*path, node]):
                return cycle
        done.add(node)
        return None

    for start in sorted(graph):
        if cycle := visit(start, []):
            return cycle
    return None


def test_no_package_imports_one_that_imports_it_back() -> None:
    edges = package_edges()
    cycle = find_cycle(edges)
    if cycle is not None:
        steps = [f"{a} -> {b}: {', '.join(sorted(edges[(a, b)])[:3])}" for a, b in pairwise(cycle)]
        pytest.fail("a package cycle: " + " | ".join(steps))


def test_the_cycle_check_finds_a_cycle() -> None:
    # The check above would pass on a graph it cannot read; this one has a known cycle.
    edges = {("app.a", "app.b"): ["x"], ("app.b", "app.c"): ["y"], ("app.c", "app.a"): ["z"]}
    assert find_cycle(edges) == ["app.a", "app.b", "app.c", "app.a"]
    assert find_cycle({("app.a", "app.b"): ["x"]}) is None


def test_the_import_reader_sees_function_level_and_type_only_imports() -> None:
    # Cycles most often hide in these two places; the reader must not skip them.
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from app.api.state import AppState\n"
        "def f():\n    from app.observe import logs\n    from . import loop\n"
    )
    found = imported_by(source, "app.agent.probe")
    assert found == {
        "app.api.state",
        "app.observe",
        "app.observe.logs",
        "app.agent.loop",
        "app.agent",
    }


def test_nothing_loose_at_the_top_of_app() -> None:
    loose = sorted(p.name for p in APP.glob("*.py") if p.name not in TOP_LEVEL)
    assert not loose, f"modules at app/'s top level belong in a package: {loose}"


def over_budget(path: Path) -> list[str]:
    source = path.read_text()
    rel = path.relative_to(ROOT).as_posix()
    found = []
    if (lines := len(source.splitlines())) > MAX_MODULE_LINES:
        found.append(f"{rel}: {lines} lines")
    for node in ast.walk(ast.parse(source, rel)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{rel}:{node.lineno} {node.name}(): {length} lines")
    return found


def test_modules_and_functions_within_budget() -> None:
    over = [problem for path in MODULES.values() for problem in over_budget(path)]
    assert not over, (
        f"over {MAX_MODULE_LINES} lines a module or {MAX_FUNCTION_LINES} a function: {over}"
    )
