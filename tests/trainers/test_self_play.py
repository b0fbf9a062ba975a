"""Self-play GRPO on multi-agent ids: role groups, the opponent mix, the snapshot pool, resume, ratings, NashConv."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

from llmgym.cli import main  # noqa: E402
from llmgym.envs import multiagent  # noqa: E402
from llmgym.envs.multiagent.evaluation import MultiAgentGame  # noqa: E402
from llmgym.episode import Episode  # noqa: E402
from llmgym.trainers.advantages import compute_advantages  # noqa: E402
from llmgym.trainers.config import GRPOConfig  # noqa: E402
from llmgym.trainers.grpo import GRPOTrainer  # noqa: E402
from llmgym.trainers.opponents import SnapshotPool, draw_opponent, parse_opponents  # noqa: E402
from llmgym.trainers.self_play import GameCounts, ScheduledGame, role_group  # noqa: E402
from tests.trainers import toy_game  # noqa: E402


@pytest.fixture
def vowel_duel(monkeypatch):
    """The toy game as a multi-agent id, for this test only."""
    monkeypatch.setitem(multiagent.MULTIAGENT_ENVS, toy_game.ENV_ID, "tests.trainers.toy_game:env")
    monkeypatch.setitem(multiagent.MULTIAGENT_KINDS, toy_game.ENV_ID, "aec")
    return toy_game.ENV_ID


def small_config(out: Path, env_id: str, **overrides) -> GRPOConfig:
    settings = dict(
        env_id=env_id,
        model="tiny-random",
        out=str(out),
        steps=2,
        prompts_per_step=2,
        group_size=2,
        max_new_tokens=4,
        learning_rate=5e-2,
        progress=False,
        plot=False,
        save_every=1,
        torch_threads=1,
        lora=True,
        lora_r=4,
        lora_alpha=8,
    )
    settings.update(overrides)
    return GRPOConfig(**settings)


def trainer_for(config: GRPOConfig, resume: bool = False) -> GRPOTrainer:
    """The trainer of a self-play run, given its game as ``llmgym train grpo`` gives it."""
    return GRPOTrainer(config, resume=resume, game=MultiAgentGame(config.env_id, config.env_kwargs))


def train(config: GRPOConfig, resume: bool = False) -> tuple[GRPOTrainer, list[dict]]:
    trainer = trainer_for(config, resume)
    try:
        history = trainer.train()
    finally:
        trainer.close()
    return trainer, history


def metrics_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def saved_state(out: Path) -> dict:
    newest = sorted((out / "checkpoints").glob("step_*"))[-1]
    return json.loads((newest / "trainer_state.json").read_text())


# -- role-conditioned advantages ----------------------------------------------------------


def seat_episodes(groups: list[int]) -> list[Episode]:
    """Four games of one seed: seat 0 earns its opponent's reward plus 1 (an asymmetric game)."""
    episodes = []
    for luck in [0.0, 1.0, -1.0, 0.5]:
        for seat in (0, 1):
            reward = luck + 1.0 if seat == 0 else -luck
            episode = Episode("g", seed=0, turn_rewards=[reward], token_ids=[1, 2], mask=[0, 1], group=groups[seat])
            episode.metadata["agent"] = f"player_{seat}"
            episodes.append(episode)
    return episodes


def mean_outcome_by_seat(episodes: list[Episode]) -> list[float]:
    advantages = compute_advantages(episodes, turn_lambda=0.0)
    return [float(np.mean(advantages.outcome[seat::2])) for seat in (0, 1)]


def test_role_groups_give_each_seat_a_zero_mean_advantage():
    per_role = mean_outcome_by_seat(seat_episodes([role_group(0, 0, 2), role_group(0, 1, 2)]))
    assert per_role == pytest.approx([0.0, 0.0], abs=1e-9)
    shared = mean_outcome_by_seat(seat_episodes([0, 0]))  # one baseline for both seats: seat 0's edge is credited
    assert shared[0] > 0.5 and shared[1] < -0.5


# -- the opponent mix ------------------------------------------------------------------------


