"""``llmgym/Multiply-v0``: a product the model cannot work out in its head, found with a calculator and answered.

Holds :class:`MultiplyEnv` (documented in Gymnasium's sections), :class:`MultiplySolver`
and :class:`MixedMultiplyTeacher`. A compact two-turn tool task in the shape of the
MT-GRPO paper's search task (Zeng et al., arXiv 2505.11821): a first turn that should
call the tool, a second that should answer from its result.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

import sympy

from llmgym.env import LLMEnv
from llmgym.envs.math_tools.calculator import CalculatorError, evaluate, format_number, numbers_in
from llmgym.rubric import Reward, Rubric, TurnContext

__all__ = ["MultiplyEnv", "MultiplySolver", "MixedMultiplyTeacher", "QUESTIONS", "CONVERT_QUESTIONS"]

#: The word problems, each asking for ``a * b``.
QUESTIONS = (
    "A crate holds {a} apples. How many apples are in {b} crates?",
    "A train seat costs {a} cents. What do {b} seats cost, in cents?",
    "A book has {a} pages. How many pages do {b} copies have in all?",
    "A farm plants {a} trees in each of {b} rows. How many trees is that?",
    "A worker earns {a} dollars a week. How much is that over {b} weeks?",
)
#: With ``convert=True``: the product in a larger unit (the answer divides it by the second value), one step more.
CONVERT_QUESTIONS = (
    ("A train seat costs {a} cents. What do {b} seats cost, in dollars?", 100),
    ("A plank is {a} centimetres long. How many metres long are {b} planks laid end to end?", 100),
    ("A box weighs {a} grams. How many kilograms do {b} boxes weigh?", 1000),
    ("A worker earns {a} cents an hour. How many dollars is that for {b} hours?", 100),
    ("A tile is {a} millimetres wide. How many metres wide is a row of {b} tiles?", 1000),
)
_CALC = re.compile(r"<calc>(.*?)(?:</calc>|$)", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL)
TURN_COMPONENTS = {"tool_ran": 0.1, "tool_found": 0.4, "no_action": -0.1}


class MultiplyEnv(LLMEnv):
    """Find ``a * b`` (``a`` three digits, ``b`` two) with a ``<calc>`` tag, then give it in an ``<answer>`` tag.

    ## Description

    The question multiplies a three-digit number by a two-digit one (``347 * 89``),
    phrased as one of a few everyday word problems, which a 135M-parameter model gets
    wrong without the tool. The tool syntax is two short tags, so a turn is a dozen
    tokens and the prompt carries no JSON schema::

        <calc>347 * 89</calc>        -> Result: 30883
        <answer>30883</answer>       -> the episode ends

    A reply may hold both; the calculation runs, then the answer is read (it was
    written before the result was seen). A reply with neither gets a reminder of the
    two tags. Two harder settings: ``convert=True`` asks for the product in a larger
    unit (``347`` cents times ``89`` in dollars: ``308.83``), a step the calculator can
    take too; ``rounded=True`` with it asks for that value rounded to a whole number
    (``309``), a step left to the agent after the result.

    ## Action Space

    ``Text``: the reply, read for ``<calc>`` and ``<answer>`` tags (no JSON tool calls).

    ## Observation Space

    ``Text``: the question, then ``Result: ...`` of a calculation, or a reminder of the tags.

    ## Rewards

    Components in ``info["reward_components"]``:

    | name | weight | when | value |
    |---|---|---|---|
    | ``correct`` | 1.0 | end | 1 when the answer equals the product |
    | ``tool_ran`` | 0.1 | turn | 1 on the turn of the episode's first calculation that ran |
    | ``tool_found`` | 0.4 | turn | 1 on the turn a calculation first returned the product (see ``convert``) |
    | ``no_action`` | -0.1 | turn | 1 when the reply has neither tag |
    | ``called_tool`` | 0 | turn | metric: 1 on the turn of the first ``<calc>`` tag |
    | ``answered`` | 0 | end | metric: 1 when an answer was given |

    ``turn_rewards=False`` gives the turn components weight 0 (they stay in
    ``reward_components`` as metrics): the reward is then the outcome alone, the
    paper's GRPO-OR setting.

    How it could be gamed, and why that does not pay: ``tool_ran`` is the one
    reward the agent can collect without progress (``<calc>1+1</calc>``); it pays
    once per episode and 0.1 against the 1.4 of a right calculation and answer.
    ``tool_found`` pays only for computing the product itself: the only way to
    earn it is the progress it stands for. Answering with a number from the
    question, or several numbers, earns nothing (the last number inside the
    answer tag is read). ``tests/envs/test_multiply.py`` checks these against the
    scripted solver.

    ## Starting State

    ``reset(seed=s)`` draws ``a``, ``b`` and the question with ``self.np_random``;
    ``reset(options={"a": 347, "b": 89})`` asks that product (with ``convert``, in
    dollars from cents).

    ## Episode End

    - Terminated: an ``<answer>`` was given.
    - Truncated: ``max_turns`` replies (default 2: the tool turn and the answer turn)
      or the token budget ran out.

    ## Arguments

    Args:
        max_turns: replies allowed (default 2: the calculation and the answer).
        turn_rewards: pay the turn components (``tool_ran``, ``tool_found``,
            ``no_action``); ``False`` leaves the outcome (``correct``) alone.
        convert: ask for the product in a larger unit (``347 * 89`` cents in dollars:
            ``308.83``), one step more after the product; ``tool_found`` then pays for
            a calculation that returned the product, the converted value or the answer.
        rounded: with ``convert``, ask for the converted value rounded to a whole
            number (``309``): a step the calculator's result leaves to the agent, so a
            right calculation need not end in a right answer.
        **kwargs: passed to :class:`~llmgym.LLMEnv`.

    ## Version History

    - v0: initial release.
    """

    description = "Multiply a 3-digit by a 2-digit number with a <calc> tool, then <answer>: two short turns."
    system_prompt = (
        "You have a calculator. Reply with <calc>expression</calc> to use it, for example <calc>12 * 34</calc>. "
        "When you have the result, reply with <answer>number</answer>."
    )

    def __init__(
        self, max_turns: int = 2, turn_rewards: bool = True, convert: bool = False, rounded: bool = False, **kwargs: Any
    ):
        if rounded and not convert:
            raise ValueError("rounded=True needs convert=True: a product is already a whole number")
        super().__init__(max_turns=max_turns, **kwargs)
        self.pay_turn_components = bool(turn_rewards)  # not self.turn_rewards: LLMEnv's list of each turn's reward
        self.convert, self.rounded = bool(convert), bool(rounded)
        self.a, self.b, self.divisor = 0, 0, 1
        self.given: sympy.Expr | None = None
        self.answered = False
        self.calls: list[tuple[int, sympy.Expr | None]] = []  # (turn, value; None when it failed) of each <calc>

    @property
    def product(self) -> int:
        """``a * b``."""
        return self.a * self.b

    @property
    def converted(self) -> sympy.Rational:
        """The product divided by the unit's size (the product itself without ``convert``)."""
        return sympy.Rational(self.product, self.divisor)

    @property
    def answer(self) -> sympy.Rational:
        """The right answer: :attr:`converted`, rounded half up to a whole number with ``rounded``."""
        return sympy.Integer(sympy.floor(self.converted + sympy.Rational(1, 2))) if self.rounded else self.converted

    def setup(self, options: dict[str, Any] | None) -> str:
        options = options or {}
        if {"a", "b"} & options.keys():
            a, b = options.get("a"), options.get("b")
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (a, b)):
                raise ValueError(f"options needs int 'a' and 'b', got {options!r}")
            self.a, self.b = a, b
            pick = 0
        else:
            self.a = int(self.np_random.integers(100, 1000))
            self.b = int(self.np_random.integers(11, 100))
            pick = int(self.np_random.integers(len(QUESTIONS)))
        template, self.divisor = CONVERT_QUESTIONS[pick] if self.convert else (QUESTIONS[pick], 1)
        if self.rounded:
            template = template.removesuffix("?") + ", rounded to the nearest whole number?"
        self.given, self.answered, self.calls = None, False, []
        return template.format(a=self.a, b=self.b)

    def on_text(self, text: str) -> str:
        turn = len(self.turn_contexts) + 1
        replies = []
        calc = _CALC.search(text)
        if calc:
            try:
                value = evaluate(calc.group(1).strip())
            except CalculatorError as err:
                self.calls.append((turn, None))
                replies.append(f"Calculator error: {err}")
            else:
                self.calls.append((turn, value))
                replies.append(f"Result: {format_number(value)}")
        answers = _ANSWER.findall(text)
        if answers:
            self.answered = True
            numbers = numbers_in(answers[-1].replace("$", ""))  # the last number written; no expression is evaluated
            self.given = numbers[-1] if numbers else None
            replies.append(f"Answer recorded: {'(no number)' if self.given is None else format_number(self.given)}")
        if not replies:
            replies.append("Reply with <calc>expression</calc> to calculate or <answer>number</answer> to answer.")
        return "\n".join(replies)

    def is_done(self) -> bool:
        return self.answered

    # -- rewards -----------------------------------------------------------------

    def build_rubric(self) -> Rubric:
        weight = {name: (w if self.pay_turn_components else 0.0) for name, w in TURN_COMPONENTS.items()}
        return Rubric(
            [
                Reward(lambda ctx: 1.0 if self.given == self.answer else 0.0, weight=1.0, when="end", name="correct"),
                Reward(self._tool_ran, weight=weight["tool_ran"], name="tool_ran"),
                Reward(self._tool_found, weight=weight["tool_found"], name="tool_found"),
                Reward(self._no_action, weight=weight["no_action"], name="no_action"),
                Reward(self._called_tool, weight=0.0, name="called_tool"),
                Reward(lambda ctx: 1.0 if self.answered else 0.0, weight=0.0, when="end", name="answered"),
            ]
        )

    def _first_turn(self, counts: Callable[[sympy.Expr | None], bool]) -> int | None:
        """The turn of the episode's first calculation whose value ``counts``."""
        return next((turn for turn, value in self.calls if counts(value)), None)

    def _tool_ran(self, ctx: TurnContext) -> float:
        return 1.0 if self._first_turn(lambda value: value is not None) == ctx.turn else 0.0

    def _tool_found(self, ctx: TurnContext) -> float:
        found = {sympy.Integer(self.product), self.converted, self.answer}
        return 1.0 if self._first_turn(lambda value: value is not None and value in found) == ctx.turn else 0.0

    def _called_tool(self, ctx: TurnContext) -> float:
        return 1.0 if self._first_turn(lambda value: True) == ctx.turn else 0.0

    def _no_action(self, ctx: TurnContext) -> float:
        return 0.0 if _CALC.search(ctx.action_text) or _ANSWER.search(ctx.action_text) else 1.0


