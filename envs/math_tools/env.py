"""``llmgym/MathTools-v0``: multi-step word problems solved with a calculator and a Python sandbox.

Holds :class:`MathToolsEnv` (its docstring has the rewards, the step-credit rule
and how it could be gamed, in Gymnasium's sections) and :func:`answers_match`.
"""

from __future__ import annotations

import re
from typing import Any

import sympy

from llmgym.env import LLMEnv
from llmgym.envs.math_tools.calculator import (
    CalculatorError,
    decimal,
    evaluate,
    format_number,
    numbers_in,
    parse_answer,
)
from llmgym.envs.math_tools.problems import DIFFICULTIES, Problem, generate_problem
from llmgym.rubric import Reward, Rubric, TurnContext, format_error
from llmgym.sandbox import LazySandbox, SandboxLimits
from llmgym.tools import ToolError, tool

__all__ = ["MathToolsEnv", "answers_match"]

# each answer runs to the end of its line, a closing brace, or the next "final answer:" on the same line
_FINAL_ANSWER = re.compile(
    r"(?:final answer\s*[:=]|\\boxed\{)\s*([^}\n]+?)(?=\s*final answer\s*[:=]|[}\n]|$)", re.IGNORECASE
)
# irrational forms are compared to 50 digits: past near-integers such as exp(pi*sqrt(163)) (a relative 3e-30 off)
_MATCH_DIGITS = 50
_MATCH_TOLERANCE = sympy.Rational(1, 10**40)


def answers_match(given: sympy.Expr, truth: sympy.Expr) -> bool:
    """True when two numbers are equal; always quick.

    Rationals (integers, fractions, decimals: every answer and step of the problems) are compared exactly.
    Other values (``sqrt(8)``, ``pi``) are compared by their first 50 significant digits, equal when they
    agree to a relative 1e-40; a value whose 50 digits cannot be computed at 200 digits of working precision
    (:func:`.calculator.decimal`) is equal to nothing. No ``simplify``: it can run for minutes on a short
    expression such as ``(sin(2) + cos(3))**100``.

    Example:
        >>> answers_match(evaluate("6/4"), sympy.Rational(3, 2)), answers_match(evaluate("1.5"), sympy.Rational(3, 2))
        (True, True)
        >>> answers_match(evaluate("(1 + sqrt(2)) * (sqrt(2) - 1)"), sympy.Integer(1))
        True
        >>> answers_match(evaluate("(sin(2) + cos(3))**100"), sympy.Integer(9))
        False
        >>> answers_match(evaluate("exp(pi*sqrt(163))"), sympy.Integer(262537412640768744))  # 7.5e-13 off
        False
    """
    if given == truth:
        return True
    if given.is_Rational and truth.is_Rational:
        return False
    try:
        a, b = (decimal(value, _MATCH_DIGITS, working_digits=4 * _MATCH_DIGITS) for value in (given, truth))
    except CalculatorError:
        return False
    return bool(abs(a - b) <= _MATCH_TOLERANCE * max(abs(a), abs(b)))