def test_opponents_parse_and_draw_by_weight():
    assert parse_opponents("self=0.5,pool=0.3, random=0.2") == {"self": 0.5, "pool": 0.3, "random": 0.2}
    assert parse_opponents("self") == {"self": 1.0}
    for bad in ("self=x", "self=1,self=2", "=1", "self=1,,random=1"):
        with pytest.raises(ValueError):
            parse_opponents(bad)
    rng = np.random.default_rng(0)
    draws = [draw_opponent({"self": 3.0, "random": 1.0}, rng) for _ in range(2000)]
    assert 0.70 < draws.count("self") / len(draws) < 0.80


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"opponents": {"self": 0.0}}, "must be > 0"),
        ({"opponents": {"self": float("nan")}}, "finite"),
        ({"opponents": {}}, "at least one kind"),
        ({"opponents": {"pool": 1.0}, "lora": True}, "snapshot_every is 0"),
        ({"snapshot_every": 2}, "needs lora=True"),
        ({"snapshot_every": -1, "lora": True}, "snapshot_every must be >= 0"),
        ({"pool_size": 0}, "pool_size must be >= 1"),
        ({"exploitability_every": 1}, "exploitability_every needs"),
    ],
)
def test_self_play_settings_are_checked_when_the_config_is_made(settings, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig(env_id="llmgym/ma-TicTacToe-v0", **settings)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"opponents": {"self": 1.0, "bogus": 1.0}}, "unknown kind 'bogus'"),
        ({"opponents": {"mcts": 1.0}}, "unknown kind 'mcts'"),  # the native game has no MCTS bot
        ({"base_url": "http://127.0.0.1:1/v1", "lora": True}, "base_url="),
        ({"ray": True}, "ray="),
    ],
)
def test_the_trainer_checks_the_mix_against_its_game_before_loading_a_model(settings, message, tmp_path):
    config = GRPOConfig(env_id="llmgym/ma-TicTacToe-v0", model="no-such-model", out=str(tmp_path), **settings)
    with pytest.raises(ValueError, match=message):
        trainer_for(config)


def test_self_play_settings_need_a_game_and_the_cli_reads_the_mix(capsys, tmp_path):
    config = GRPOConfig(env_id="llmgym/Wordle-v0", opponents={"random": 1.0}, out=str(tmp_path))
    with pytest.raises(ValueError, match="needs a multi-agent env id"):
        GRPOTrainer(config)
    out = str(tmp_path / "cli")
    assert main(["train", "grpo", "llmgym/ma-TicTacToe-v0", "--opponents", "self=1,nobody=1", "--out", out]) == 2
    assert "unknown kind 'nobody'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "grpo", "llmgym/ma-TicTacToe-v0", "--opponents", "self=lots", "--out", out])
    assert exit_info.value.code == 2


# -- training -------------------------------------------------------------------------------


def test_self_play_on_a_native_game_plays_both_seats_against_the_mix(tmp_path):
    config = small_config(tmp_path, "llmgym/ma-TicTacToe-v0", opponents={"self": 1.0, "minimax": 1.0})
    trainer, history = train(config)
    assert [m["step"] for m in history] == [1, 2]
    for line in metrics_of(tmp_path):
        assert "seat/player_0/reward" in line and "seat/player_1/reward" in line
        assert 0.0 <= line["legal_action_rate"] <= 1.0 and line["games/finished"] + line["games/failed"] == 4
    # against another player the trained seats alternate within a seed; against itself it plays both
    games = trainer.generator.schedule([11, 12], step=0, attempt=0)
    assert games == trainer.generator.schedule([11, 12], step=0, attempt=0)  # the run's seeded draw
    for seed in (11, 12):
        others = [g.trained for g in games if g.seed == seed and g.kind != "self"]
        assert others == [("player_0",), ("player_1",)][: len(others)]
    assert all(g.trained == ("player_0", "player_1") for g in games if g.kind == "self")
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    for sample in samples:  # every trained episode is grouped by (seed, seat)
        seat = int(sample["metadata"]["agent"][-1])
        assert sample["group"] == role_group(sample["metadata"]["seed_group"], seat, 2)


