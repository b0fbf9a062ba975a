"""Connect Four (envs/multiagent/connect_four.py): start positions."""

from __future__ import annotations

import pytest

from llmgym.envs.multiagent import connect_four

DRAWN_FULL_BOARD = [
    5,
    6,
    5,
    3,
    4,
    2,
    4,
    1,
    3,
    4,
    4,
    5,
    3,
    3,
    3,
    4,
    1,
    4,
    3,
    2,
    5,
    6,
    2,
    5,
    6,
    7,
    1,
    7,
    5,
    6,
    6,
    1,
    1,
    2,
    1,
    2,
    6,
    2,
    7,
    7,
    7,
    7,
]


def test_connect_four_rejects_a_start_position_with_a_full_board():
    game = connect_four.env()
    with pytest.raises(ValueError, match="must not end the game"):  # was a game nobody could move in
        game.reset(options={"moves": DRAWN_FULL_BOARD})
    game.reset(options={"moves": DRAWN_FULL_BOARD[:-1]})
    assert game.open_columns() == [7] and game.agent_selection == "player_1"
