"""Regression tests for bugs found in the multi-agent games, their rollouts and the TextArena AEC adapter."""

from __future__ import annotations

import asyncio
import math

import pytest

from llmgym.envs.multiagent import connect_four, prisoners_dilemma, tictactoe
from llmgym.envs.multiagent.rollout import aplay_match, win_matrix
from llmgym.policy import Generation, Policy, PolicyRequest

DRAWN_FULL_BOARD = [5, 6, 5, 3, 4, 2, 4, 1, 3, 4, 4, 5, 3, 3, 3, 4, 1, 4, 3, 2, 5, 6,
                    2, 5, 6, 7, 1, 7, 5, 6, 6, 1, 1, 2, 1, 2, 6, 2, 7, 7, 7, 7]


@pytest.mark.parametrize("kwargs", [
    {"illegal_penalty": math.nan}, {"illegal_penalty": math.inf}, {"forfeit_penalty": math.nan}, {"forfeit_penalty": -1},
    {"max_retries": -1},
])
def test_prisoners_dilemma_rejects_non_finite_penalties_and_negative_retries(kwargs):
    # NaN passed the old `< 0` check and turned every later reward into NaN
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        prisoners_dilemma.parallel_env(**kwargs)


@pytest.mark.parametrize("factory", [tictactoe.env, connect_four.env])
def test_aec_step_without_a_running_game_says_to_reset(factory):
    game = factory()
    with pytest.raises(RuntimeError, match="reset"):  # was AttributeError: no agent_selection
        game.step("a1")
    game.reset(seed=0)
    for move in (["a1", "a2", "b1", "b2", "c1"] if factory is tictactoe.env else ["1", "2", "1", "2", "1", "2", "1"]):
        game.step(move)
    while game.agents:
        game.step(None)
    with pytest.raises(RuntimeError, match="reset"):  # was KeyError: 'player_0'
        game.step(None)
    game.reset(seed=0)
    game.step("b2" if factory is tictactoe.env else "4")
    assert not game.game_over


def test_connect_four_rejects_a_start_position_with_a_full_board():
    game = connect_four.env()
    with pytest.raises(ValueError, match="must not end the game"):  # was a game nobody could move in
        game.reset(options={"moves": DRAWN_FULL_BOARD})
    game.reset(options={"moves": DRAWN_FULL_BOARD[:-1]})
    assert game.open_columns() == [7] and game.agent_selection == "player_1"


class _Broken(Policy):
    name = "broken"

    async def agenerate(self, request: PolicyRequest) -> Generation:
        raise ConnectionError("server went away")


class _SlowCooperator(Policy):
    name = "slow"

    async def agenerate(self, request: PolicyRequest) -> Generation:
        await asyncio.sleep(0.1)
        return Generation({"role": "assistant", "content": "C"})


def test_parallel_policy_failure_leaves_no_move_running_into_the_finished_episodes():
    async def match():
        games = await aplay_match(prisoners_dilemma.parallel_env, {"player_0": _Broken(), "player_1": _SlowCooperator()}, seeds=[0])
        episode = games[0]["player_1"]
        before = (list(episode.messages), list(episode.turn_rewards))
        await asyncio.sleep(0.3)  # the slow seat's move used to land in the returned episode now
        return episode, before

    episode, (messages, turn_rewards) = asyncio.run(match())
    assert episode.messages == messages and episode.turn_rewards == turn_rewards
    assert "server went away" in episode.metadata["error"]


class _IllegalThenBroken(Policy):
    """One illegal move (-0.1 in its first game), then a dead server."""

    name = "flaky"

    def __init__(self):
        self.calls = 0

    async def agenerate(self, request: PolicyRequest) -> Generation:
        self.calls += 1
        if self.calls == 1:
            return Generation({"role": "assistant", "content": "no cell here"})
        raise ConnectionError("server went away")


def test_win_matrix_mean_reward_counts_only_finished_games():
    matrix, games = win_matrix(tictactoe.env, {"minimax": tictactoe.MinimaxPlayer(0), "flaky": _IllegalThenBroken()},
                               seeds=[0], max_concurrency=1)
    assert all(e.metadata["outcome"] == "unfinished" for g in games for e in g.values())
    assert sum(matrix.counts["flaky"]["minimax"].values()) == 0
    assert matrix.mean_reward["flaky"]["minimax"] == 0.0  # was -0.1: a partial reward over zero finished games


def _textarena_totals(game, num_players, moves_of):
    from llmgym.envs.adapters.textarena_aec import aec_env

    env = aec_env(game, num_players=num_players)
    env.reset(seed=0)
    totals = dict.fromkeys(env.possible_agents, 0.0)
    for agent in env.agent_iter(40):
        _, reward, terminated, truncated, _ = env.last()
        totals[agent] += reward
        env.step(None if terminated or truncated else moves_of(agent))
    return totals


def test_textarena_invalid_move_that_eliminates_a_player_is_charged():
    pytest.importorskip("textarena")
    # Liar's Dice goes on after player_0's second invalid move eliminates it; that move used to cost nothing
    totals = _textarena_totals("LiarsDice-v0", 3, lambda agent: "garbage" if agent == "player_0" else "[4]")
    # eliminated first (-1) and second (0), each after two invalid moves (-0.1 each); player_2 wins (+1)
    assert totals == pytest.approx({"player_0": -1.2, "player_1": -0.2, "player_2": 1.0})
    # two players: the losing second invalid move is charged once, as before
    two = _textarena_totals("TicTacToe-v0", 2, lambda agent: "garbage")
    assert two == pytest.approx({"player_0": -1.2, "player_1": 1.0})


def test_prisoners_dilemma_refuses_actions_for_unknown_agents_and_has_an_aec_entry():
    from pettingzoo.test import api_test

    from llmgym.envs.multiagent import prisoners_dilemma_v0

    game = prisoners_dilemma_v0.parallel_env()
    game.reset(seed=0)
    with pytest.raises(ValueError, match="player_2"):  # was ignored silently while player_1 had not acted
        game.step({"player_0": "C", "player_2": "D"})
    api_test(prisoners_dilemma_v0.env(), num_cycles=10)  # PettingZoo's usual env()/parallel_env() pair
