"""MathTools-v0 regressions: quick answer checks, the last final answer outside <think>, honest decimals."""

from __future__ import annotations

import json
import time

import gymnasium as gym
import pytest
import sympy

import llmgym  # noqa: F401
from llmgym.envs.math_tools import evaluate
from llmgym.envs.math_tools.calculator import format_number


def call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def fraction_problem():
    """A difficulty-3 env reset to a problem whose answer is a fraction that is not a whole number."""
    env = gym.make("llmgym/MathTools-v0", difficulty=3)
    for seed in range(200):
        env.reset(seed=seed)
        if not env.unwrapped.problem.answer.is_Integer:
            return env, seed
    raise AssertionError("no fractional answer in 200 seeds")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("expression", ["(log(2)+sqrt(3)+sin(1))**40", "(sin(2)+cos(3))**100"])
def test_answer_and_calculator_with_a_large_power_return_quickly(expression):
    """Both went through sympy.simplify: the first hung for minutes, the second took ~27 s a comparison."""
    env = gym.make("llmgym/MathTools-v0")
    env.reset(seed=0)
    start = time.monotonic()
    _, reward, _, _, info = env.step(call("calculator", expression=expression))
    assert info["reward_components"]["step_credit"] == 0.0 and reward == pytest.approx(-0.02)
    obs, reward, terminated, _, _ = env.step(call("answer", value=expression))
    assert time.monotonic() - start < 5.0
    assert terminated and obs.startswith("Answer recorded") and not env.unwrapped.correct and reward == 0.0


def test_correct_answers_in_other_forms_still_match():
    env, seed = fraction_problem()
    truth = env.unwrapped.problem.answer
    p, q = truth.p, truth.q
    right = [f"{2 * p}/{2 * q}", f"x = {p}/{q}", f"({p}/{q}) * (1 + sqrt(2)) * (sqrt(2) - 1)"]
    if q in (2, 4, 5, 8, 10, 20, 25, 40, 50):  # a terminating decimal
        right += [str(sympy.N(truth, 20)).rstrip("0"), f"${sympy.N(truth, 20)}"]
    wrong = [f"{p + 1}/{q}", f"{p}/{q} + 1/10**30", f"{p}/{q} + exp(-60)", str(sympy.N(truth, 3))]
    for value, expected in [*((v, True) for v in right), *((v, False) for v in wrong)]:
        env.reset(seed=seed)
        _, reward, terminated, _, _ = env.step(call("answer", value=value))
        assert terminated and env.unwrapped.correct is expected, value
        assert reward == pytest.approx(1.0 if expected else 0.0), value


def test_step_credit_for_a_quantity_written_another_way():
    env, _ = fraction_problem()
    truth = env.unwrapped.problem.answer
    _, _, _, _, info = env.step(call("calculator", expression=f"(1 + sqrt(2)) * (sqrt(2) - 1) * {truth.p} / {truth.q}"))
    assert info["reward_components"]["step_credit"] == 1.0


@pytest.mark.parametrize("text", [
    "<think>Maybe the final answer: 574? no</think>\nFinal answer: 573",
    "<think>Is it \\boxed{574}?</think> First guess \\boxed{572}, checked again: \\boxed{573}",
    "Final answer: 572. <think>wait</think> Sorry, recomputed. Final answer: 573",
    "<THINK>\\boxed{1}</THINK>\\boxed{574} no, final answer: 573",
])
def test_the_last_final_answer_outside_thinking_counts(text):
    env = gym.make("llmgym/MathTools-v0")
    env.reset(seed=0)
    assert env.unwrapped.problem.answer == 573
    obs, reward, terminated, _, _ = env.step(text)
    assert terminated and obs == "Answer recorded: 573" and env.unwrapped.correct and reward == pytest.approx(1.0)


def test_calculator_decimal_is_right_or_says_precision_was_lost():
    assert format_number(evaluate("(pi*10**999) % 7")).endswith(" = 5.93809525720107")  # was "= 0.e+878"
    env = gym.make("llmgym/MathTools-v0")
    env.reset(seed=0)
    obs, _, _, _, _ = env.step(call("calculator", expression="(e*10**999) % 7"))
    assert obs.endswith(" = 6.40212340784982")
    # the terms cancel to 0 but sympy keeps them: there is no decimal to show, and the tool says so
    obs, _, _, _, _ = env.step(call("calculator", expression="(1 + sqrt(2)) * (sqrt(2) - 1) - 1"))
    assert obs.endswith("(no decimal: precision lost; simplify the expression by hand)") and "0.e" not in obs
