"""Procedurally generated multi-step word problems with exact answers and their intermediate quantities.

Holds :class:`Problem` and :func:`generate_problem`. Each template draws its
numbers from a NumPy generator (so a seed fixes the problem), writes the
question in words, and records the reference solution as a list of
:class:`Step` (a calculator expression and its exact value, the last one
being the answer). The steps are what the environment credits: a tool call
whose result equals one of them computed a quantity the solution needs.

Difficulty levels:

* 1: two steps of whole-number arithmetic (groups of items, distance).
* 2: three or four steps with percentages and fractions (discounts, budgets).
* 3: algebra, solved through a chain of steps (a linear equation, sum and
  difference, a rectangle from its perimeter); answers may be fractions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import sympy

from llmgym.envs.math_tools.calculator import evaluate

__all__ = ["Step", "Problem", "generate_problem", "TEMPLATES", "DIFFICULTIES"]

NAMES = ("Ada", "Bilal", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ines", "Jonas", "Kira", "Luis")
ITEMS = ("apples", "pencils", "stickers", "marbles", "cookies", "batteries", "candles", "stamps")
GOODS = ("lamp", "backpack", "kettle", "jacket", "board game", "headset")


@dataclass(frozen=True)
class Step:
    """One step of the reference solution."""

    expression: str
    value: sympy.Expr


@dataclass
class Problem:
    """A generated word problem.

    Attributes:
        text: the question the agent reads.
        answer: the exact answer.
        steps: the reference solution, answer last.
        template: the template's name (for analysis; never shown to the agent).
        difficulty: 1, 2 or 3.
    """

    text: str
    answer: sympy.Expr
    steps: list[Step] = field(default_factory=list)
    template: str = ""
    difficulty: int = 1


def _pick(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return options[int(rng.integers(len(options)))]


def _solve(*expressions: str) -> list[Step]:
    return [Step(expr, evaluate(expr)) for expr in expressions]


def _packs(rng: np.random.Generator) -> tuple[str, list[Step]]:
    name, item = _pick(rng, NAMES), _pick(rng, ITEMS)
    packs, per, given = int(rng.integers(3, 13)), int(rng.integers(4, 25)), 0
    given = int(rng.integers(1, packs * per))
    text = (
        f"{name} buys {packs} packs of {item} with {per} {item} in each pack and then gives away {given} {item}. "
        f"How many {item} does {name} have left?"
    )
    return text, _solve(f"{packs} * {per}", f"{packs * per} - {given}")


def _trip(rng: np.random.Generator) -> tuple[str, list[Step]]:
    speed, hours, extra = int(rng.integers(40, 130)), int(rng.integers(2, 9)), int(rng.integers(10, 300))
    text = (
        f"A train travels at {speed} km per hour for {hours} hours and then covers another {extra} km. "
        "How many kilometres does it travel in total?"
    )
    return text, _solve(f"{speed} * {hours}", f"{speed * hours} + {extra}")


def _discount(rng: np.random.Generator) -> tuple[str, list[Step]]:
    name, good = _pick(rng, NAMES), _pick(rng, GOODS)
    price, pct, count = (
        int(rng.integers(12, 200)),
        int(rng.choice([5, 10, 15, 20, 25, 30, 40, 50])),
        int(rng.integers(2, 6)),
    )
    sale = sympy.Rational(price) * (100 - pct) / 100
    total = sale * count
    bill = int((total // 50 + 1) * 50)
    text = (
        f"A {good} costs ${price}. During a sale its price is cut by {pct}%. {name} buys {count} of them "
        f"and pays with ${bill}. How many dollars of change does {name} get?"
    )
    return text, _solve(
        f"{price} * {pct} / 100", f"{price} - {price} * {pct} / 100", f"{count} * {sale}", f"{bill} - {total}"
    )


def _budget(rng: np.random.Generator) -> tuple[str, list[Step]]:
    name = _pick(rng, NAMES)
    denominator = int(rng.choice([3, 4, 5, 6, 8]))
    numerator = int(rng.integers(1, denominator))
    pct = int(rng.choice([10, 20, 25, 50]))
    total = int(rng.integers(6, 40)) * denominator * 20
    rent = sympy.Rational(total * numerator, denominator)
    rest = total - rent
    text = (
        f"{name} earns ${total} a month, spends {numerator}/{denominator} of it on rent and then {pct}% of "
        f"what is left on food. How many dollars remain after rent and food?"
    )
    return text, _solve(
        f"{total} * {numerator} / {denominator}",
        f"{total} - {rent}",
        f"{rest} * {pct} / 100",
        f"{rest} - {rest * pct / 100}",
    )


def _linear(rng: np.random.Generator) -> tuple[str, list[Step]]:
    a, b = int(rng.integers(2, 9)), int(rng.integers(1, 40))
    c = int(rng.integers(b + 1, b + 120))
    text = (
        f"{a} times a number, increased by {b}, equals {c} minus the number. What is the number? "
        "(Give an exact value; a fraction is fine.)"
    )
    return text, _solve(f"{c} - {b}", f"{a} + 1", f"({c} - {b}) / ({a} + 1)")


def _sum_difference(rng: np.random.Generator) -> tuple[str, list[Step]]:
    larger, smaller = int(rng.integers(10, 90)), int(rng.integers(1, 60))
    larger += smaller
    total, diff = larger + smaller, larger - smaller
    text = f"The sum of two numbers is {total} and their difference is {diff}. What is their product?"
    return text, _solve(f"({total} + {diff}) / 2", f"({total} - {diff}) / 2", f"{larger} * {smaller}")


def _rectangle(rng: np.random.Generator) -> tuple[str, list[Step]]:
    width, more = int(rng.integers(2, 40)), int(rng.integers(1, 30))
    perimeter = 2 * (2 * width + more)
    text = (
        f"A rectangle is {more} cm longer than it is wide, and its perimeter is {perimeter} cm. "
        "What is its area in square centimetres?"
    )
    half = perimeter // 2
    return text, _solve(f"{perimeter} / 2", f"({half} - {more}) / 2", f"{width} + {more}", f"{width} * {width + more}")


TEMPLATES: dict[int, dict[str, Callable[[np.random.Generator], tuple[str, list[Step]]]]] = {
    1: {"packs": _packs, "trip": _trip},
    2: {"discount": _discount, "budget": _budget},
    3: {"linear": _linear, "sum_difference": _sum_difference, "rectangle": _rectangle},
}
DIFFICULTIES = tuple(TEMPLATES)


def generate_problem(rng: np.random.Generator, difficulty: int = 1) -> Problem:
    """Draw a problem of the given difficulty (1, 2 or 3).

    Example:
        >>> problem = generate_problem(np.random.default_rng(0), difficulty=3)
        >>> problem.answer == problem.steps[-1].value, problem.difficulty
        (True, 3)
    """
    if difficulty not in TEMPLATES:
        raise ValueError(f"difficulty must be one of {DIFFICULTIES}, got {difficulty!r}")
    names = sorted(TEMPLATES[difficulty])
    name = names[int(rng.integers(len(names)))]
    text, steps = TEMPLATES[difficulty][name](rng)
    return Problem(text=text, answer=steps[-1].value, steps=steps, template=name, difficulty=difficulty)
