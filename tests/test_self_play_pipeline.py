"""benchmarks/self_play.py: how it reads a game (illegal replies, pairs by seed and seat), its CFR bot, the warm-up's
stages (teacher, SFT, GRPO from the SFT adapter) and what a stage that ran again makes stale, and, with tiny budgets on
tiny-random, every stage (teacher, SFT, evaluations, exploitability, self-play GRPO, the league) running once, the
results JSON holding every point's fields, and a rerun skipping the finished stages. No numbers asserted."""

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
STAGES = ["eval-base", "exploitability-base", "teacher", "sft", "eval-sft", "exploitability-sft", "grpo"]
STAGES += ["eval-step1", "exploitability-step1", "eval-step2", "exploitability-step2", "league"]


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


def test_policy_lines_show_the_first_action_at_every_information_state():
    points = [
        {"name": "base", "policy": {"0": {"Pass": 0.25, "Bet": 0.75}, "2pb": {"Pass": 1.0, "Bet": 0.0}}},
        {"name": "step16", "policy": None},  # not scored: left out
        {"name": "step32", "policy": {"0": {"Pass": 0.5, "Bet": 0.5}, "2pb": {"Pass": 0.0, "Bet": 1.0}}},
    ]
    lines = self_play.policy_lines(points)
    assert lines[0] == "P(Pass) at each information state"
    assert lines[1].split() == ["state", "0", "2pb"]
    assert lines[2].split() == ["base", "0.25", "1.00"] and lines[3].split() == ["step32", "0.50", "0.00"]
    assert self_play.policy_lines([{"name": "base", "policy": None}]) == []


def test_cfr_bot_plays_a_legal_action_the_same_for_the_same_seed():
    pytest.importorskip("pyspiel")
    from llmgym.envs.multiagent.openspiel_game import env

    choices = []
    for _ in range(2):
        game = env("kuhn_poker")
        game.reset(seed=7)
        choices.append([self_play.CFRBot(seed=s).act(game, "player_0") for s in range(20)])
    assert choices[0] == choices[1] and set(choices[0]) <= {"Pass", "Bet"}


def test_the_warm_up_teaches_legal_moves_and_grpo_starts_from_its_adapter(tmp_path):
    recipe = self_play.Recipe(rollout_precision="bf16")
    runs = self_play.stages(recipe, "kuhn", tmp_path)
    assert list(runs)[:7] == STAGES[:7] and list(runs)[-1] == "league"
    teacher, sft, grpo = runs["teacher"], runs["sft"], runs["grpo"]
    assert teacher[:2] == ["eval", "llmgym/ma-os-KuhnPoker-v0"] and "--round-robin" not in teacher
    assert teacher[teacher.index("--policy") + 1] == "scripted:legal-random"
    assert sft[:2] == ["train", "sft"] and "--min-reward" not in sft and "--lora" in sft
    assert sft[sft.index("--episodes") + 1] == str(tmp_path / "teacher" / "episodes.jsonl")
    assert grpo[grpo.index("--init-adapter") + 1] == str(tmp_path / "sft" / "final")
    assert "rollout_precision=bf16" in grpo
    assert runs["eval-sft"][runs["eval-sft"].index("--model") + 1] == str(tmp_path / "sft" / "final")
    assert f"--player=sft=local:llama.cpp:{tmp_path / 'sft' / 'final'}" in runs["league"]


def test_grpo_decodes_in_bf16_only_where_this_machine_multiplies_bf16_faster(tmp_path, monkeypatch):
    """On a 2-core AMD EPYC with AVX2 and no bf16 units the probe read 54 GFLOP/s in fp32 and 0.9 in bf16, and the
    recipe's fixed ``rollout_precision=bf16`` would have decoded GRPO's games 60x slower than fp32."""
    from llmgym.trainers import precision
    from llmgym.wrappers.hardware import MatmulRates

    recipe = self_play.Recipe()
    for fp32, bf16, expected in [(54.0, 0.9, "fp32"), (200.0, 840.0, "bf16")]:
        rates = MatmulRates(fp32_gflops=fp32, bf16_gflops=bf16, threads=2, size=1024)
        monkeypatch.setattr(precision, "matmul_rates", lambda rates=rates: rates)
        self_play._cpu_precision.cache_clear()
        assert self_play.rollout_precision(recipe) == expected
        assert f"rollout_precision={expected}" in self_play.stages(recipe, "kuhn", tmp_path)["grpo"]
    assert self_play.rollout_precision(self_play.Recipe(rollout_precision="fp32")) == "fp32"
    self_play._cpu_precision.cache_clear()  # the next caller probes this machine


def test_a_stage_that_ran_again_makes_the_stages_after_it_start_over(tmp_path, monkeypatch):
    recipe = self_play.Recipe(games=("kuhn",))
    names = list(self_play.stages(recipe, "kuhn", tmp_path / "kuhn"))
    for name in names:
        (tmp_path / "kuhn" / name).mkdir(parents=True)
        (tmp_path / "kuhn" / name / "stage.json").write_text("{}")
    found = {}

    def fake_stage(name, args, folder, logs, threads):
        found[name] = folder.exists()  # still there: it is skipped; removed: it runs again
        return {"wall_s": 1.0, "ran": not found[name]}

    (tmp_path / "kuhn" / "sft" / "stage.json").unlink()  # killed during SFT
    monkeypatch.setattr(self_play, "run_stage", fake_stage)
    self_play.run(recipe, tmp_path)
    after = names.index("sft")
    assert all(found[name] for name in names[:after]) and not any(found[name] for name in names[after:])


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
    assert [p["name"] for p in kuhn["points"]] == ["base", "sft", "step1", "step2"]
    for point in kuhn["points"]:
        assert set(point) >= {"legal", "random", "bot", "nash_conv", "rating", "step", "failed_games"}
        assert point["random"]["win"]["n"] + point["failed_games"] >= 1 and point["nash_conv"] is not None
        assert set(point["rating"]) == {"mu", "sigma", "ordinal", "score", "games"}
        assert len(point["policy"]) == 12 and all(set(p) == {"Pass", "Bet"} for p in point["policy"].values())
    assert set(kuhn["league"]) == {"base", "sft", "step1", "step2", "random", "bot"}
    assert set(kuhn["paired"]) == {"step2 - base vs random", "sft - base vs random", "step2 - sft vs random"}
    assert set(kuhn["paired"]["step2 - sft vs random"]) == {"win", "reward"}
    teacher = self_play.model_games(out / "kuhn" / "teacher")
    assert teacher and sum(g["replies"] for g in teacher) > 0 and sum(g["illegal"] for g in teacher) == 0
    assert (out / "kuhn" / "sft" / "final" / "adapter_config.json").is_file()
    assert kuhn["nash_conv_uniform"] > kuhn["nash_conv_cfr"] and kuhn["training"]
    assert set(results["stage_wall_s"]["kuhn"]) == set(STAGES)
    assert (out / "results.png").stat().st_size > 1000
    assert "win vs random" in done.stdout and "NashConv of uniform random" in done.stdout
    assert "P(Pass) at each information state" in done.stdout

    again = run(out)
    assert again.returncode == 0 and again.stdout.count("skipped") == len(STAGES)
