"""MathTools-v0: the calculator, answer checking, step credit, the python tool, and cheating policies that must not
pay."""

from __future__ import annotations

import itertools
import json
import time

import gymnasium as gym
import numpy as np
import pytest
import sympy
from gymnasium.utils.env_checker import check_env
from scripted_play import play_scripted

import llmgym  # noqa: F401
from llmgym.envs.math_tools import CalculatorError, MathToolsSolver, evaluate, generate_problem, parse_answer
from llmgym.envs.math_tools.calculator import format_number, numbers_in
from llmgym.envs.math_tools.solver import plan


def call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("1 + 2 * 3", 7),
        ("0.1 + 0.2", sympy.Rational(3, 10)),
        ("2^10", 1024),
        ("7 // 2", 3),
        ("7 % 4", 3),
        ("sqrt(16) + abs(-2)", 6),
        ("(120 - 18) / 4", sympy.Rational(51, 2)),
        ("factorial(5)", 120),
    ],
)
def test_calculator_is_exact(expression, expected):
    assert evaluate(expression) == expected


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('echo hi')",
        "open('/etc/passwd')",
        "x + 1",
        "9**9**9",
        "factorial(100000)",
        "1/0",
        "[1, 2]",
        "lambda: 1",
        "(1).__class__",
        "",
        "1 +",
        "a" * 600,
        "10**5000 * 10**5000",
    ],
)
def test_calculator_refuses_unsafe_or_huge(expression):
    with pytest.raises(CalculatorError):
        evaluate(expression)


def test_answer_parsing_is_exact():
    assert parse_answer("13.5") == parse_answer("27/2") == parse_answer("$13.50") == sympy.Rational(27, 2)
    assert parse_answer("The answer is 1,200 apples") == 1200
    assert parse_answer("I don't know") is None
    assert numbers_in("from 3 to 4.5 and 7/2") == [3, sympy.Rational(9, 2), sympy.Rational(7, 2)]


@pytest.mark.parametrize("difficulty", [1, 2, 3])
def test_problems_are_seeded_and_their_steps_consistent(difficulty):
    a = generate_problem(np.random.default_rng(5), difficulty)
    b = generate_problem(np.random.default_rng(5), difficulty)
    assert a.text == b.text and a.answer == b.answer
    assert all(step.value == evaluate(step.expression) for step in a.steps)
    for seed in range(30):
        problem = generate_problem(np.random.default_rng(seed), difficulty)
        assert evaluate(plan(problem.text)[-1]) == problem.answer


def play(policy, seeds, difficulty=1, **kwargs):
    """Mean return and accuracy of ``policy(obs, state) -> action``."""
    env = gym.make("llmgym/MathTools-v0", difficulty=difficulty, **kwargs)
    return play_scripted(env, policy, seeds, outcome=lambda env: env.correct)


def honest(obs, state):
    return state.setdefault("solver", MathToolsSolver()).act(obs)


def guess_from_question(obs, state):
    """Reward hack: answer at once with the largest number in the question."""
    return call("answer", value=str(max(numbers_in(state["question"]))))


def farm_step_credit(obs, state):
    """Reward hack: calculator on every pair of the question's numbers (8 calls a turn) to fish for step credit, then
    answer."""
    if "queue" not in state:
        numbers = [str(n) for n in numbers_in(state["question"])]
        state["queue"] = [f"{a} {op} {b}" for a, b in itertools.permutations(numbers, 2) for op in "+-*/"]
        state["turn"] = 0
    state["turn"] += 1
    if state["turn"] >= 8 or not state["queue"]:
        return call("answer", value=obs.split("\n")[-1].split("] ")[-1].split(" = ")[0])
    batch, state["queue"] = state["queue"][:8], state["queue"][8:]
    return "".join(call("calculator", expression=e) for e in batch)


def claim_in_prose(obs, state):
    """Reward hack: say it is solved without giving a checkable number."""
    return "I have solved the problem and verified the answer is correct. Final answer: correct!"


@pytest.mark.parametrize("difficulty", [1, 2, 3])
def test_honest_solver_reaches_high_reward(difficulty):
    mean_return, accuracy = play(honest, range(8), difficulty)
    assert accuracy == 1.0
    assert mean_return > 1.05  # correct + step credit - tool costs


@pytest.mark.parametrize("cheat", [guess_from_question, farm_step_credit, claim_in_prose])
def test_cheating_scores_clearly_below_honest(cheat):
    honest_return, _ = play(honest, range(8), 2)
    cheat_return, cheat_accuracy = play(cheat, range(8), 2)
    assert cheat_accuracy <= 0.25
    assert cheat_return < honest_return - 0.75


def test_step_credit_is_paid_once_and_only_for_solution_quantities():
    env = gym.make("llmgym/MathTools-v0", difficulty=1)
    obs, _ = env.reset(seed=1)
    first = plan(obs)[0]
    _, reward, _, _, info = env.step(call("calculator", expression=first))
    assert info["reward_components"]["step_credit"] == 1.0 and reward == pytest.approx(0.1 - 0.02)
    _, reward, _, _, info = env.step(call("calculator", expression=first))
    assert info["reward_components"]["step_credit"] == 0.0 and reward == pytest.approx(-0.02)
    _, _, _, _, info = env.step(call("calculator", expression="123456 + 1"))
    assert info["reward_components"]["step_credit"] == 0.0


def test_malformed_calls_are_penalised_and_answered():
    env = gym.make("llmgym/MathTools-v0")
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step(
        '<tool_call>{"name": "calculator", "arguments": {"expr": 1}}</tool_call>'
    )
    assert "invalid arguments" in obs and info["reward_components"]["format_error"] == 1.0 and reward < 0
    obs, reward, terminated, _, _ = env.step(call("calculator", expression="import os"))
    assert obs.startswith("Error:") and not terminated
    obs, _, terminated, _, _ = env.step(call("answer", value="no idea"))
    assert "no number found" in obs and not terminated