class MathToolsEnv(LLMEnv):
    """Solve a generated multi-step word problem with a calculator and Python, then answer.

    ## Description

    A generated word problem (:mod:`.problems`) with a known exact answer and reference
    steps. The agent may call ``calculator`` (exact arithmetic), ``python`` (a program
    run in :mod:`llmgym.sandbox`; what it prints comes back) and finishes with ``answer``
    (or "Final answer: X" / ``\\boxed{X}`` in plain text: the last one outside
    ``<think>...</think>`` counts), checked by :func:`answers_match`.

    ## Action Space

    ``Text``: assistant text with ``<tool_call>`` blocks (or a plain-text final answer),
    or an OpenAI assistant message with native ``tool_calls``.

    ## Observation Space

    ``Text``: the problem, then each tool's result (or error).

    ## Rewards

    Components in ``info["reward_components"]``:

    | name | weight | when | value |
    |---|---|---|---|
    | ``correct`` | 1.0 | end | 1 when the answer equals the true value (:func:`answers_match`) |
    | ``step_credit`` | 0.1 | turn | reference-solution quantities this turn's tool calls computed for the first time |
    | ``tool_cost`` | -0.02 | turn | tool calls (calculator or python) made this turn |
    | ``format_error`` | -0.1 | turn | 1 when the turn's action was malformed (bad JSON, unknown tool, bad arguments) |
    | ``answered`` | 0 | end | metric: 1 when an answer was given |

    The step-credit rule (the "tool call whose result is used" of the design): a
    tool result *is used* when it equals a quantity of the reference solution,
    i.e. an intermediate value the final answer is computed from, or the answer
    itself. A ``calculator`` call's result is its value; a ``python`` call's
    result is the last number it printed (it must exit cleanly). Each reference
    quantity is credited once per episode, on the turn it was first computed;
    quantities that already appear in the question earn nothing.

    How it could be gamed, and why that does not pay: answering at once with a
    number from the question is wrong (0 for ``correct``). Farming step credit by
    computing every sum, product and quotient of the question's numbers hits a
    few steps but pays ``tool_cost`` for every call, so it nets less than one
    honest calculation per step; credit is at most 0.1 per reference step and
    each step pays once. Claiming success in prose, or an unparseable answer,
    earns nothing. Code in the ``python`` tool runs in the sandbox (no network,
    no access to llmgym's sources, limits on time and memory) and sees nothing
    of the answer. ``tests/envs/test_math_tools.py`` checks that such policies
    score clearly below the scripted honest solver.

    ## Starting State

    A problem of level ``difficulty`` drawn with ``self.np_random``;
    ``reset(options={"difficulty": 3})`` changes the level for one episode.

    ## Episode End

    - Terminated: the agent answered (the ``answer`` tool or a plain-text final answer).
    - Truncated: ``max_turns`` turns or the token budget ran out.

    ## Arguments

    Args:
        difficulty: 1 (two arithmetic steps), 2 (percentages, fractions), 3 (algebra).
        max_turns: turn budget.
        sandbox_backend: ``"subprocess"``, ``"docker"`` or ``"auto"`` for the ``python`` tool.
        python_timeout_s: wall-clock limit of one ``python`` call.
        **kwargs: passed to :class:`~llmgym.LLMEnv`.

    The sandbox (a warm pool shared by the process's MathTools envs, see
    :class:`llmgym.sandbox.LazySandbox`) starts on the first ``python`` call;
    :meth:`close` releases it.

    ## Version History

    - v0: initial release.
    """

    description = "Multi-step word problems with calculator and Python tools; exact answers checked with sympy."
    system_prompt = (
        "Solve the math word problem. Use the calculator tool for arithmetic (exact: fractions stay exact) "
        "or the python tool to run a program (print the result). When you know the answer, call the answer "
        "tool with the number. You may call tools as "
        '<tool_call>{"name": "calculator", "arguments": {"expression": "12 * 7"}}</tool_call>.'
    )

    def __init__(
        self,
        difficulty: int = 1,
        max_turns: int = 10,
        sandbox_backend: str = "subprocess",
        python_timeout_s: float = 5.0,
        **kwargs: Any,
    ):
        if difficulty not in DIFFICULTIES:
            raise ValueError(f"difficulty must be one of {DIFFICULTIES}, got {difficulty!r}")
        super().__init__(max_turns=max_turns, **kwargs)
        self.difficulty = difficulty
        self.sandbox_backend = sandbox_backend
        # one warm pool per process, shared by every MathTools env, started by the first python call
        options = {"preload": ("fractions", "math"), "pool_size": 4} if sandbox_backend == "subprocess" else {}
        limits = SandboxLimits(wall_time_s=python_timeout_s, cpu_time_s=python_timeout_s, memory_mb=1024)
        self._sandbox = LazySandbox(sandbox_backend, limits, role="math_tools", **options)
        self.problem: Problem | None = None
        self.given_answer: sympy.Expr | None = None
        self.answer_text = ""
        self.tool_values: list[tuple[int, sympy.Expr]] = []  # (turn, value) of each successful tool result
        self.creditable: list[sympy.Expr] = []

    def setup(self, options: dict[str, Any] | None) -> str:
        difficulty = (options or {}).get("difficulty", self.difficulty)
        if difficulty not in DIFFICULTIES:
            raise ValueError(f"options['difficulty'] must be one of {DIFFICULTIES}, got {difficulty!r}")
        self.problem = generate_problem(self.np_random, difficulty)
        self.given_answer, self.answer_text = None, ""
        self.tool_values = []
        self.creditable = self._creditable()
        return self.problem.text

    # -- tools -------------------------------------------------------------------

    @tool
    def calculator(self, expression: str) -> str:
        """Evaluate an arithmetic expression exactly (+ - * / // % ** ^, parentheses, sqrt, pi...).

        Args:
            expression: e.g. "(120 - 18) / 4" or "2^10".
        """
        try:
            value = evaluate(expression)
        except CalculatorError as err:
            raise ToolError(str(err)) from None
        self._record(value)
        return format_number(value)

    @tool(max_output_chars=4096)
    def python(self, code: str) -> str:
        """Run a Python program in a sandbox (no network, a few seconds) and return what it prints.

        Args:
            code: the program; print the values you need.
        """
        result = self._sandbox.run(code)
        if result.ok:
            printed = numbers_in(result.stdout.strip().splitlines()[-1]) if result.stdout.strip() else []
            if printed:
                self._record(printed[-1])
            return result.to_text(3000)
        raise ToolError(result.to_text(3000))

    @tool
    def answer(self, value: str) -> str:
        """Give the final answer (a number; ends the episode).

        Args:
            value: the answer, e.g. "42", "7/3" or "13.5".
        """
        parsed = parse_answer(value)
        if parsed is None:
            raise ToolError(f"no number found in {value[:60]!r}; answer with a number such as 42 or 7/3")
        self.given_answer, self.answer_text = parsed, value
        return f"Answer recorded: {value.strip()[:100]}"

    def _record(self, value: sympy.Expr) -> None:
        self.tool_values.append((len(self.turn_contexts) + 1, value))

    def on_text(self, text: str) -> str:
        # the last final answer counts, as in math-verify: "maybe 574? no ... final answer: 573"; text comes
        # without its reasoning (LLMEnv.on_text), so an answer drafted in <think> is not among them
        answers = _FINAL_ANSWER.findall(text)
        if answers:
            return self.answer.call({"value": answers[-1]}).content
        return super().on_text(text)

    def is_done(self) -> bool:
        return self.given_answer is not None

    @property
    def correct(self) -> bool:
        """True when the given answer equals the true one."""
        return (
            self.given_answer is not None
            and self.problem is not None
            and answers_match(self.given_answer, self.problem.answer)
        )

    def close(self) -> None:
        self._sandbox.close()
        super().close()

    # -- rewards -----------------------------------------------------------------

    def build_rubric(self) -> Rubric:
        return Rubric(
            [
                Reward(lambda ctx: 1.0 if self.correct else 0.0, weight=1.0, when="end", name="correct"),
                Reward(self._step_credit, weight=0.1, name="step_credit"),
                Reward(self._tool_cost, weight=-0.02, name="tool_cost"),
                Reward(format_error, weight=-0.1),
                Reward(
                    lambda ctx: 1.0 if self.given_answer is not None else 0.0, weight=0.0, when="end", name="answered"
                ),
            ]
        )

    def _creditable(self) -> list[sympy.Expr]:
        assert self.problem is not None
        in_question = numbers_in(self.problem.text)
        values: list[sympy.Expr] = []
        for step in self.problem.steps:
            if not any(answers_match(step.value, v) for v in [*in_question, *values]):
                values.append(step.value)
        return values

    def _step_credit(self, ctx: TurnContext) -> float:
        if self.problem is None:
            return 0.0
        before = {i for turn, v in self.tool_values if turn < ctx.turn for i in self._matches(v)}
        now = {i for turn, v in self.tool_values if turn == ctx.turn for i in self._matches(v)}
        return float(len(now - before))

    def _matches(self, value: sympy.Expr) -> list[int]:
        return [i for i, step in enumerate(self.creditable) if answers_match(value, step)]

    def _tool_cost(self, ctx: TurnContext) -> float:
        return float(sum(1 for name, _ in ctx.tool_results if name in ("calculator", "python")))
