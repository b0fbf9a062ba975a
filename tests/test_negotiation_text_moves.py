"""Negotiation: plain-text moves are read as a human would (accept vs propose vs one-move-please), tool calls as before."""

from __future__ import annotations

import json

import pytest

from llmgym.envs.multiagent import negotiation

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


@pytest.mark.parametrize("text", [
    "I accept your offer of 1 book",
    "Deal! I'll take 2 hats as you proposed",
    "Deal, I'll take the 2 hats you offered.",
    "Accepted: you get 3 books, 1 hat and 2 balls, I get the rest.",
    "I agree to your proposal: 1 book, 2 hats, 1 ball for me.",
    "Deal.\nLooking forward to working with you.",
    "Thank you, I accept.",
    "It's a deal",
])
def test_an_acceptance_that_names_the_split_on_the_table_accepts(text):
    game = table()
    game.step(text)
    assert game.deal == {"player_0": OPENING, "player_1": REST}, text
    assert game.rewards["player_1"] == pytest.approx(game.value("player_1", REST) / 10)


@pytest.mark.parametrize("text, takes", [
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
])
def test_a_proposal_without_an_acceptance_proposes(text, takes):
    game = table()
    game.step(text)
    assert game.deal is None and game.proposal == ("player_1", takes), text
    assert game.agent_selection == "player_0" and game.rewards["player_1"] == 0.0


@pytest.mark.parametrize("text", [
    "I accept. How about 2 books, 2 hats, 1 ball?",
    "Deal! I'll take 3 hats.",
    "I accept, but I propose: 4 books, 0 hats, 0 balls",
])
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