def test_kuhn_self_play_with_a_pool_rates_the_policy_and_logs_its_nash_conv(tmp_path):
    pytest.importorskip("pyspiel")
    pytest.importorskip("openskill")
    config = small_config(
        tmp_path,
        "llmgym/ma-os-KuhnPoker-v0",
        prompts_per_step=1,
        opponents={"self": 1.0, "pool": 1.0, "random": 1.0},
        snapshot_every=1,
        pool_size=2,
        rate_every=2,
        rate_games=1,
        exploitability_every=2,
    )
    _, history = train(config)
    assert "seat/player_0/reward" in history[0] and "seat/player_1/reward" in history[0]
    assert "rating/current/ordinal" not in history[0]
    last = history[-1]
    assert {"rating/current/ordinal", "rating/random/ordinal", "rating/pool/step-1/ordinal"} <= set(last)
    assert 0.0 <= last["exploitability/nash_conv"] <= 4.0
    rows = [json.loads(line) for line in (tmp_path / "ratings.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2]
    assert {s["name"] for s in rows[0]["standings"]} == {"current", "random", "pool/step-1"}
    assert sorted(p.name for p in (tmp_path / "pool").iterdir()) == ["step-1", "step-2"]  # step-0 pruned


def test_pool_snapshots_are_written_pruned_and_resumed(tmp_path, vowel_duel):
    settings = dict(opponents={"self": 1.0, "pool": 1.0}, snapshot_every=1, pool_size=2)
    _, straight = train(small_config(tmp_path / "a", vowel_duel, **settings))
    assert saved_state(tmp_path / "a")["self_play"]["pool"]["steps"] == [1, 2]
    assert sorted(p.name for p in (tmp_path / "a" / "pool").iterdir()) == ["step-1", "step-2"]
    assert (tmp_path / "a" / "pool" / "step-2" / "adapter_config.json").is_file()
    assert any(m["reward/std"] > 0 for m in straight)  # the toy game's games differ: there is signal
    # a run stopped after step 1, resumed: the same pool, the same games, the same weights
    train(small_config(tmp_path / "b", vowel_duel, steps=1, **settings))
    assert saved_state(tmp_path / "b")["self_play"]["pool"]["steps"] == [0, 1]
    resumed, _ = train(small_config(tmp_path / "b", vowel_duel, **settings), resume=True)
    assert saved_state(tmp_path / "b")["self_play"]["pool"]["steps"] == [1, 2]
    assert sorted(p.name for p in (tmp_path / "b" / "pool").iterdir()) == ["step-1", "step-2"]
    rewards = [[m["reward/mean"], m["seat/player_0/reward"]] for m in metrics_of(tmp_path / "a")]
    assert [[m["reward/mean"], m["seat/player_0/reward"]] for m in metrics_of(tmp_path / "b")] == rewards
    # a resumed run needs the snapshots its checkpoint lists
    (tmp_path / "b" / "pool" / "step-2" / "adapter_config.json").unlink()
    with pytest.raises(FileNotFoundError, match="step-2"):
        trainer_for(small_config(tmp_path / "b", vowel_duel, steps=3, **settings), resume=True)


def test_snapshot_pool_tidy_removes_only_the_snapshots_it_no_longer_lists(tmp_path):
    pool = SnapshotPool(tmp_path, size=2, base="tiny-random")
    for step in (0, 3, 6):
        (tmp_path / f"step-{step}").mkdir()
    (tmp_path / "notes").mkdir()
    pool.steps = [3, 6]
    pool.tidy()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes", "step-3", "step-6"]
    assert pool.state_dict() == {"steps": [3, 6]}


def test_a_game_the_env_broke_is_counted_and_left_out_of_the_loss(tmp_path, vowel_duel):
    # seed 0 draws env seeds 850623 (whose games break at the second move) and 636961 (whose games finish)
    config = small_config(tmp_path, vowel_duel, steps=1, env_kwargs={"broken": True})
    _, [metrics] = train(config)
    assert metrics["games/failed"] == 2 and metrics["games/finished"] == 2
    assert metrics["episodes/errors"] == 4  # both seats of each broken game
    assert metrics["episodes_seen"] == 4  # the finished games' episodes trained


def test_game_counts_give_rates_by_seat_and_opponent():
    counts = GameCounts(["player_0", "player_1"], ["self", "random"])

    def played(kind, trained, outcomes, turns=(2, 2), illegal=(0, 0), error=False):
        game = ScheduledGame(0, 0, 0, kind, trained)
        episodes = {}
        for index, agent in enumerate(["player_0", "player_1"]):
            reward = {"win": 1.0, "draw": 0.0, "loss": -1.0}[outcomes[index]]
            rewards = [0.0] * (turns[index] - 1) + [reward]
            metadata = {"outcome": outcomes[index], "illegal_moves": illegal[index]}
            episodes[agent] = Episode("g", turn_rewards=rewards, metadata=metadata | ({"error": "x"} if error else {}))
        counts.add_game(game, episodes)

    played("self", ("player_0", "player_1"), ("win", "loss"), illegal=(1, 0))
    played("random", ("player_1",), ("loss", "win"))
    played("random", ("player_0",), ("draw", "draw"), turns=(4, 4), illegal=(2, 0))
    played("random", ("player_0",), ("loss", "win"), error=True)
    metrics = counts.metrics(counts.take())
    assert metrics["games/finished"] == 3 and metrics["games/failed"] == 1
    assert metrics["seat/player_0/reward"] == pytest.approx(0.5) and metrics["seat/player_1/reward"] == 0.0
    assert metrics["opponent/self/games"] == 2 and metrics["opponent/self/win_rate"] == 0.5
    assert metrics["opponent/random/games"] == 2
    assert metrics["opponent/random/win_rate"] == 0.5 and metrics["opponent/random/draw_rate"] == 0.5
    assert metrics["legal_action_rate"] == pytest.approx(1 - 3 / 10)  # 3 illegal of the trained seats' 10 turns
    assert counts.take()["games/finished"] == 0  # take() starts the counts again
