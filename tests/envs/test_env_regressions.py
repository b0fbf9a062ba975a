"""Regressions found in review of the environments: each test failed before its fix."""

from __future__ import annotations

import pytest

from llmgym.envs.math_tools import CalculatorError, evaluate
from llmgym.envs.math_tools.calculator import format_number


@pytest.mark.parametrize("expression", [
    "exp(exp(exp(10)))",  # the decimal of the result never finished
    "sin(exp(9**99))",  # needs 10**94 digits of precision: hung
    "floor(exp(9**99))",  # hung
    "round(1.5, 10**8)",  # built 10**100000000 before rounding
    "1/exp(-9**99)",
    "exp(exp(1000))//3",  # OverflowError, not CalculatorError
    "ceil(pi**1000)",  # PrecisionExhausted, not CalculatorError
    "0**sqrt(-1)",  # TypeError: comparing a complex exponent with 0
])
def test_calculator_refuses_huge_symbolic_values_quickly(expression):
    with pytest.raises(CalculatorError):
        format_number(evaluate(expression))


def test_calculator_still_computes_ordinary_transcendentals():
    assert format_number(evaluate("exp(10)")) == "exp(10) = 22026.4657948067"
    assert evaluate("round(2.5, 1)") == evaluate("5/2")
    assert evaluate("sqrt(2) * sqrt(8)") == 4


def test_email_qa_short_hedge_listing_every_candidate_is_not_paid():
    """Reward hack: answer with every fact of the question's kind (no "or", under 12 words): was always right."""
    from llmgym.envs.email_qa import EmailQAEnv

    env = EmailQAEnv(unanswerable_rate=0.0)
    hedged = 0
    for seed in range(30):
        env.reset(seed=seed)
        question = env.question
        candidates = [fact["answer"] for kind, fact in env.inbox.facts if kind == question.kind]
        if len(candidates) < 2:
            continue
        hedged += 1
        env.step('<tool_call>{"name": "answer", "arguments": {"text": "%s", "sources": []}}</tool_call>' % " ".join(candidates))
        assert env.outcome() == -1.0
        env.reset(seed=seed)  # the honest answer still pays
        env.step('<tool_call>{"name": "answer", "arguments": {"text": "It is %s.", "sources": []}}</tool_call>' % question.answer)
        assert env.outcome() == 1.0
    assert hedged >= 5
    env.close()
