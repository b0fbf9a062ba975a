"""Every registered environment is documented in Gymnasium's sections, in its class docstring.

Read from the source with ``ast`` (nothing imported), so the adapter envs are checked
even where their library is not installed.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import gymnasium as gym
import pytest

import llmgym  # noqa: F401  (registers the envs)
from llmgym.registry import DeprecatedAlias

SECTIONS = (
    "## Description",
    "## Action Space",
    "## Observation Space",
    "## Rewards",
    "## Starting State",
    "## Episode End",
    "## Arguments",
    "## Version History",
)
# registered only where reasoning-gym / TextArena is installed: their classes are checked either way
ADAPTER_ENTRY_POINTS = (
    "llmgym.envs.adapters.reasoning_gym:ReasoningGymEnv",
    "llmgym.envs.adapters.textarena:TextArenaEnv",
)


def entry_points() -> list[str]:
    """The entry point of every env registered under ``llmgym/`` (aliases lead to one of them), and the adapters'."""
    registered = {
        spec.entry_point
        for env_id, spec in gym.registry.items()
        if env_id.startswith("llmgym/") and not isinstance(spec.entry_point, DeprecatedAlias)
    }
    return sorted(registered | set(ADAPTER_ENTRY_POINTS))


def class_docstring(entry_point: str) -> str:
    module, _, name = entry_point.partition(":")
    origin = importlib.util.find_spec(module).origin
    tree = ast.parse(Path(origin).read_text())
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    assert node is not None, f"{entry_point}: no class {name} in {origin}"
    return ast.get_docstring(node) or ""


def test_every_builtin_id_is_covered():
    points = entry_points()
    assert "llmgym.envs.wordle.env:WordleEnv" in points and "llmgym.envs.wordle.compact:CompactWordleEnv" in points
    assert len(points) >= 14, points


@pytest.mark.parametrize("entry_point", entry_points())
def test_env_class_docstring_has_gymnasium_sections_in_order(entry_point):
    doc = class_docstring(entry_point)
    missing = [section for section in SECTIONS if section not in doc]
    assert not missing, f"{entry_point}: its class docstring lacks {missing}"
    positions = [doc.index(section) for section in SECTIONS]
    assert positions == sorted(positions), f"{entry_point}: sections out of Gymnasium's order"
    history = doc[doc.index("## Version History") :]
    assert "- v0:" in history, f"{entry_point}: the version history names no v0"
