"""An exception from a multi-agent game's env (factory, reset, step) fails that game only, never the match."""

from __future__ import annotations

import itertools
import json

import pytest

pytest.importorskip("pettingzoo")

from llmgym.envs.multiagent import prisoners_dilemma, tictactoe  # noqa: E402
from llmgym.envs.multiagent.prisoners_dilemma import PrisonersDilemmaEnv  # noqa: E402
from llmgym.envs.multiagent.rollout import play_match, win_matrix  # noqa: E402
from llmgym.envs.multiagent.tictactoe import TicTacToeEnv  # noqa: E402
from llmgym.policy import Generation, Policy, PolicyRequest  # noqa: E402
from llmgym.rollout import TokenMismatchError  # noqa: E402

MINIMAX = {"player_0": tictactoe.MinimaxPlayer(0), "player_1": tictactoe.MinimaxPlayer(1)}


class SandboxDied(RuntimeError):
    """What a broken third-party game raises."""


class ResetFailsOnSeed(TicTacToeEnv):
    def __init__(self, bad_seed: int):
        super().__init__()
        self.bad_seed = bad_seed

    def reset(self, seed=None, options=None):
        if seed == self.bad_seed:
            raise SandboxDied("no sandbox for this seed")
        super().reset(seed=seed, options=options)


class StepFailsOnSeed(TicTacToeEnv):
    """Tic-tac-toe whose third move raises on one seed."""

    def __init__(self, bad_seed: int, error: BaseException | None = None):
        super().__init__()
        self.bad_seed, self.error = bad_seed, error or SandboxDied("sandbox died")

    def reset(self, seed=None, options=None):
        self.seed_used = seed
        super().reset(seed=seed, options=options)

    def step(self, action):
        if self.seed_used == self.bad_seed and len(self.history) == 2:
            raise self.error
        super().step(action)


class ParallelStepFails(PrisonersDilemmaEnv):
    """Prisoner's dilemma whose second round raises on one seed, whose reset raises on another."""

    def reset(self, seed=None, options=None):
        if seed == 7:
            raise SandboxDied("no sandbox for this seed")
        self.seed_used = seed
        return super().reset(seed=seed, options=options)

    def step(self, actions):
        if self.seed_used == 1 and self.history:
            raise SandboxDied("sandbox died")
        return super().step(actions)


def _assert_sound(game):
    for episode in game.values():
        assert "error" not in episode.metadata and episode.metadata["outcome"] in ("win", "draw", "loss")


def _assert_env_failure(game, error):
    for episode in game.values():
        assert episode.metadata["error"] == error and episode.metadata["error_source"] == "env"
        assert episode.metadata["outcome"] == "unfinished" and not episode.terminated


def test_a_reset_error_fails_one_game_and_the_match_goes_on():
    games = play_match(lambda: ResetFailsOnSeed(bad_seed=1), MINIMAX, seeds=[0, 1, 2], env_id="ttt")
    assert [g["player_0"].seed for g in games] == [0, 1, 2]
    _assert_sound(games[0])
    _assert_sound(games[2])
    failed = games[1]
    _assert_env_failure(failed, "SandboxDied: no sandbox for this seed")
    for agent, episode in failed.items():
        # the rules as the system prompt, nothing the env never delivered
        assert [m["role"] for m in episode.messages] == ["system"] and episode.turn_rewards == []
        assert episode.env_id == "ttt" and episode.group == 1 and episode.metadata["agent"] == agent


def test_a_step_error_keeps_the_game_so_far_and_the_move_the_env_failed_on():
    games = play_match(lambda: StepFailsOnSeed(bad_seed=3), MINIMAX, seeds=[2, 3], max_concurrency=1)
    _assert_sound(games[0])
    failed = games[1]
    _assert_env_failure(failed, "SandboxDied: sandbox died")
    first, second = failed["player_0"], failed["player_1"]
    # player_0 moved, player_1 moved, then player_0's second move made the env raise
    assert [m["role"] for m in first.messages][-1] == "assistant" and first.num_turns == 2
    assert second.num_turns == 1 and first.env_id == "StepFailsOnSeed"


def test_a_parallel_game_whose_reset_or_step_raises():
    players = {"player_0": prisoners_dilemma.TitForTat(), "player_1": prisoners_dilemma.AlwaysDefect()}
    games = play_match(ParallelStepFails, players, seeds=[0, 1, 7])
    _assert_sound(games[0])
    _assert_env_failure(games[1], "SandboxDied: sandbox died")
    assert [e.num_turns for e in games[1].values()] == [2, 2]  # round 1 played, round 2's moves chosen
    _assert_env_failure(games[2], "SandboxDied: no sandbox for this seed")
    assert all(e.num_turns == 0 for e in games[2].values())


def _failing_factory(fail_on: set[int]):
    """Builds tic-tac-toe, except on the calls numbered in ``fail_on`` (0 is the first call)."""
    calls = itertools.count()

    def factory():
        if next(calls) in fail_on:
            raise OSError("image not found")
        return tictactoe.env()

    return factory


def test_a_factory_that_raises_fails_that_game_only():
    # call 0 checks the players, calls 1-3 build the games (one at a time, in seed order)
    games = play_match(_failing_factory({2}), MINIMAX, seeds=[0, 1, 2], max_concurrency=1, env_id="ttt")
    _assert_sound(games[0])
    _assert_sound(games[2])
    _assert_env_failure(games[1], "OSError: image not found")
    assert [(a, e.messages, e.env_id, e.seed) for a, e in games[1].items()] == [
        ("player_0", [], "ttt", 1),
        ("player_1", [], "ttt", 1),
    ]


