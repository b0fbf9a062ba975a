"""Session-4 review regressions for the bundled envs (Wordle budgets, Negotiation prose, ...)."""

from __future__ import annotations

import json

import pytest

from llmgym.envs.wordle.env import WordleEnv


def _guess(word: str) -> str:
    return "<tool_call>" + json.dumps({"name": "guess", "arguments": {"word": word}}) + "</tool_call>"


def test_wordle_last_reply_never_reveals_the_word_before_a_later_guess_in_it_solves():
    env = WordleEnv(max_turns=1)
    env.reset(seed=0, options={"answer": "audio"})
    obs, _, terminated, truncated, _ = env.step(_guess("crane") + _guess("slate") + _guess("audio"))
    assert terminated and not truncated
    assert "Out of turns" not in obs and "The word was" not in obs, obs
    assert obs.splitlines()[-1] == "Solved in 3 guesses!"


def test_wordle_out_of_turns_is_said_once_after_the_last_replys_guesses():
    env = WordleEnv(max_turns=1)
    env.reset(seed=0, options={"answer": "audio"})
    obs, _, terminated, truncated, _ = env.step(_guess("crane") + _guess("slate"))
    assert truncated and not terminated
    assert obs.count("The word was AUDIO") == 1 and obs.splitlines()[-1] == "Out of turns. The word was AUDIO."


def test_wordle_one_guess_budget_is_singular():
    env = WordleEnv(max_guesses=1)
    obs, _ = env.reset(seed=0)
    assert obs == "Guess the five-letter word. You have 1 guess."
    assert "at most 1 guess." in env.system_prompt


def test_code_tests_a_value_nested_too_deep_to_read_fails_that_test_only():
    from llmgym.envs.code_tests.harness import grade
    from llmgym.sandbox import SubprocessSandbox

    code = (
        "import sys\nsys.setrecursionlimit(100000)\n"
        "def f(x):\n    if x == 0:\n        return 7\n    v = []\n    for _ in range(5000):\n        v = [v]\n    return v\n"
    )
    with SubprocessSandbox() as box:
        report = grade(box, code, "f", [([1], [1]), ([0], 7)], per_test_s=5)
    assert report.outcomes[0].got == "unreadable output" and not report.outcomes[0].passed
    assert report.outcomes[1].passed


def _negotiation_table():
    from llmgym.envs.multiagent import negotiation

    game = negotiation.env()
    game.reset(seed=0)
    game.step('<tool_call>{"name": "propose", "arguments": {"books": 3, "hats": 1, "balls": 2}}</tool_call>')
    return game


@pytest.mark.parametrize("text", ["Fine by me, deal.", "No worries, deal!", "Sounds good - deal", "That works, it's a deal."])
def test_negotiation_a_closing_deal_after_a_comma_accepts(text):
    game = _negotiation_table()
    game.step(text)
    assert game.deal == {"player_0": (3, 1, 2), "player_1": (1, 2, 1)}, text


@pytest.mark.parametrize("text, takes", [("2 books for me, deal.", (2, 0, 0)), ("If you give me 3 books, deal.", (3, 0, 0))])
def test_negotiation_a_closing_deal_after_counts_or_a_condition_is_an_offer(text, takes):
    game = _negotiation_table()
    game.step(text)
    assert game.deal is None and game.proposal == ("player_1", takes), text


def test_mental_math_reads_the_typeset_minus_sign():
    from llmgym.envs.mental_math import MentalMathEnv, last_integer

    assert last_integer("5 \u2212 8 = \u22123") == -3 and last_integer("7 \u2212 5") == 5
    env = MentalMathEnv(operations="-")
    env.reset(seed=0, options={"a": 5, "b": 8, "op": "-"})
    _, reward, terminated, _, info = env.step("\u22123")
    assert terminated and info["reward_components"] == {"correct": 1.0, "concise": 1.0}
    env.reset(seed=0, options={"a": 1, "b": 2, "op": "+"})
    assert env.step("\u22123")[1] == pytest.approx(0.2)  # -3 is wrong for 1 + 2 = 3, never read as 3
