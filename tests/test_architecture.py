"""The rooms import one way (docs/architecture.md): read from the source with ``ast``, nothing imported.

``A → B`` means a module of A imports one of B, at the top of a file or inside a function:

    cli → trainers, wrappers, envs, core;  trainers → wrappers, core;  wrappers → core;  envs → core

and no package imports a package that imports it back, nor a module one that imports it
back. Imports under ``if TYPE_CHECKING:`` never run and do not count.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: folder -> the package it imports as (pyproject.toml's package-dir)
FOLDERS = {"llmgym": "llmgym", "envs": "llmgym.envs", "wrappers": "llmgym.wrappers", "trainers": "llmgym.trainers"}
#: room -> the rooms it may import
ALLOWED = {
    "core": {"core"},
    "envs": {"envs", "core"},
    "wrappers": {"wrappers", "core"},
    "trainers": {"trainers", "wrappers", "core"},
    "cli": {"cli", "trainers", "wrappers", "envs", "core"},
}


def _modules() -> dict[str, Path]:
    """Every module of the distribution: dotted name -> file."""
    modules = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join([package, *parts])] = path
    return modules


MODULES = _modules()


def room(module: str) -> str:
    """The room a module belongs to."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("envs", "wrappers", "trainers", "cli"):
        return parts[1]
    return "cli" if module == "llmgym.__main__" else "core"


def package(module: str) -> str:
    """The package a module is in (a package is its own); ``python -m llmgym`` is the CLI's."""
    if module == "llmgym.__main__":
        return "llmgym.cli"
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def _resolve(name: str) -> str | None:
    """The module of ours that ``name`` (a module or a name inside one) lives in, or None."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> list[tuple[str, int, bool]]:
    """``(imported module, line, at the top of the file)`` for each import of one of our modules."""
    tree = ast.parse(MODULES[module].read_text(), str(MODULES[module]))
    top = {id(node) for node in tree.body}
    for_types = {
        id(inner)
        for node in ast.walk(tree)  # ``if TYPE_CHECKING:`` imports never run
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in for_types:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package upwards
                anchor = package(module).split(".")
                base = ".".join(anchor[: len(anchor) - node.level + 1] + ([base] if base else []))
            # ``from pkg import sub`` imports the submodule; ``from mod import name`` the module
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for name in names:
            target = _resolve(name)
            if target is not None and target != module:
                found.append((target, node.lineno, id(node) in top))
    return found


IMPORTS = {module: _imports(module) for module in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_source_is_found():
    assert {
        "llmgym.env",
        "llmgym.cli.eval",
        "llmgym.envs.multiagent.evaluation",
        "llmgym.wrappers.server.app",
        "llmgym.trainers.trl",
    } <= set(MODULES)
    # ``from llmgym.wrappers.server import routes`` imports the module routes, not the package
    app_imports = {(target, top) for target, _, top in IMPORTS["llmgym.wrappers.server.app"]}
    assert ("llmgym.wrappers.server.routes", True) in app_imports


@pytest.mark.parametrize("source", sorted(ALLOWED))
def test_each_room_imports_only_the_rooms_below_it(source):
    wrong = [
        f"{MODULES[module].relative_to(ROOT)}:{line} imports {target} ({room(target)})"
        for module, imports in IMPORTS.items()
        if room(module) == source
        for target, line, _ in imports
        if room(target) not in ALLOWED[source]
    ]
    rule = f"{source} may import only {sorted(ALLOWED[source])} (docs/architecture.md, Rooms)"
    assert not wrong, rule + ":\n" + "\n".join(wrong)


def test_no_package_imports_a_package_that_imports_it_back():
    graph: dict[str, set[str]] = defaultdict(set)
    for module, imports in IMPORTS.items():
        if module == "llmgym":  # the public facade: ``llmgym.rollout`` etc. re-exported for ``from llmgym import ...``
            continue
        graph[package(module)]
        for target, _, _ in imports:
            if package(target) != package(module):
                graph[package(module)].add(package(target))
    assert not _cycles(graph), "packages that import each other (move what both need to one of them):\n" + "\n".join(
        " <-> ".join(cycle) for cycle in _cycles(graph)
    )


def test_no_import_time_cycles_between_modules():
    graph: dict[str, set[str]] = defaultdict(set)
    for module, imports in IMPORTS.items():
        graph[module] |= {target for target, _, top in imports if top}
    assert not _cycles(graph), "modules that import each other at the top of the file:\n" + "\n".join(
        " <-> ".join(cycle) for cycle in _cycles(graph)
    )


def test_no_module_imports_one_that_imports_it_back_even_inside_a_function():
    graph: dict[str, set[str]] = defaultdict(set)
    for module, imports in IMPORTS.items():
        # a module may import its own package lazily: the package's __init__ has run by then
        graph[module] |= {target for target, _, _ in imports if not module.startswith(target + ".")}
    cycles = _cycles(graph)
    assert not cycles, "modules that import each other (move what both need to one of them):\n" + "\n".join(
        " <-> ".join(cycle) for cycle in cycles
    )
