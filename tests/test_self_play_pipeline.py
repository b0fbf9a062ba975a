"""benchmarks/self_play.py: how it reads a game (illegal replies, pairs by seed and seat), its CFR bot, and, with tiny
budgets on tiny-random, every stage (evaluations, exploitability, self-play GRPO, the league) running once, the results
JSON holding every point's fields, and a rerun skipping the finished stages. No numbers asserted."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("matplotlib")
pytest.importorskip("pyspiel")
pytest.importorskip("openskill")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "self_play.py"
sys.path.insert(0, str(SCRIPT.parent))  # the script imports benchmarks/stages.py as ``stages``, as when it runs
self_play = importlib.import_module("self_play")
STAGES = ["eval-base", "exploitability-base", "grpo", "eval-step1", "exploitability-step1"]
STAGES += ["eval-step2", "exploitability-step2", "league"]


def test_illegal_replies_are_those_the_game_answers_with_illegal_move():
    chat = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "Your move"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "Illegal move: no legal action; reply with exactly one of: Pass, Bet"},
        {"role": "assistant", "content": "Pass"},
        {"role": "user", "content": "player 1 moved"},
        {"role": "assistant", "content": "Bet"},
    ]
    assert self_play.illegal_replies(chat) == (3, 1)


def test_paired_compares_the_same_seed_and_seat_against_one_opponent():
    def game(seed, seat, outcome, reward, opponent="random"):
        return {"opponent": opponent, "seed": seed, "seat": seat, "outcome": outcome, "reward": reward}

    base = [game(0, "player_0", "loss", -1.0), game(0, "player_1", "win", 1.0), game(1, "player_0", "loss", -2.0)]
    base.append(game(0, "player_0", "win", 2.0, opponent="bot"))
    final = [game(0, "player_1", "win", 2.0), game(0, "player_0", "win", 1.0), game(1, "player_0", "unfinished", 0.0)]
    difference = self_play.paired(final, base, "random")
    assert difference["win"]["n"] == 2 and difference["win"]["mean"] == 0.5
    assert difference["reward"]["mean"] == 1.5


def test_cfr_bot_plays_a_legal_action_the_same_for_the_same_seed():
    pytest.importorskip("pyspiel")
    from llmgym.envs.multiagent.openspiel_game import env

    choices = []
    for _ in range(2):
        game = env("kuhn_poker")
        game.reset(seed=7)
        choices.append([self_play.CFRBot(seed=s).act(game, "player_0") for s in range(20)])
    assert choices[0] == choices[1] and set(choices[0]) <= {"Pass", "Bet"}


def run(out: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, str(SCRIPT), "--tiny", "--model", "tiny-random", "--out", str(out)]
    return subprocess.run(
        command + ["--results", str(out / "results.json")], capture_output=True, text=True, timeout=900
    )


@pytest.mark.slow
def test_every_stage_runs_and_a_rerun_skips_them(tmp_path):
    out = tmp_path / "run"
    done = run(out)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for stage in STAGES:
        command = json.loads((out / "kuhn" / stage / "stage.json").read_text())["args"][0]
        assert command in ("eval", "train", "exploitability", "league")
    assert (out / "kuhn" / "grpo" / "pool" / "step-1" / "adapter_config.json").is_file()

    results = json.loads((out / "results.json").read_text())
    kuhn = results["games"]["kuhn"]
    assert [p["name"] for p in kuhn["points"]] == ["base", "step1", "step2"]
    for point in kuhn["points"]:
        assert set(point) >= {"legal", "random", "bot", "nash_conv", "rating", "step", "failed_games"}
        assert point["random"]["win"]["n"] + point["failed_games"] >= 1 and point["nash_conv"] is not None
        assert set(point["rating"]) == {"mu", "sigma", "ordinal", "score", "games"}
    assert set(kuhn["league"]) == {"base", "step1", "step2", "random", "bot"}
    assert set(kuhn["paired"]["step2 - base vs random"]) == {"win", "reward"}
    assert kuhn["nash_conv_uniform"] > kuhn["nash_conv_cfr"] and kuhn["training"]
    assert set(results["stage_wall_s"]["kuhn"]) == set(STAGES)
    assert (out / "results.png").stat().st_size > 1000
    assert "win vs random" in done.stdout and "NashConv of uniform random" in done.stdout

    again = run(out)
    assert again.returncode == 0 and again.stdout.count("skipped") == len(STAGES)
