"""Regressions found by walking through the bundled envs as an agent would read them."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import llmgym  # noqa: F401


def _guess(word: str) -> str:
    return "<tool_call>" + json.dumps({"name": "guess", "arguments": {"word": word}}) + "</tool_call>"


def test_wordle_prompt_and_observations_state_the_real_budgets():
    env = gym.make("llmgym/Wordle-v0", max_guesses=4, max_turns=2)
    obs, info = env.reset(seed=0, options={"answer": "squid"})
    assert "at most 4 guesses" in info["messages"][0]["content"] and "6" not in info["messages"][0]["content"]
    assert "4 guesses but only 2 replies" in obs
    obs = env.step("crane")[0]
    assert obs.splitlines()[-1] == "3 guesses left in 1 reply."
    obs, _, terminated, truncated, _ = env.step("slate")
    assert truncated and not terminated and obs.splitlines()[-1] == "Out of turns. The word was SQUID."
    env.close()


def test_wordle_one_reply_may_still_use_several_guesses():
    env = gym.make("llmgym/Wordle-v0", max_turns=1)
    obs, _ = env.reset(seed=0, options={"answer": "squid"})
    assert "6 guesses but only 1 reply" in obs
    obs, _, terminated, *_ = env.step(_guess("crane") + _guess("squid"))
    assert terminated and "Solved in 2 guesses!" in obs
    env.close()


def test_wordle_defaults_unchanged_and_singular_counts():
    env = gym.make("llmgym/Wordle-v0")
    obs, info = env.reset(seed=0, options={"answer": "squid"})
    assert obs == "Guess the five-letter word. You have 6 guesses."
    assert "at most 6 guesses" in info["messages"][0]["content"]
    lasts = [env.step(word)[0].splitlines()[-1] for word in ("crane", "slate", "moist", "pilot", "bumpy")]
    assert lasts == ["5 guesses left.", "4 guesses left.", "3 guesses left.", "2 guesses left.", "1 guess left."]
    env.reset(seed=0, options={"answer": "squid"})
    assert env.step("squid")[0].endswith("Solved in 1 guess!")
    env.close()



@pytest.mark.parametrize(
    "reply, correct",
    [("The answer is 9.0", 1.0), ("9.00", 1.0), ("It is 9.", 1.0), ("9.5", 0.0), ("4.5 + 4.5 = 9", 1.0), ("0.9", 0.0)],
)
def test_mental_math_reads_a_decimal_as_a_person_would(reply, correct):
    env = gym.make("llmgym/MentalMath-v0")
    env.reset(options={"a": 4, "b": 5, "op": "+"})
    assert env.step(reply)[4]["reward_components"]["correct"] == correct
    env.close()


def test_mental_math_reads_thousands_separators():
    env = gym.make("llmgym/MentalMath-v0", max_operand=99, operations="*")
    env.reset(options={"a": 85, "b": 63, "op": "*"})
    obs, reward, *_ = env.step("85 * 63 = 5,355")
    assert obs == "Answer recorded: 5355" and reward == pytest.approx(1.0)
    env.close()


def test_code_tests_feedback_writes_values_in_python_as_the_prompt_does():
    env = gym.make("llmgym/CodeTests-v0")
    obs, _ = env.reset(seed=3)  # is_balanced: the examples read "== False"
    assert "== False" in obs
    # seed 3's examples: '(([])[]) b[]' (True), 'b}{}][]' (False), '[[]}' (False)
    code = "def is_balanced(text):\n    return None if text.startswith('b') else not text.startswith('(')\n"
    obs = env.step("<tool_call>" + json.dumps({"name": "run_examples", "arguments": {"code": code}}) + "</tool_call>")[0]
    env.close()
    assert "expected False, got None" in obs and "expected False, got True" in obs
    assert "false" not in obs and "null" not in obs
