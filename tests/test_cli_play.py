"""``llmgym play`` through ``main([...])``: a scripted actor, typed (piped) input, errors."""

from __future__ import annotations

import io

from llmgym.cli import main
from llmgym.episode import load_jsonl

WORDLE = "llmgym/Wordle-v0"


def test_scripted_play_solves_and_records(tmp_path, capsys):
    path = tmp_path / "play.jsonl"
    assert main(["play", WORDLE, "--policy", "scripted:wordle", "--seed", "3", "--out", str(path)]) == 0
    out = capsys.readouterr().out
    assert "episode over (terminated)" in out and "Solved in" in out
    (episode,) = load_jsonl(path)
    assert episode.seed == 3 and episode.terminated and episode.component_totals()["solved"] == 1.0
    assert episode.policy == "scripted:wordle"


def test_typed_actions_are_played_verbatim(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("crane\n[bold]x[/bold]\n\n"))
    path = tmp_path / "play.jsonl"
    assert main(["play", WORDLE, "--out", str(path)]) == 0
    out = capsys.readouterr().out
    assert "CRANE" in out and "stopped." in out and "invalid_guess=1" in out
    (episode,) = load_jsonl(path)
    assert [m["content"] for m in episode.messages if m["role"] == "assistant"] == ["crane", "[bold]x[/bold]"]
    assert not episode.terminated and not episode.truncated


def test_play_errors(capsys):
    assert main(["play", "llmgym/Wordel-v0"]) == 2
    assert "llmgym/Wordle-v0" in capsys.readouterr().err
    assert main(["play", WORDLE, "--policy", "robot"]) == 2
    assert "human" in capsys.readouterr().err
    assert main(["play", WORDLE, "--env-kwargs", "[1]"]) == 2
    assert "JSON object" in capsys.readouterr().err
    assert main(["play", WORDLE, "--env-kwargs", '{"max_turns": -1}']) == 2  # the env's ValueError, not a traceback
    assert "max_turns must be >= 1" in capsys.readouterr().err
    assert main(["play", WORDLE, "--seed", "-1", "--policy", "scripted:wordle"]) == 2
    assert "--seed must be >= 0" in capsys.readouterr().err
