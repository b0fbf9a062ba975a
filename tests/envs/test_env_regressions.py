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
