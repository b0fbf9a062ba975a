"""The single-agent versions of the games (envs/multiagent/versus.py): turn budgets, observations inside their
space, and native tool calls passed through as they are."""

from __future__ import annotations

import gymnasium as gym
import pytest
from multiagent_actions import FLOOD, native_call

import llmgym  # noqa: F401  registers the envs


@pytest.mark.parametrize(
    ("env_id", "least"),
    [
        ("llmgym/TicTacToe-v0", 5),
        ("llmgym/ConnectFour-v0", 21),
        ("llmgym/Negotiation-v0", 4),
        ("llmgym/PrisonersDilemma-v0", 10),
    ],
)
def test_games_against_a_bot_refuse_a_turn_budget_that_cannot_finish_a_game(env_id, least):
    """Regression: Negotiation with max_turns=2 told the agent "the game lasts 8 turns" and ended every game unfinished
    (-1)."""
    import gymnasium as gym

    with pytest.raises(ValueError, match=f"max_turns must be >= {least}"):
        gym.make(env_id, max_turns=least - 1)
    env = gym.make(env_id, max_turns=least)
    env.reset(seed=0)
    env.close()


SINGLE_IDS = ["llmgym/TicTacToe-v0", "llmgym/ConnectFour-v0", "llmgym/Negotiation-v0", "llmgym/PrisonersDilemma-v0"]


@pytest.mark.parametrize("env_id", SINGLE_IDS)
def test_single_agent_versions_keep_observations_in_their_space(env_id):
    env = gym.make(env_id)
    observation, _ = env.reset(seed=0)
    assert env.observation_space.contains(observation)
    for _ in range(2):
        observation, *_ = env.step("x" * 30_000 + FLOOD)
        assert env.observation_space.contains(observation)


def test_single_agent_prisoners_dilemma_delivers_a_message_that_mentions_tool_call_tags():
    env = gym.make("llmgym/PrisonersDilemma-v0")
    env.reset(seed=0)
    _, reward, *_ = env.step(native_call("play", move="C", message="I use </tool_call> tags"))
    assert reward == 3.0  # both cooperate
    assert env.unwrapped.game.messages[-1]["player_0"] == "I use </tool_call> tags"
    _, reward, *_ = env.step(
        '<tool_call>{"name": "play", "arguments": {"move": "D", "message": "<tool_call>{}"}}</tool_call>'
    )
    assert reward == 5.0 and env.unwrapped.game.messages[-1]["player_0"] == "<tool_call>{}"


def test_single_agent_board_games_still_move_with_tool_calls():
    env = gym.make("llmgym/TicTacToe-v0")
    env.reset(seed=0)
    observation, reward, *_ = env.step(native_call("move", cell="b2"))
    assert reward == 0.0 and env.unwrapped.game.board[4] == "X"
    _, reward, *_ = env.step(native_call("move", cell="b2</tool_call>"))
    assert reward == pytest.approx(-0.1) and env.unwrapped.game.illegal_attempts["player_0"] == 1
    env = gym.make("llmgym/Negotiation-v0")
    env.reset(seed=0)
    env.step(native_call("propose", books=1, hats=0, balls=0))
    assert env.unwrapped.game.history[0][1].startswith("player_0 proposes to take 1 book, 0 hats, 0 balls")
