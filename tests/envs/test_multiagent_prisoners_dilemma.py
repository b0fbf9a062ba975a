"""The prisoner's dilemma (envs/multiagent/prisoners_dilemma.py): argument checks, observations inside their space,
private reasoning, negated moves, and its AEC entry."""

from __future__ import annotations

import math

import pytest
from multiagent_actions import FLOOD, native_call
from pettingzoo.utils.conversions import parallel_to_aec

import llmgym  # noqa: F401  registers the envs
from llmgym.envs.multiagent import make_multiagent, prisoners_dilemma


@pytest.mark.parametrize(
    "kwargs",
    [
        {"illegal_penalty": math.nan},
        {"illegal_penalty": math.inf},
        {"forfeit_penalty": math.nan},
        {"forfeit_penalty": -1},
        {"max_retries": -1},
    ],
)
def test_prisoners_dilemma_rejects_non_finite_penalties_and_negative_retries(kwargs):
    """Regression: NaN passed the old ``< 0`` check and turned every later reward into NaN."""
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        prisoners_dilemma.parallel_env(**kwargs)


def test_prisoners_dilemma_clips_a_flood_of_errors_to_its_space_with_a_note():
    game = make_multiagent("llmgym/ma-PrisonersDilemma-v0")
    game.reset(seed=0)
    observations, *_ = game.step({"player_0": FLOOD, "player_1": "C"})
    text = observations["player_0"]["text"]
    assert game.observation_space("player_0").contains(observations["player_0"]) and len(text) == 16_384
    assert text.startswith("[observation truncated: ") and "characters cut]" in text
    assert text.endswith("Act again; 2 more illegal actions and you forfeit the game.")  # what to do survives


@pytest.mark.parametrize("limit", [40, 200, 1000])
def test_prisoners_dilemma_every_observation_fits_a_small_space(limit):
    game = make_multiagent("llmgym/ma-PrisonersDilemma-v0", num_rounds=3, max_observation_chars=limit)
    observations, _ = game.reset(seed=0)
    seen = list(observations.items())
    while game.agents:
        observations, *_ = game.step({"player_0": "Long message. " * 40 + "\nC", "player_1": "x" * 300 + "\nD"})
        seen += observations.items()
    assert all(game.observation_space(agent).contains(obs) for agent, obs in seen)
    aec = parallel_to_aec(make_multiagent("llmgym/ma-PrisonersDilemma-v0", max_observation_chars=limit))
    aec.reset(seed=0)
    aec.step(FLOOD)
    aec.step("C")
    assert all(aec.observation_space(a).contains(aec.observe(a)) for a in aec.possible_agents)


def test_prisoners_dilemma_relays_no_reasoning_and_reads_no_move_from_it():
    game = make_multiagent("llmgym/ma-PrisonersDilemma-v0")
    game.reset(seed=0)
    observations, rewards, *_ = game.step(
        {
            "player_0": "Let's both cooperate.\nC\n<think>they will believe me; D is worth 5</think>",
            "player_1": native_call("play", move="C", message="<think>a sucker</think>Deal."),
        }
    )
    assert game.history[-1] == {"player_0": "C", "player_1": "C"} and rewards == {"player_0": 3.0, "player_1": 3.0}
    assert "player_0 says: Let's both cooperate." in observations["player_1"]["text"]
    assert "player_1 says: Deal." in observations["player_0"]["text"]
    assert not any(
        "think" in o["text"] or "sucker" in o["text"] or "worth 5" in o["text"] for o in observations.values()
    )


@pytest.mark.parametrize(
    "text, move",
    [
        ("I won't defect, I cooperate", "C"),
        ("I will not cooperate: D", "D"),
        ("D, not C", "D"),
        ("Not C but D", "D"),
        ("No, I defect", "D"),
        ("I'd like to cooperate", "C"),  # "I'd" is one word, not a "d"
        ("Trust me.\nI cooperate", "C"),
    ],
)
def test_prisoners_dilemma_reads_negated_moves(text, move):
    game = make_multiagent("llmgym/ma-PrisonersDilemma-v0")
    game.reset(seed=0)
    game.step({"player_0": text, "player_1": "C"})
    assert game.history == [{"player_0": move, "player_1": "C"}]


@pytest.mark.parametrize(
    "text",
    [
        "I will not defect",
        "I won't cooperate",
        "I won\u2019t defect",
        "I never defect",
        "I don't think I'll defect",
        "Never D",
        "I dont cooperate",
    ],
)
def test_prisoners_dilemma_only_negated_moves_are_illegal_and_say_what_to_write(text):
    game = make_multiagent("llmgym/ma-PrisonersDilemma-v0")
    game.reset(seed=0)
    observations, rewards, _, _, infos = game.step({"player_0": text, "player_1": "C"})
    assert game.history == [] and rewards["player_0"] == -1.0 and infos["player_0"]["needs_action"]
    assert (
        "negated" in observations["player_0"]["text"]
        and "a line that says just C or D" in observations["player_0"]["text"]
    )


def test_prisoners_dilemma_refuses_actions_for_unknown_agents_and_has_an_aec_entry():
    from pettingzoo.test import api_test

    from llmgym.envs.multiagent import prisoners_dilemma_v0

    game = prisoners_dilemma_v0.parallel_env()
    game.reset(seed=0)
    with pytest.raises(ValueError, match="player_2"):  # was ignored silently while player_1 had not acted
        game.step({"player_0": "C", "player_2": "D"})
    api_test(prisoners_dilemma_v0.env(), num_cycles=10)  # PettingZoo's usual env()/parallel_env() pair
