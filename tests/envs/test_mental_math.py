"""MentalMath-v0: questions, answer parsing, rewards, bad input, and policies that must not pay."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import llmgym  # noqa: F401
from llmgym.envs.mental_math import MentalMathEnv, last_integer


def test_registered_with_a_question_and_no_tools():
    # check_env runs on every registered id in tests/test_envs_generic.py
    env = gym.make("llmgym/MentalMath-v0")
    obs, info = env.reset(seed=0)
    assert obs.startswith("What is ") and obs.endswith("Reply with just the number.")
    assert info["tools"] == [] and info["messages"][0]["content"] == MentalMathEnv.system_prompt


def test_seed_fixes_the_question_and_operands_stay_in_range():
    env = MentalMathEnv(max_operand=20, operations="+-*")
    questions = []
    for seed in range(200):
        obs, _ = env.reset(seed=seed)
        assert 0 <= env.a <= 20 and 0 <= env.b <= 20 and env.op in "+-*"
        assert obs == env.reset(seed=seed)[0]
        questions.append(obs)
    assert len(set(questions)) > 100 and {q.split()[3] for q in questions} == {"+", "-", "*"}


@pytest.mark.parametrize(
    "text, expected", [("12", 12), ("7 + 5 = 12.", 12), ("It is -3", -3), ("no digits", None), ("", None)]
)
def test_last_integer(text, expected):
    assert last_integer(text) == expected


@pytest.mark.parametrize(
    "reply, reward, correct, concise",
    [
        ("12", 1.2, 1.0, 1.0),
        (" 12. ", 1.2, 1.0, 1.0),
        ("7 + 5 = 12", 1.0, 1.0, 0.0),
        ("13", 0.2, 0.0, 1.0),
        ("12 is 7 + 5", 0.0, 0.0, 0.0),
        ("twelve", 0.0, 0.0, 0.0),
    ],
)
def test_rewards(reply, reward, correct, concise):
    env = MentalMathEnv()
    env.reset(options={"a": 7, "b": 5, "op": "+"})
    obs, got, terminated, truncated, info = env.step(reply)
    assert terminated and not truncated and got == pytest.approx(reward)
    assert info["reward_components"] == {"correct": correct, "concise": concise}


def test_other_operations():
    env = MentalMathEnv()
    env.reset(options={"a": 3, "b": 8, "op": "-"})
    assert env.step("-5")[1] == pytest.approx(1.2)
    env.reset(options={"a": 3, "b": 8, "op": "*"})
    assert env.step("3 * 8 = 24")[1] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_operand": 0},
        {"max_operand": "9"},
        {"max_operand": True},
        {"operations": ""},
        {"operations": "+/"},
        {"operations": 3},
    ],
)
def test_bad_config_is_a_clear_error(kwargs):
    with pytest.raises(ValueError, match="max_operand|operations"):
        MentalMathEnv(**kwargs)


@pytest.mark.parametrize("options", [{"a": 1}, {"a": 1, "b": "2"}, {"a": 1, "b": 2, "op": "/"}, {"a": True, "b": 2}])
def test_bad_options_are_a_clear_error(options):
    with pytest.raises(ValueError, match="options"):
        MentalMathEnv().reset(options=options)


def test_garbage_and_tool_calls_end_the_episode_without_reward():
    env = MentalMathEnv()
    for action in [
        "",
        "🙂" * 100,
        "x" * 100_000,
        '<tool_call>{"name": "answer", "arguments": {"value": "12"}}</tool_call>',
        {"role": "assistant", "content": None, "tool_calls": [{"bad": 1}]},
    ]:
        env.reset(options={"a": 7, "b": 5, "op": "+"})
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and reward == 0.0 and (terminated or truncated)


def test_cheating_policies_score_below_an_honest_one():
    env = MentalMathEnv(operations="+-*")

    def mean_return(policy):
        returns = []
        for seed in range(100):
            env.reset(seed=seed)
            returns.append(env.step(policy(env))[1])
        return float(np.mean(returns))

    honest = mean_return(lambda e: str(e.answer))
    assert honest == pytest.approx(1.2)
    cheats = {
        "lists every number": lambda e: " ".join(str(n) for n in range(-81, 82)),
        "bare constant": lambda e: "9",
        "repeats the question": lambda e: f"{e.a} {e.op} {e.b}",
    }
    for name, policy in cheats.items():
        assert mean_return(policy) < 0.4 * honest, name


def test_a_reply_with_a_huge_number_is_an_answer_not_a_crash():
    # int() refuses strings of more than 4,300 digits: the reply is read as no answer, never raises
    env = gym.make("llmgym/MentalMath-v0")
    env.reset(options={"a": 3, "b": 4, "op": "+"})
    _, reward, terminated, _, info = env.step("9" * 5000)
    assert terminated and info["reward_components"]["correct"] == 0.0
    env.reset(options={"a": 3, "b": 4, "op": "+"})
    assert env.step("0" * 5000 + "7")[4]["reward_components"]["correct"] == 1.0


def test_on_text_reads_the_answer_outside_the_reasoning():
    env = gym.make("llmgym/MentalMath-v0").unwrapped
    observation, _ = env.reset(seed=0)  # "What is 8 + 6?"
    _, reward, terminated, _, info = env.step("<think>maybe 15? no: 8 + 6 = 14</think>14")
    assert terminated and info["reward_components"]["correct"] == 1.0
    env.reset(seed=0)
    _, _, _, _, info = env.step("<think>8 + 6 = 14</think>")  # reasoning alone is no answer
    assert info["reward_components"]["correct"] == 0.0


def test_mental_math_reads_the_typeset_minus_sign():
    from llmgym.envs.mental_math import MentalMathEnv, last_integer

    assert last_integer("5 \u2212 8 = \u22123") == -3 and last_integer("7 \u2212 5") == 5
    env = MentalMathEnv(operations="-")
    env.reset(seed=0, options={"a": 5, "b": 8, "op": "-"})
    _, reward, terminated, _, info = env.step("\u22123")
    assert terminated and info["reward_components"] == {"correct": 1.0, "concise": 1.0}
    env.reset(seed=0, options={"a": 1, "b": 2, "op": "+"})
    assert env.step("\u22123")[1] == pytest.approx(0.2)  # -3 is wrong for 1 + 2 = 3, never read as 3


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