def test_a_factory_that_always_raises_records_every_game():
    def broken():
        raise OSError("image not found")

    games = play_match(broken, MINIMAX, seeds=[0, 1])
    for game in games:
        _assert_env_failure(game, "OSError: image not found")
        assert game["player_0"].env_id == "broken" and game["player_1"].metadata["players"]["player_0"] == "minimax"


def test_players_are_still_checked_when_the_first_env_cannot_be_built():
    with pytest.raises(ValueError, match="missing"):
        play_match(_failing_factory({0}), {"player_0": tictactoe.MinimaxPlayer(0)}, seeds=[0])


class IllegalFirst:
    """Writes one illegal move per game (-0.1), then plays as minimax."""

    name = "illegal-first"

    def act(self, env, agent):
        if env.unwrapped.illegal_attempts[agent] == 0:
            return "nowhere"
        return tictactoe.MinimaxPlayer(0).act(env, agent)


def test_win_matrix_leaves_games_the_env_failed_out_of_counts_and_means():
    players = {"minimax": tictactoe.MinimaxPlayer(0), "illegal": IllegalFirst()}
    clean, _ = win_matrix(tictactoe.env, players, seeds=[0, 1])
    matrix, games = win_matrix(lambda: StepFailsOnSeed(bad_seed=1), players, seeds=[0, 1])
    assert len(games) == 4 and sum("error" in g["player_0"].metadata for g in games) == 2
    assert all("error" not in e.metadata for g in games if g["player_0"].seed == 0 for e in g.values())
    # both seats of seed 0 count; seed 1 failed in both seats and counts in neither
    assert sum(clean.counts["illegal"]["minimax"].values()) == 4
    assert sum(matrix.counts["illegal"]["minimax"].values()) == 2
    assert clean.mean_reward["illegal"]["minimax"] == pytest.approx(-0.1)
    # the failed games' -0.1 (the illegal move came before the env failed) is not in the mean either
    assert matrix.mean_reward["illegal"]["minimax"] == pytest.approx(-0.1)
    failed = [g["player_0"] for g in games if "error" in g["player_0"].metadata]
    assert [
        e.total_reward
        for g in games
        if "error" in g["player_0"].metadata
        for e in g.values()
        if e.policy == "illegal-first"
    ] == [-0.1, -0.1]
    assert all(e.metadata["error_source"] == "env" for e in failed)


def test_win_matrix_raises_when_it_cannot_build_the_game_to_learn_its_seats():
    with pytest.raises(OSError, match="image not found"):
        win_matrix(_failing_factory({0}), {"a": tictactoe.MinimaxPlayer(0)}, seeds=[0], self_play=True)


class Broken(Policy):
    name = "broken"

    async def agenerate(self, request: PolicyRequest) -> Generation:
        raise ConnectionError("server went away")


class Crashing:
    name = "crashing"

    def act(self, env, agent):
        raise KeyError("board")


@pytest.mark.parametrize(
    "player, error",
    [
        (Broken(), "player_1: ConnectionError: server went away"),
        (Crashing(), "player_1: KeyError: 'board'"),
    ],
)
def test_a_failing_player_is_marked_as_the_policys(player, error):
    game = play_match(tictactoe.env, {"player_0": tictactoe.MinimaxPlayer(0), "player_1": player}, seeds=[0])[0]
    for episode in game.values():
        assert episode.metadata["error"] == error and episode.metadata["error_source"] == "policy"
        assert episode.metadata["outcome"] == "unfinished" and episode.truncated


class Interrupt(BaseException):
    """Stands in for Ctrl-C or a cancellation: not an ``Exception``."""


@pytest.mark.parametrize("error", [Interrupt(), TokenMismatchError("turn 1: prefix broken")])
def test_an_interrupt_or_token_mismatch_from_the_env_still_stops_the_match(error):
    with pytest.raises(type(error)) as raised:
        play_match(lambda: StepFailsOnSeed(bad_seed=0, error=error), MINIMAX, seeds=[0, 1])
    assert raised.value is error  # the env's own error, not another of the same type


def test_llmgym_eval_counts_a_failed_game_and_keeps_the_others(tmp_path, capsys, monkeypatch):
    import llmgym.envs.multiagent as multiagent
    from llmgym.cli import main
    from llmgym.episode import load_jsonl

    def make_multiagent(env_id, **kwargs):
        assert env_id == "llmgym/ma-TicTacToe-v0" and not kwargs
        return StepFailsOnSeed(bad_seed=1)

    monkeypatch.setattr(multiagent, "make_multiagent", make_multiagent)
    status = main(
        [
            "eval",
            "llmgym/ma-TicTacToe-v0",
            "--out",
            str(tmp_path / "run"),
            "--no-progress",
            "--json",
            "--policy",
            "scripted:minimax",
            "--opponent",
            "scripted:random",
            "-n",
            "3",
        ]
    )
    out = capsys.readouterr().out
    assert status == 1 and "2 of 6 games failed (first error: SandboxDied: sandbox died)" in out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["games"] == 6 and summary["failed_games"] == 2
    assert summary["totals"]["minimax"]["games"] == 4
    episodes = load_jsonl(tmp_path / "run" / "episodes.jsonl")
    assert len(episodes) == 12
    assert sorted(e.seed for e in episodes if e.metadata.get("error_source") == "env") == [1, 1, 1, 1]
