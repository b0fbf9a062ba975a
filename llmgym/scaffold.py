"""Scaffolding a new environment package (``llmgym init``).

Holds :func:`scaffold`, which writes an installable package from the
templates in ``llmgym/templates/``: an :class:`~llmgym.LLMEnv` subclass with a
tool and a rubric, a ``pyproject.toml`` with an ``llmgym.envs`` entry point,
tests that run :func:`llmgym.checker.check_env`, and a README; and
:func:`names_for`, which derives the package, class and id from the name.
"""

from __future__ import annotations

import importlib.util
import keyword
import re
import sys
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

__all__ = ["ProjectNames", "names_for", "scaffold"]

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)*$")

#: template file -> path in the new project (``{package}`` is filled in).
_FILES = {
    "pyproject.toml.txt": "pyproject.toml",
    "README.md.txt": "README.md",
    "gitignore.txt": ".gitignore",
    "package_init.py.txt": "{package}/__init__.py",
    "env.py.txt": "{package}/env.py",
    "env_tests.py.txt": "tests/test_env.py",
}


@dataclass(frozen=True)
class ProjectNames:
    """The names a new environment package uses.

    Attributes:
        dist_name: the distribution (``pip install``) name, e.g. ``my-env``.
        package: the import name, e.g. ``my_env``.
        class_name: the environment class, e.g. ``MyEnv``.
        env_id: the Gymnasium id, e.g. ``my-env/MyEnv-v0``: version 0 of the name. A change that
            could move a score registers ``-v1``; a variant (another way to play the game) gets
            a name of its own, ``my-env/MyEnvVariant-v0`` (docs/authoring.md, "Versioning ids").
    """

    dist_name: str
    package: str
    class_name: str
    env_id: str


def names_for(name: str) -> ProjectNames:
    """Derive the package, class and id from a project name.

    Raises:
        ValueError: the name is not letters and digits joined by ``-``/``_``,
            or its import name would shadow a standard-library module or llmgym.

    Example:
        >>> names_for("my-env")
        ProjectNames(dist_name='my-env', package='my_env', class_name='MyEnv', env_id='my-env/MyEnv-v0')
    """
    if not _NAME.match(name):
        raise ValueError(
            f"{name!r} is not a valid project name: use letters and digits joined by '-' or '_' "
            "and start with a letter, e.g. my-env"
        )
    package = name.replace("-", "_").lower()
    # "tests": the package folder would be the project's tests/ folder (pytest then imports it half-made)
    if package in sys.stdlib_module_names:
        raise ValueError(
            f"the import name {package!r} would shadow the standard-library module {package}; "
            f"pick another name, e.g. {package}-env"
        )
    if keyword.iskeyword(package):
        raise ValueError(
            f"the import name {package!r} is a Python keyword, so `import {package}` cannot work; "
            f"pick another name, e.g. {package}-env"
        )
    if package in ("llmgym", "tests"):
        raise ValueError(f"the import name {package!r} would shadow a module; pick another name, e.g. {package}-env")
    parts = re.split(r"[-_]", name)
    class_name = "".join(part[:1].upper() + part[1:] for part in parts)
    if not class_name.endswith("Env"):
        class_name += "Env"
    return ProjectNames(name, package, class_name, f"{name}/{class_name}-v0")


def _refuse_shadowing(package: str, root: Path) -> None:
    """Refuse an import name that an installed module already has (``numpy``, ``gymnasium``).

    The new package would hide that module, or be hidden by it, wherever both are
    importable. A module found inside ``root`` is this project's own earlier scaffold
    (``--force`` re-run after ``pip install -e``), and a namespace package (a bare
    folder on the path) loses to any regular package, so neither counts.

    Raises:
        ValueError: ``package`` is the import name of a module installed elsewhere.
    """
    try:
        spec = importlib.util.find_spec(package)
        origin = spec.origin if spec else None  # None also for a namespace package
    except ValueError:  # imported already, with no __spec__: it exists all the same
        origin = "already imported"
    if origin is None:
        return
    location = Path(origin)
    if location.is_absolute() and location.resolve().is_relative_to(root.resolve()):
        return
    raise ValueError(
        f"the import name {package!r} would shadow the installed module {package} ({origin}); "
        f"pick another name, e.g. {package}-env"
    )


def scaffold(name: str, parent: str | Path = ".", description: str = "", force: bool = False) -> Path:
    """Write a new environment package into ``parent/name`` and return its folder.

    Args:
        name: the project name (``my-env``); see :func:`names_for`.
        parent: the folder to create it in.
        description: one line for ``llmgym list`` and the README.
        force: write into an existing non-empty folder (files are overwritten).

    Raises:
        ValueError: a bad name (see :func:`names_for`), an import name that an installed
            module already has (``numpy``; this project's own earlier scaffold in ``parent/name``
            does not count), the folder exists and is not empty (without ``force``), or
            ``parent`` cannot hold a folder (it, or a folder above it, is a file).
    """
    from llmgym import __version__

    names = names_for(name)
    root = Path(parent) / name
    _refuse_shadowing(names.package, root)
    if root.exists() and not root.is_dir():
        raise ValueError(f"{root} already exists and is not a folder; pick another name or --dir")
    above = next(p for p in root.absolute().parents if p.exists())
    if not above.is_dir():  # mkdir would fail halfway with NotADirectoryError
        raise ValueError(f"cannot create {root}: {above} is a file, not a folder; pick another --dir")
    if root.exists() and any(root.iterdir()) and not force:
        raise ValueError(
            f"{root} already exists and is not empty; pick another name or --dir, "
            "or write into it with --force (force=True)"
        )
    values = {
        "dist_name": names.dist_name,
        "package": names.package,
        "class_name": names.class_name,
        "env_id": names.env_id,
        "llmgym_version": __version__,
    }
    # One line, in the Python and TOML strings of the templates: newlines and
    # backslashes there made the package unimportable and pyproject.toml invalid.
    line = " ".join((description or "Find a hidden number from higher/lower hints.").split())
    line = "".join(c for c in line if c.isprintable()).replace('"', "'")
    templates = files("llmgym.templates")
    for template, target in _FILES.items():
        text = templates.joinpath(template).read_text(encoding="utf-8")
        escaped = line if template == "README.md.txt" else line.replace("\\", "\\\\")
        for key, value in {**values, "description": escaped}.items():
            text = text.replace("{{" + key + "}}", value)
        path = root / target.format(package=names.package)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root
