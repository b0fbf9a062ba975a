"""The rooms import one way (docs/architecture.md): read from the source with ``ast``, nothing imported.

``A → B`` means a module of A imports one of B, at the top of a file or inside a function:

    cli → trainers, wrappers, envs, core;  trainers → wrappers, core;  wrappers → core;  envs → core

and no package imports a package that imports it back, nor a module one that imports it
back. Imports under ``if TYPE_CHECKING:`` never run and do not count.

Shared code is public where it lives: no module (the benchmark scripts included) imports
another's ``_private`` name, reads ``module._name`` through an import, or reads
``thing._name`` where only another module defines ``_name`` (``self``, ``cls`` and
``super()`` are a class's own; ``__dunder__`` names are public). A private module
(``llmgym.cli._policies``) belongs to its package: modules inside it may import it.
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


# --- shared code is public where it lives (STYLE.md, habit 9) -------------------------------------------------------

#: the benchmark scripts: not modules of the distribution, but they use it as a user would
SCRIPTS = {f"benchmarks.{path.stem}": path for path in sorted((ROOT / "benchmarks").glob("*.py"))}
SOURCES = {**MODULES, **SCRIPTS}


def _is_private(name: str) -> bool:
    """``_name`` but not ``__dunder__``."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _outside_private_module(module: str, user: str) -> str | None:
    """The private part of ``module``'s path that ``user`` is outside of, or None.

    A private module (``llmgym.cli._policies``) is its package's own: modules in that package may import it.
    """
    parts = module.split(".")
    for i, part in enumerate(parts):
        owner = ".".join(parts[:i])
        if _is_private(part) and not (user == owner or user.startswith(owner + ".")):
            return ".".join(parts[: i + 1])
    return None


def _private_definitions(tree: ast.Module) -> set[str]:
    """The private names a file defines: functions, classes, variables and attributes (``self._x = ...``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return {name for name in names if _is_private(name)}


TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in SOURCES.items()}


def _defined_in() -> dict[str, set[str]]:
    """Private name -> the modules of ours that define it."""
    defined = defaultdict(set)
    for module in MODULES:
        for name in _private_definitions(TREES[module]):
            defined[name].add(module)
    return defined


DEFINED_IN = _defined_in()


def _imported_names(module: str, tree: ast.Module) -> tuple[list[tuple[str, str, int]], dict[str, str | None]]:
    """``(module of ours, name or "", line)`` for each import, and each bound name -> the module of ours it is, or None.

    A name bound to a module not of ours (``os``, ``torch``) maps to None.
    """
    imported, bound = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = alias.name if alias.name in MODULES else None
                if _resolve(alias.name):
                    imported.append((alias.name, "", node.lineno))
                if alias.asname:
                    bound[alias.asname] = target
                else:
                    top = alias.name.partition(".")[0]
                    bound[top] = top if top in MODULES else None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package(module).split(".") if module in MODULES else []
                base = ".".join(anchor[: len(anchor) - node.level + 1] + ([base] if base else []))
            if not _resolve(base):
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in MODULES:  # a submodule
                    imported.append((full, "", node.lineno))
                    bound[alias.asname or alias.name] = full
                else:
                    imported.append((base, alias.name, node.lineno))
    return imported, bound


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of names, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _is_own(node: ast.expr) -> bool:
    """``self``, ``cls`` or ``super()``: a class using its own (or its bases') private names."""
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _private_attributes(module: str, tree: ast.Module, bound: dict[str, str | None]) -> list[str]:
    """Each ``thing._name`` in ``module`` that uses another module's private name, as ``line: what``."""
    own = _private_definitions(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _is_private(node.attr)) or _is_own(node.value):
            continue
        dotted = _dotted(node.value)
        root = dotted.partition(".")[0] if dotted else None
        if root in bound:
            # ``module._name``: through an import of ours, or into another library (its business, not ours)
            target = bound[root] and ".".join([bound[root], *dotted.split(".")[1:]])
            if target in MODULES and target != module:
                found.append(f"{node.lineno}: {ast.unparse(node)} (private to {target})")
            continue
        others = DEFINED_IN.get(node.attr, set()) - {module}
        if node.attr not in own and others:  # an object of a class another module defines
            found.append(f"{node.lineno}: {ast.unparse(node)} (private to {', '.join(sorted(others))})")
    return found


def _private_uses(module: str) -> list[str]:
    """Each use in ``module`` of a private name or private module another module owns."""
    tree = TREES[module]
    imported, bound = _imported_names(module, tree)
    found = []
    for target, name, line in imported:
        private_module = _outside_private_module(target, module)
        if private_module:
            found.append(f"{line}: imports {target} (private to {private_module.rpartition('.')[0]})")
        elif name and _is_private(name) and target != module:
            found.append(f"{line}: imports {name} from {target}")
    return sorted(found + _private_attributes(module, tree, bound), key=lambda use: int(use.partition(":")[0]))


PRIVATE_USES = {module: _private_uses(module) for module in SOURCES}


def test_the_private_name_check_finds_what_it_must(monkeypatch):
    """Each kind of use the check must catch, and what it must let be, on a made-up module."""
    source = """
import os
import llmgym.tools
import llmgym.cli._policies
from llmgym import _moved
from llmgym.tools import Tool, _SUBSCHEMAS
from llmgym.cli import _policies
from llmgym.trainers import checkpoint

os._exit
llmgym.tools._SUBSCHEMA_MAPS
checkpoint._step_of(folder)
policy._engine
self._position = 0
game._position, self._engine, super()._engine, cls.__name__, Tool.__init__
"""
    monkeypatch.setitem(TREES, "llmgym.made_up", ast.parse(source))
    monkeypatch.setitem(DEFINED_IN, "_engine", {"llmgym.wrappers.made_up_policy"})
    monkeypatch.setitem(DEFINED_IN, "_position", {"llmgym.envs.made_up_game"})
    found = [use.partition(":")[2].strip() for use in _private_uses("llmgym.made_up")]
    assert found == [
        "imports llmgym.cli._policies (private to llmgym.cli)",
        "imports _SUBSCHEMAS from llmgym.tools",
        "imports llmgym.cli._policies (private to llmgym.cli)",
        "llmgym.tools._SUBSCHEMA_MAPS (private to llmgym.tools)",
        "checkpoint._step_of (private to llmgym.trainers.checkpoint)",
        "policy._engine (private to llmgym.wrappers.made_up_policy)",
    ]


def test_no_module_uses_another_modules_private_names():
    wrong = [f"{SOURCES[module].relative_to(ROOT)}:{use}" for module, uses in PRIVATE_USES.items() for use in uses]
    rule = "shared code is public where it lives (a domain name, in __all__, with a docstring), or moves"
    assert not wrong, rule + "; these use another module's private names:\n" + "\n".join(wrong)
