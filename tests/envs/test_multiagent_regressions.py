"""Regression tests for bugs found in the multi-agent games, their rollouts and the TextArena AEC adapter."""

from __future__ import annotations

import asyncio
import math

import pytest

from llmgym.envs.multiagent import connect_four, prisoners_dilemma, tictactoe

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
