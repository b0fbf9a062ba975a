"""Session 6 regressions of the multi-agent games: observations inside their space, private reasoning,
native tool calls in the single-agent versions, negated prisoner's dilemma moves, the haggler's reservation value."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.utils.conversions import parallel_to_aec

import llmgym  # noqa: F401  registers the envs
from llmgym.envs.multiagent import MULTIAGENT_ENVS, MULTIAGENT_KINDS, make_multiagent, negotiation
from llmgym.envs.multiagent import base
from llmgym.envs.multiagent.negotiation import ITEMS, HagglerPlayer

SINGLE_IDS = ["llmgym/TicTacToe-v0", "llmgym/ConnectFour-v0", "llmgym/Negotiation-v0", "llmgym/PrisonersDilemma-v0"]
FLOOD = "<tool_call>x</tool_call>" * 341  # each malformed block is listed back in the error: 22k characters


def _native(name, **arguments):
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


# -- 1. every observation inside its space ----------------------------------------------


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


@pytest.mark.parametrize("env_id", [i for i in MULTIAGENT_ENVS if MULTIAGENT_KINDS[i] == "aec"])
def test_aec_games_clip_with_a_note_of_what_was_cut(env_id):
    game = make_multiagent(env_id, max_observation_chars=2000)
    game.reset(seed=0)
    game.step(FLOOD)
    observation = game.observe(game.agent_selection)
    assert game.observation_space(game.agent_selection).contains(observation)
    assert observation["text"].startswith("[observation truncated: ") and "Your move" in observation["text"][-300:]


@pytest.mark.parametrize("env_id", SINGLE_IDS)
def test_single_agent_versions_keep_observations_in_their_space(env_id):
    env = gym.make(env_id)
    observation, _ = env.reset(seed=0)
    assert env.observation_space.contains(observation)
    for _ in range(2):
        observation, *_ = env.step("x" * 30_000 + FLOOD)
        assert env.observation_space.contains(observation)


def test_clip_observation_counts_what_it_cut():
    text = "a" * 10_000 + "Your move."
    clipped = base.clip_observation(text, 100)
    cut = int(clipped.split("truncated: ")[1].split(" characters")[0])
    assert len(clipped) == 100 and clipped.endswith("Your move.") and clipped.endswith(text[cut:])
    assert base.clip_observation(text, 5) == "move." and base.clip_observation(text, 0) == ""


# -- 2. <think> reasoning stays private ---------------------------------------------------


def test_negotiation_relays_no_reasoning_and_reads_no_move_from_it():
    game = make_multiagent("llmgym/ma-Negotiation-v0")
    game.reset(seed=0)
    game.step("<think>My values: book=2. I propose: 0 books, 0 hats, 0 balls? No.</think>\nI propose: 2 books, 1 hat, 0 balls")
    assert game.proposal == ("player_0", (2, 1, 0))
    seen = game.observe("player_1")["text"]
    assert "player_0 says: I propose: 2 books, 1 hat, 0 balls" in seen
    assert "<think>" not in seen and "My values" not in seen
    # a tool call inside the reasoning is not a move either; reasoning_content is never relayed
    game.step({"role": "assistant", "reasoning_content": "they value balls at 9",
               "content": '<think><tool_call>{"name": "accept", "arguments": {}}</tool_call></think>Fair?\nI propose: 1 book'})
    assert game.deal is None and game.proposal == ("player_1", (1, 0, 0))
    seen = game.observe("player_0")["text"]
    assert "player_1 says: Fair?" in seen and "balls at 9" not in seen and "think" not in seen


def test_negotiation_reasoning_opened_in_the_prompt_or_left_open_is_private_too():
    game = make_multiagent("llmgym/ma-Negotiation-v0")
    game.reset(seed=0)
    game.step("my book is worth 2, so\n</think>\nHow about 3 books for me?")
    assert game.proposal == ("player_0", (3, 0, 0)) and "worth 2" not in game.observe("player_1")["text"]
    game.step("I accept <think>no wait, they will take")
    assert game.deal is not None and "they will take" not in game.observe("player_0")["text"]


def test_prisoners_dilemma_relays_no_reasoning_and_reads_no_move_from_it():
    game = make_multiagent("llmgym/ma-PrisonersDilemma-v0")
    game.reset(seed=0)
    observations, rewards, *_ = game.step({
        "player_0": "Let's both cooperate.\nC\n<think>they will believe me; D is worth 5</think>",
        "player_1": _native("play", move="C", message="<think>a sucker</think>Deal."),
    })
    assert game.history[-1] == {"player_0": "C", "player_1": "C"} and rewards == {"player_0": 3.0, "player_1": 3.0}
    assert "player_0 says: Let's both cooperate." in observations["player_1"]["text"]
    assert "player_1 says: Deal." in observations["player_0"]["text"]
    assert not any("think" in o["text"] or "sucker" in o["text"] or "worth 5" in o["text"] for o in observations.values())


def test_without_thinking_keeps_everything_else():
    message = {"role": "assistant", "content": None, "tool_calls": [], "reasoning_content": "x"}
    assert base.without_thinking(message) == {"role": "assistant", "content": None, "tool_calls": []}
    assert base.without_thinking("a<think>1</think>b<think>2</think>c") == "abc"
    assert base.without_thinking("no reasoning here") == "no reasoning here"


# -- 3. native tool calls pass through the single-agent versions as they are -------------


def test_single_agent_prisoners_dilemma_delivers_a_message_that_mentions_tool_call_tags():
    env = gym.make("llmgym/PrisonersDilemma-v0")
    env.reset(seed=0)
    _, reward, *_ = env.step(_native("play", move="C", message="I use </tool_call> tags"))
    assert reward == 3.0  # both cooperate
    assert env.unwrapped.game.messages[-1]["player_0"] == "I use </tool_call> tags"
    _, reward, *_ = env.step('<tool_call>{"name": "play", "arguments": {"move": "D", "message": "<tool_call>{}"}}</tool_call>')
    assert reward == 5.0 and env.unwrapped.game.messages[-1]["player_0"] == "<tool_call>{}"


def test_single_agent_board_games_still_move_with_tool_calls():
    env = gym.make("llmgym/TicTacToe-v0")
    env.reset(seed=0)
    observation, reward, *_ = env.step(_native("move", cell="b2"))
    assert reward == 0.0 and env.unwrapped.game.board[4] == "X"
    _, reward, *_ = env.step(_native("move", cell="b2</tool_call>"))
    assert reward == pytest.approx(-0.1) and env.unwrapped.game.illegal_attempts["player_0"] == 1
    env = gym.make("llmgym/Negotiation-v0")
    env.reset(seed=0)
    env.step(_native("propose", books=1, hats=0, balls=0))
    assert env.unwrapped.game.history[0][1].startswith("player_0 proposes to take 1 book, 0 hats, 0 balls")


# -- 4. a negated move is not that move ----------------------------------------------------


@pytest.mark.parametrize("text, move", [
    ("I won't defect, I cooperate", "C"),
    ("I will not cooperate: D", "D"),
    ("D, not C", "D"),
    ("Not C but D", "D"),
    ("No, I defect", "D"),
    ("I'd like to cooperate", "C"),  # "I'd" is one word, not a "d"
    ("Trust me.\nI cooperate", "C"),
])
def test_prisoners_dilemma_reads_negated_moves(text, move):
    game = make_multiagent("llmgym/ma-PrisonersDilemma-v0")
    game.reset(seed=0)
    game.step({"player_0": text, "player_1": "C"})
    assert game.history == [{"player_0": move, "player_1": "C"}]


@pytest.mark.parametrize("text", [
    "I will not defect", "I won't cooperate", "I won\u2019t defect", "I never defect", "I don't think I'll defect",
    "Never D", "I dont cooperate",
])
def test_prisoners_dilemma_only_negated_moves_are_illegal_and_say_what_to_write(text):
    game = make_multiagent("llmgym/ma-PrisonersDilemma-v0")
    game.reset(seed=0)
    observations, rewards, _, _, infos = game.step({"player_0": text, "player_1": "C"})
    assert game.history == [] and rewards["player_0"] == -1.0 and infos["player_0"]["needs_action"]
    assert "negated" in observations["player_0"]["text"] and "a line that says just C or D" in observations["player_0"]["text"]


# -- 5. the haggler's reservation value -----------------------------------------------------


def _greedy_ultimatum(game):
    """Demand everything three times, then leave the haggler one unit of the item it asked for most."""
    if game.turn < game.max_turns - 2:
        return "I propose: " + ", ".join(f"{n} {item}" for n, item in zip(game.counts, ITEMS))
    asked = np.zeros(len(ITEMS))
    for who, event in game.history:
        if who == "player_1" and "proposes" in event:
            asked += negotiation._takes_in(event)
    takes = list(game.counts)
    takes[int(np.argmax(asked / np.array(game.counts)))] -= 1
    return "I propose: " + ", ".join(f"{n} {item}" for n, item in zip(takes, ITEMS))


def _mean_return(actor, seeds):
    returns, deals = [], []
    for seed in seeds:
        env = gym.make("llmgym/Negotiation-v0")
        env.reset(seed=seed)
        game, total, done = env.unwrapped.game, 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(actor(game))
            total += reward
            done = terminated or truncated
        returns.append(total)
        deals.append(game.deal is not None)
    return float(np.mean(returns)), float(np.mean(deals))


def test_a_last_turn_ultimatum_scores_below_fair_haggling():
    seeds = range(60)
    fair, fair_deals = _mean_return(lambda game: HagglerPlayer().act(game, "player_0"), seeds)
    greedy, greedy_deals = _mean_return(_greedy_ultimatum, seeds)
    assert fair_deals >= 0.9 and fair > 0.6
    assert greedy < fair - 0.3 and greedy_deals < 0.5  # was 0.81 with a deal every time, above fair play's 0.70


def test_haggler_never_accepts_less_than_its_floor_on_the_last_turn():
    game = negotiation.env()
    game.reset(seed=0)
    haggler = HagglerPlayer()
    game.turn = game.max_turns - 1
    shares = list(np.ndindex(*(c + 1 for c in game.counts)))  # what player_0 would leave the haggler
    crumb = next(s for s in shares if 0 < game.value("player_1", s) < haggler.floor)
    fair = next(s for s in shares if game.value("player_1", s) == haggler.floor)
    for share, accepts in [(crumb, False), (fair, True)]:
        game.proposal = ("player_0", tuple(c - n for c, n in zip(game.counts, share)))
        assert ('"accept"' in haggler.act(game, "player_1")) == accepts, share