class MultiplySolver:
    """The scripted player (``scripted:multiply``): one calculation of the whole answer, then its result."""

    #: the share of questions answered at once, with the exact answer and no calculation
    direct_rate = 0.0

    def __init__(self):
        self.rounded = False  # the question asks for a whole number (read from the question)

    def _finish(self, value: sympy.Expr) -> str:
        """The answer from the calculated value: rounded half up when the question asks for it."""
        return _plain(sympy.floor(value + sympy.Rational(1, 2)) if self.rounded else value)

    def act(self, observation: str) -> str:
        if observation.startswith("Result:"):
            return f"<answer>{self._finish(numbers_in(observation)[-1])}</answer>"
        numbers = [int(n) for n in re.findall(r"\d+", observation)]
        if len(numbers) < 2:
            return "<answer>0</answer>"
        a, b = numbers[:2]
        divisor = next((d for text, d in CONVERT_QUESTIONS if text.split("{b}")[1].rstrip("?") in observation), 1)
        self.rounded = "rounded to the nearest whole number" in observation
        draw = int.from_bytes(hashlib.sha256(observation.encode()).digest()[:8], "big") / 2**64
        if draw < self.direct_rate:
            return f"<answer>{self._finish(sympy.Rational(a * b, divisor))}</answer>"
        return f"<calc>{a} * {b}{f' / {divisor}' if divisor != 1 else ''}</calc>"


def _plain(value: sympy.Expr) -> str:
    """A number as a person writes it: ``30883``, ``308.83``."""
    return str(int(value)) if value.is_integer else repr(float(value))


class MixedMultiplyTeacher(MultiplySolver):
    """``scripted:multiply-mixed``: answers half the questions at once, the rest with the calculator.

    The warm-up teacher of ``benchmarks/turn_credit.py``: a model fine-tuned on its
    episodes learns both tags but skips the tool about half the time, where a
    135M model's own product is wrong. Whether reinforcement learning brings
    the tool back is what the benchmark's three arms compare. The choice is
    seeded by the question, so replaying a chat gives the same reply.
    """

    direct_rate = 0.5
