"""The games' shared machinery (envs/multiagent/base.py).

``TextGameEnv`` is a base class, not a game: building it (or a subclass that leaves a rule out) is a TypeError
naming what a game must define; the games built on it still build and pass PettingZoo's ``api_test``. Also: a step
without a running game, penalties, observations clipped to their space, and ``<think>`` reasoning removed.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pettingzoo")

from multiagent_actions import FLOOD  # noqa: E402
from pettingzoo.test import api_test, parallel_api_test  # noqa: E402

from llmgym.envs.multiagent import (  # noqa: E402
    MULTIAGENT_ENVS,
    MULTIAGENT_KINDS,
    base,
    connect_four,
    connect_four_v0,
    make_multiagent,
    negotiation_v0,
    prisoners_dilemma_v0,
    tictactoe,
    tictactoe_v0,
)
from llmgym.envs.multiagent.base import TextGameEnv  # noqa: E402

RULES = ("new_game", "rules", "state_text", "read_call", "read_text", "apply", "next_agent")


def test_the_base_class_says_what_a_game_must_define_when_built():
    """It was built, and PettingZoo's api_test then failed with ``KeyError: None``."""
    with pytest.raises(TypeError, match="abstract") as caught:
        TextGameEnv()
    assert all(name in str(caught.value) for name in RULES)


def test_a_game_that_leaves_a_rule_out_is_refused_naming_it():
    class NoNextAgent(TextGameEnv):
        def new_game(self, options: dict[str, Any] | None) -> str:
            return "player_0"

        def rules(self, agent: str) -> str:
            return "rules"

        def state_text(self, agent: str) -> str:
            return "state"

        def read_call(self, agent: str, name: str, arguments: dict[str, Any]) -> Any:
            return None

        def read_text(self, agent: str, text: str) -> Any:
            return text

        def apply(self, agent: str, move: Any) -> str:
            return f"{agent} played {move}"

    with pytest.raises(TypeError, match="next_agent"):
        NoNextAgent()


@pytest.mark.filterwarnings("ignore:(Observation|Action):UserWarning")  # text spaces, not Box or Discrete
@pytest.mark.parametrize("factory", [tictactoe_v0.env, connect_four_v0.env, negotiation_v0.env])
def test_the_games_still_build_and_pass_the_aec_api_test(factory):
    api_test(factory(), num_cycles=20)


@pytest.mark.filterwarnings("ignore:(Observation|Action):UserWarning")
def test_the_parallel_game_still_passes_the_parallel_api_test():
    parallel_api_test(prisoners_dilemma_v0.parallel_env(), num_cycles=20)


def test_multiagent_penalties_must_be_finite():
    import pytest

    from llmgym.envs.multiagent.base import checked_penalty

    for value in (float("nan"), float("inf"), -0.5):
        with pytest.raises(ValueError, match="finite number >= 0"):
            checked_penalty("illegal_penalty", value)
    assert checked_penalty("illegal_penalty", 2) == 2.0


@pytest.mark.parametrize("factory", [tictactoe.env, connect_four.env])
def test_aec_step_without_a_running_game_says_to_reset(factory):
    game = factory()
    with pytest.raises(RuntimeError, match="reset"):  # was AttributeError: no agent_selection
        game.step("a1")
    game.reset(seed=0)
    for move in ["a1", "a2", "b1", "b2", "c1"] if factory is tictactoe.env else ["1", "2", "1", "2", "1", "2", "1"]:
        game.step(move)
    while game.agents:
        game.step(None)
    with pytest.raises(RuntimeError, match="reset"):  # was KeyError: 'player_0'
        game.step(None)
    game.reset(seed=0)
    game.step("b2" if factory is tictactoe.env else "4")
    assert not game.game_over


@pytest.mark.parametrize("env_id", [i for i in MULTIAGENT_ENVS if MULTIAGENT_KINDS[i] == "aec"])
def test_aec_games_clip_with_a_note_of_what_was_cut(env_id):
    game = make_multiagent(env_id, max_observation_chars=2000)
    game.reset(seed=0)
    game.step(FLOOD)
    observation = game.observe(game.agent_selection)
    assert game.observation_space(game.agent_selection).contains(observation)
    assert observation["text"].startswith("[observation truncated: ") and "Your move" in observation["text"][-300:]


def test_clip_observation_counts_what_it_cut():
    text = "a" * 10_000 + "Your move."
    clipped = base.clip_observation(text, 100)
    cut = int(clipped.split("truncated: ")[1].split(" characters")[0])
    assert len(clipped) == 100 and clipped.endswith("Your move.") and clipped.endswith(text[cut:])
    assert base.clip_observation(text, 5) == "move." and base.clip_observation(text, 0) == ""


def test_without_thinking_keeps_everything_else():
    message = {"role": "assistant", "content": None, "tool_calls": [], "reasoning_content": "x"}
    assert base.without_thinking(message) == {"role": "assistant", "content": None, "tool_calls": []}
    assert base.without_thinking("a<think>1</think>b<think>2</think>c") == "abc"
    assert base.without_thinking("no reasoning here") == "no reasoning here"
