"""``llmgym list``: the multi-agent games are listed, and a game whose extra is missing names it."""

from __future__ import annotations

import json
import sys

import pytest
from cli_runs import WORDLE

from llmgym.cli import main


def test_list_shows_the_multiagent_games(capsys):
    pytest.importorskip("pettingzoo")
    assert main(["list", "--json"]) == 0
    rows = {row["id"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["llmgym/ma-TicTacToe-v0"]["multiagent"] is True and not rows[WORDLE]["multiagent"]
    assert main(["list"]) == 0
    assert "multi-agent:" in capsys.readouterr().out


def test_list_names_the_extra_a_multiagent_game_needs(monkeypatch):
    """Regression: without pettingzoo (a fresh ``pip install -e ".[local]"``) the row said "(cannot load:
    ModuleNotFoundError)"."""
    import builtins

    from llmgym.cli.list_envs import _describe_multiagent

    real_import = builtins.__import__

    def no_pettingzoo(name, *args, **kwargs):
        if name == "pettingzoo" or name.startswith("pettingzoo."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    for module in [
        m for m in sys.modules if m.startswith(("pettingzoo", "llmgym.envs.multiagent.", "envs.multiagent."))
    ]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setattr(builtins, "__import__", no_pettingzoo)
    assert _describe_multiagent("llmgym/ma-TicTacToe-v0") == '(needs pettingzoo (pip install "llmgym[multiagent]"))'


def test_each_openspiel_game_has_its_own_description(capsys):
    """The curated OpenSpiel ids share one module, so each factory carries its own line for the list."""
    pytest.importorskip("pyspiel")
    assert main(["list", "--json"]) == 0
    rows = {row["id"]: row["description"] for row in json.loads(capsys.readouterr().out)}
    assert rows["llmgym/ma-os-KuhnPoker-v0"].startswith("OpenSpiel's kuhn_poker")
    assert "Parallel" in rows["llmgym/ma-os-Goofspiel-v0"] and "AEC" in rows["llmgym/ma-os-LeducPoker-v0"]
