"""Negotiation (envs/multiagent/negotiation.py): plain-text moves are read as a human would (accept vs propose vs
one-move-please), tool calls as before, ``<think>`` reasoning stays private, and the haggler keeps its reservation
value."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import llmgym  # noqa: F401  registers the envs
from llmgym.envs.multiagent import make_multiagent, negotiation
from llmgym.envs.multiagent.negotiation import ITEMS, HagglerPlayer

# seed 0: the pool is 4 books, 3 hats, 3 balls; player_0 opens by taking 3 books, 1 hat, 2 balls,
# so player_1 would get 1 book, 2 hats, 1 ball
OPENING = (3, 1, 2)
REST = (1, 2, 1)


def call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def table():
    """A game where player_1 is to answer player_0's opening proposal."""
    game = negotiation.env()
    game.reset(seed=0)
    assert game.counts == (4, 3, 3)
    game.step(call("propose", books=3, hats=1, balls=2))
    assert game.proposal == ("player_0", OPENING) and game.agent_selection == "player_1"
    return game


def assert_illegal(game, agent, words):
    assert game.deal is None and game.agent_selection == agent
    assert game.rewards[agent] == pytest.approx(-0.1) and game.illegal_attempts[agent] == 1
    text = game.observe(agent)["text"]
    assert "Illegal move:" in text and words in text, text


@pytest.mark.parametrize(
    "text",
    [
        "I accept your offer of 1 book",
        "Deal! I'll take 2 hats as you proposed",
        "Deal, I'll take the 2 hats you offered.",
        "Accepted: you get 3 books, 1 hat and 2 balls, I get the rest.",
        "I agree to your proposal: 1 book, 2 hats, 1 ball for me.",
        "Deal.\nLooking forward to working with you.",
        "Thank you, I accept.",
        "It's a deal",
    ],
)
def test_an_acceptance_that_names_the_split_on_the_table_accepts(text):
    game = table()
    game.step(text)
    assert game.deal == {"player_0": OPENING, "player_1": REST}, text
    assert game.rewards["player_1"] == pytest.approx(game.value("player_1", REST) / 10)


@pytest.mark.parametrize(
    "text, takes",
    [
        ("I propose: 1 book, 2 hats, 0 balls", (1, 2, 0)),
        ("You offered me 1 book. I propose: 2 books, 2 hats, 1 ball", (2, 2, 1)),
        ("I can't accept that. I propose: 2 books, 2 hats, 1 ball.", (2, 2, 1)),
        ("No deal. I want 2 books, 2 hats and 1 ball.", (2, 2, 1)),
        ("I won't accept that, I propose 2 books", (2, 0, 0)),
        ("How about I take 2 books, 2 hats and 1 ball? Deal?", (2, 2, 1)),
        ("Would you accept this: 2 books, 3 hats, 0 balls for me", (2, 3, 0)),
        ("2 books, 2 hats, 1 ball", (2, 2, 1)),
        ("You offered 1 book.\nProposal: 2 books, 2 hats, 1 ball", (2, 2, 1)),
        ("No deal.\nI propose\n2 books\n2 hats", (2, 2, 0)),
        ("books: 2, hats: 1", (2, 1, 0)),
    ],
)
def test_a_proposal_without_an_acceptance_proposes(text, takes):
    game = table()
    game.step(text)
    assert game.deal is None and game.proposal == ("player_1", takes), text
    assert game.agent_selection == "player_0" and game.rewards["player_1"] == 0.0


@pytest.mark.parametrize(
    "text",
    [
        "I accept. How about 2 books, 2 hats, 1 ball?",
        "Deal! I'll take 3 hats.",
        "I accept, but I propose: 4 books, 0 hats, 0 balls",
    ],
)
def test_an_acceptance_with_a_different_split_asks_for_one_move(text):
    game = table()
    game.step(text)
    assert game.proposal == ("player_0", OPENING)
    assert_illegal(game, "player_1", "one move per turn")
    game.step("I accept")  # the retry is read on its own
    assert game.deal == {"player_0": OPENING, "player_1": REST}


def test_declining_with_counts_but_no_counter_offer_is_not_a_proposal():
    game = table()
    game.step("I can't accept only 1 book.")
    assert game.proposal == ("player_0", OPENING)
    assert_illegal(game, "player_1", "I propose:")


def test_accepting_when_nothing_is_on_the_table_is_illegal_even_with_counts():
    game = negotiation.env()
    game.reset(seed=0)
    game.step("Deal! I get 2 books.")
    assert game.proposal is None
    assert_illegal(game, "player_0", "no proposal from the other player to accept")
    game.step("Please accept: I propose 3 books, 1 hat, 2 balls")  # asking the other to accept is no acceptance
    assert game.proposal == ("player_0", OPENING)


def test_tool_calls_are_read_as_before_whatever_the_prose_says():
    game = table()
    game.step("I propose 2 books instead.\n" + call("accept"))
    assert game.deal == {"player_0": OPENING, "player_1": REST}
    game = table()
    game.step("I accept!\n" + call("propose", books=2, hats=2, balls=1))
    assert game.proposal == ("player_1", (2, 2, 1)) and game.deal is None
    assert "player_1 says: I accept!" in game.observe("player_0")["text"]


@pytest.mark.parametrize(
    "text", ["Fine by me, deal.", "No worries, deal!", "Sounds good - deal", "That works, it's a deal."]
)
def test_negotiation_a_closing_deal_after_a_comma_accepts(text):
    game = table()
    game.step(text)
    assert game.deal == {"player_0": (3, 1, 2), "player_1": (1, 2, 1)}, text


@pytest.mark.parametrize(
    "text, takes", [("2 books for me, deal.", (2, 0, 0)), ("If you give me 3 books, deal.", (3, 0, 0))]
)
def test_negotiation_a_closing_deal_after_counts_or_a_condition_is_an_offer(text, takes):
    game = table()
    game.step(text)
    assert game.deal is None and game.proposal == ("player_1", takes), text


def test_negotiation_relays_no_reasoning_and_reads_no_move_from_it():
    game = make_multiagent("llmgym/ma-Negotiation-v0")
    game.reset(seed=0)
    game.step(
        "<think>My values: book=2. I propose: 0 books, 0 hats, 0 balls? No.</think>\nI propose: 2 books, 1 hat, 0 balls"
    )
    assert game.proposal == ("player_0", (2, 1, 0))
    seen = game.observe("player_1")["text"]
    assert "player_0 says: I propose: 2 books, 1 hat, 0 balls" in seen
    assert "<think>" not in seen and "My values" not in seen
    # a tool call inside the reasoning is not a move either; reasoning_content is never relayed
    game.step(
        {
            "role": "assistant",
            "reasoning_content": "they value balls at 9",
            "content": (
                '<think><tool_call>{"name": "accept", "arguments": {}}</tool_call></think>Fair?\nI propose: 1 book'
            ),
        }
    )
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