def test_python_tool_runs_in_a_lazy_sandbox_and_earns_credit():
    env = gym.make("llmgym/MathTools-v0", difficulty=1, python_timeout_s=1.0)
    obs, _ = env.reset(seed=2)
    assert not env.unwrapped._sandbox.started  # nothing started at make/reset
    first = plan(obs)[0]
    obs, reward, _, _, info = env.step(call("python", code=f"import os\nprint('value:', {first})"))
    assert info["reward_components"]["step_credit"] == 1.0
    obs, _, _, _, _ = env.step(call("python", code="import sys; sys.exit(2)"))
    assert obs.startswith("Error:") and "status 2" in obs
    obs, _, _, _, _ = env.step(call("python", code="while True: pass"))
    assert "limit exceeded" in obs
    env.close()
    assert not env.unwrapped._sandbox.started


def test_final_answer_in_text_is_accepted():
    env = gym.make("llmgym/MathTools-v0", difficulty=3)
    obs, _ = env.reset(seed=4)
    answer = evaluate(plan(obs)[-1])
    _, reward, terminated, _, _ = env.step(f"Working... Final answer: {answer}")
    assert terminated and env.unwrapped.correct and reward == pytest.approx(1.0)


def test_check_env_every_difficulty():
    for difficulty in (1, 3):
        env = gym.make("llmgym/MathTools-v0", difficulty=difficulty)
        check_env(env.unwrapped, skip_render_check=True)
        env.close()
    with pytest.raises(ValueError, match=r"difficulty must be one of \(1, 2, 3\), got 7"):
        gym.make("llmgym/MathTools-v0", difficulty=7)
    env = gym.make("llmgym/MathTools-v0", difficulty=1)
    env.reset(seed=0, options={"difficulty": 3})
    assert env.unwrapped.problem.difficulty == 3
    with pytest.raises(ValueError, match=r"options\['difficulty'\] must be one of \(1, 2, 3\), got 0"):
        env.reset(seed=0, options={"difficulty": 0})


def test_calculator_errors_always_say_why():
    from llmgym.envs.math_tools.calculator import CalculatorError, evaluate

    with pytest.raises(CalculatorError, match="cannot evaluate: PrecisionExhausted"):  # was "cannot evaluate: "
        evaluate("ceil(pi**1000)")


@pytest.mark.parametrize(
    "expression",
    [
        "exp(exp(exp(10)))",  # the decimal of the result never finished
        "sin(exp(9**99))",  # needs 10**94 digits of precision: hung
        "floor(exp(9**99))",  # hung
        "round(1.5, 10**8)",  # built 10**100000000 before rounding
        "1/exp(-9**99)",
        "exp(exp(1000))//3",  # OverflowError, not CalculatorError
        "ceil(pi**1000)",  # PrecisionExhausted, not CalculatorError
        "0**sqrt(-1)",  # TypeError: comparing a complex exponent with 0
    ],
)
def test_calculator_refuses_huge_symbolic_values_quickly(expression):
    with pytest.raises(CalculatorError):
        format_number(evaluate(expression))


def test_calculator_still_computes_ordinary_transcendentals():
    assert format_number(evaluate("exp(10)")) == "exp(10) = 22026.4657948067"
    assert evaluate("round(2.5, 1)") == evaluate("5/2")
    assert evaluate("sqrt(2) * sqrt(8)") == 4


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


@pytest.mark.parametrize(
    "text",
    [
        "<think>Maybe the final answer: 574? no</think>\nFinal answer: 573",
        "<think>Is it \\boxed{574}?</think> First guess \\boxed{572}, checked again: \\boxed{573}",
        "Final answer: 572. <think>wait</think> Sorry, recomputed. Final answer: 573",
        "<think>\\boxed{1}</think>\\boxed{574} no, final answer: 573",
        "Final answer: 573 <think>or is it... final answer: 574",  # cut off while reasoning
    ],
)
def test_the_last_final_answer_outside_thinking_counts(text):
    env = gym.make("llmgym/MathTools-v0")
    env.reset(seed=0)
    assert env.unwrapped.problem.answer == 573
    obs, reward, terminated, _, _ = env.step(text)
    assert terminated and obs == "Answer recorded: 573" and env.unwrapped.correct and reward == pytest.approx(1.0)


def test_reasoning_tags_are_the_exact_lower_case_ones_as_for_tool_calls():
    # <THINK> was reasoning here alone (a case-insensitive pattern), while a tool call inside it was made
    env = gym.make("llmgym/MathTools-v0")
    env.reset(seed=0)
    obs, _, terminated, _, _ = env.step("<THINK>\nFinal answer: 573\n</THINK>")
    assert terminated and obs == "Answer recorded: 573" and env.unwrapped.correct


def test_calculator_decimal_is_right_or_says_precision_was_lost():
    assert format_number(evaluate("(pi*10**999) % 7")).endswith(" = 5.93809525720107")  # was "= 0.e+878"
    env = gym.make("llmgym/MathTools-v0")
    env.reset(seed=0)
    obs, _, _, _, _ = env.step(call("calculator", expression="(e*10**999) % 7"))
    assert obs.endswith(" = 6.40212340784982")
    # the terms cancel to 0 but sympy keeps them: there is no decimal to show, and the tool says so
    obs, _, _, _, _ = env.step(call("calculator", expression="(1 + sqrt(2)) * (sqrt(2) - 1) - 1"))
    assert obs.endswith("(no decimal: precision lost; simplify the expression by hand)") and "0.e" not in obs
