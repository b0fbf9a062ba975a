"""``llmgym/MentalMath-v0``: answer a one-operation arithmetic question with a bare number.

Holds :class:`MentalMathEnv` (documented in Gymnasium's sections) and :func:`last_integer`.
A small single-turn task for small models: it exists so that a 135M-parameter model
succeeds sometimes and reinforcement learning has reward variance to work with; the
reasoning-gym tasks are out of its reach at that size.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any

from llmgym.env import LLMEnv
from llmgym.rubric import Reward, Rubric

__all__ = ["MentalMathEnv", "OPERATIONS", "last_integer"]

#: The operations a question may use, by symbol.
OPERATIONS: dict[str, Callable[[int, int], int]] = {"+": operator.add, "-": operator.sub, "*": operator.mul}

# a number as written: thousands separated by commas, a decimal part (``12.0`` is 12, not 0)
_NUMBER = re.compile(r"[-\u2212]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.(\d+))?")
_BARE_INTEGER = re.compile(r"^\s*[-\u2212]?\d+\s*\.?\s*$")  # U+2212 is the minus sign of typeset math


def last_integer(text: str) -> int | None:
    """The last number written in ``text`` if it is an integer, else ``None`` (also for one too long for ``int``).

    Example:
        >>> last_integer("7 + 5 = 12."), last_integer("It is 12.0"), last_integer("5,355")
        (12, 12, 5355)
        >>> last_integer("It is -3") , last_integer("no digits"), last_integer("12.5"), last_integer("0" * 5000 + "7")
        (-3, None, None, 7)
    """
    matches = list(_NUMBER.finditer(text))
    found = matches[-1] if matches else None
    if found is None or found.group(1) and found.group(1).strip("0"):  # none, or a fraction such as 12.5
        return None
    number = found.group(0).split(".")[0].replace(",", "")
    sign, digits = ("-", number[1:]) if number[0] in "-\u2212" else ("", number)
    try:  # leading zeros dropped: they do not count against int()'s digit limit
        return int(sign + (digits.lstrip("0") or "0"))
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits(), 4,300 by default)
        return None


class MentalMathEnv(LLMEnv):
    """One arithmetic question (``a op b``, operands in ``[0, max_operand]``), answered in a single reply.

    ## Description

    The question is ``What is 7 + 5? Reply with just the number.``; there are no
    tools, so the prompt is the question and a one-line system prompt. A 135M model
    gets about a quarter of replies right at temperature 1.0 for single-digit sums.

    ## Action Space

    ``Text``: the reply. Its answer is its last integer (``7 + 5 = 12`` reads 12), the
    number as a person reads it: ``12.0`` reads 12, ``5,355`` reads 5355, ``12.5`` is
    no integer, ``−3`` (the typeset minus sign) is -3 (:func:`last_integer`).

    ## Observation Space

    ``Text``: the question; the episode ends after the reply.

    ## Rewards

    Components in ``info["reward_components"]``:

    | name | weight | when | value |
    |---|---|---|---|
    | ``correct`` | 1.0 | end | 1 when the last integer of the reply is the answer |
    | ``concise`` | 0.2 | end | 1 when the reply is a bare integer (``12``, ``12.``), right or wrong |

    How it could be gamed, and why that does not pay: listing many numbers does
    not help, only the last one is read; a bare wrong number earns ``concise``
    (0.2) and nothing more, far below a right one (1.2); the question never
    holds its answer (``a op b`` is asked, not stated with its result).
    ``tests/envs/test_mental_math.py`` checks that such policies score below an
    honest one.

    ## Starting State

    ``reset(seed=s)`` draws the operation and operands with ``self.np_random``;
    ``reset(options={"a": 7, "b": 5, "op": "+"})`` asks that question.

    ## Episode End

    - Terminated: after the one reply.
    - Truncated: only when the one reply was refused unread (longer than ``max_action_chars``).

    ## Arguments

    Args:
        max_operand: largest operand (default 9: single digits).
        operations: the operation symbols to draw from, a subset of ``"+-*"`` (default ``"+"``).
        **kwargs: passed to :class:`~llmgym.LLMEnv` (``max_turns`` is always 1).

    ## Version History

    - v0: initial release.
    """

    description = "Answer a one-operation arithmetic question (single digits by default) with just the number."
    system_prompt = "Answer with only the final number."

    def __init__(self, max_operand: int = 9, operations: str = "+", **kwargs: Any):
        if isinstance(max_operand, bool) or not isinstance(max_operand, int) or max_operand < 1:
            raise ValueError(f"max_operand must be an int >= 1, got {max_operand!r}")
        if not isinstance(operations, str) or not operations or set(operations) - set(OPERATIONS):
            raise ValueError(
                f"operations must be a non-empty string of symbols from {''.join(OPERATIONS)!r}, got {operations!r}"
            )
        kwargs.pop("max_turns", None)
        super().__init__(max_turns=1, **kwargs)
        self.max_operand = max_operand
        self.operations = "".join(dict.fromkeys(operations))
        self.a, self.b, self.op = 0, 0, "+"
        self.reply: str | None = None

    @property
    def answer(self) -> int:
        """The right answer to the current question."""
        return OPERATIONS[self.op](self.a, self.b)

    def setup(self, options: dict[str, Any] | None) -> str:
        options = options or {}
        if {"a", "b", "op"} & options.keys():
            a, b, op = options.get("a"), options.get("b"), options.get("op", "+")
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (a, b)) or op not in OPERATIONS:
                raise ValueError(f"options needs int 'a' and 'b' and 'op' in {list(OPERATIONS)}, got {options!r}")
            self.a, self.b, self.op = a, b, op
        else:
            self.op = self.operations[int(self.np_random.integers(len(self.operations)))]
            self.a, self.b = (int(v) for v in self.np_random.integers(0, self.max_operand + 1, size=2))
        self.reply = None
        return f"What is {self.a} {self.op} {self.b}? Reply with just the number."

    def on_text(self, text: str) -> str:
        self.reply = text
        given = last_integer(text)
        return f"Answer recorded: {'(none)' if given is None else given}"

    def is_done(self) -> bool:
        return self.reply is not None

    def build_rubric(self) -> Rubric:
        return Rubric(
            [
                Reward(
                    lambda ctx: 1.0 if self.reply is not None and last_integer(self.reply) == self.answer else 0.0,
                    weight=1.0,
                    when="end",
                    name="correct",
                ),
                Reward(
                    lambda ctx: 1.0 if self.reply is not None and _BARE_INTEGER.match(self.reply) else 0.0,
                    weight=0.2,
                    when="end",
                    name="concise",
                ),
            ]
        )
