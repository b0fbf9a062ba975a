"""Rubrics: weighted, named reward functions evaluated every turn and at the end.

Holds :class:`TurnContext` (what a reward function sees), :class:`Reward`
(one named, weighted function), :class:`Rubric` (a set of them) and a small
library of reusable components. Every reward function has one signature,
``fn(ctx: TurnContext) -> float``. Weight 0 logs a metric without paying it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from llmgym.parsing import THINK_BLOCK, ParsedAction, clip_text, show_value
from llmgym.tools import ToolResult

if TYPE_CHECKING:
    from llmgym.env import LLMEnv

__all__ = [
    "TurnContext",
    "Reward",
    "Rubric",
    "format_error",
    "turn_efficiency",
    "length_penalty",
    "thinking_penalty",
    "tool_error_rate",
]


def __getattr__(name: str) -> Any:
    if name == "THINK_RE":  # public in 0.2; goes in the next release
        warnings.warn(
            "llmgym.rubric.THINK_RE is deprecated: use llmgym.parsing.THINK_BLOCK (the same pattern, every part "
            "of llmgym reads reasoning with it) or llmgym.parsing.thoughts(text)",
            DeprecationWarning,
            stacklevel=2,
        )
        return THINK_BLOCK
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(slots=True)
class TurnContext:
    """Everything a reward function may look at for one turn.

    Attributes:
        env: the environment (its task state: the target word, the answer...).
        turn: 1-based number of this turn.
        action_text: the assistant text of this turn.
        parsed: the parsed action (prose, tool calls, format errors).
        tool_results: ``(name, result)`` for each tool call made this turn.
        format_errors: problems with the action's format, tool names or arguments.
        action_tokens: tokens the action used (see ``LLMEnv.count_tokens``).
        thinking_tokens: tokens of the action's reasoning (:func:`llmgym.parsing.thoughts`).
        done: the episode ends this turn (terminated or truncated).
        terminated: the task is over.
        history: the contexts of earlier turns, oldest first.
    """

    env: LLMEnv
    turn: int
    action_text: str
    parsed: ParsedAction
    tool_results: list[tuple[str, ToolResult]] = field(default_factory=list)
    format_errors: list[str] = field(default_factory=list)
    action_tokens: int = 0
    thinking_tokens: int = 0
    done: bool = False
    terminated: bool = False
    history: list[TurnContext] = field(default_factory=list)


RewardFn = Callable[[TurnContext], float]


@dataclass
class Reward:
    """A named reward function with a weight.

    Args:
        fn: ``fn(ctx) -> float``.
        weight: multiplies the value in the turn's reward; 0 = metric only.
        when: ``"turn"`` evaluates every turn; ``"end"`` only on the last turn.
        name: the component's name in ``info["reward_components"]`` (default: the function's).
    """

    fn: RewardFn
    weight: float = 1.0
    when: Literal["turn", "end"] = "turn"
    name: str = ""

    def __post_init__(self) -> None:
        if self.when not in ("turn", "end"):
            raise ValueError(f"when must be 'turn' or 'end', got {self.when!r}")
        self.name = self.name or getattr(self.fn, "__name__", "reward")
        if not isinstance(self.name, str):
            raise TypeError(f"a reward's name must be a string, got {self.name!r}")


class Rubric:
    """A weighted set of named reward functions.

    Example:
        >>> rubric = Rubric([Reward(lambda ctx: 1.0, weight=0.5, name="always"),
        ...                  Reward(lambda ctx: 2.0, when="end", name="final")])
        >>> [r.name for r in rubric.rewards]
        ['always', 'final']
    """

    def __init__(self, rewards: list[Reward]):
        names = [r.name for r in rewards]
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise ValueError(f"reward names must be unique, repeated: {sorted(duplicates)}")
        self.rewards: tuple[Reward, ...] = tuple(rewards)
        # what scoring reads, taken when the rubric is built: a Reward changed later is not seen, nor by copies
        self._plan = tuple((r.name, r.fn, r.weight, r.when) for r in self.rewards)

    def score(self, ctx: TurnContext) -> tuple[float, dict[str, float]]:
        """This turn's reward and its components (unweighted values, by name).

        Every reward on the last turn (``ctx.done``), only the ``"turn"`` ones before it.

        Raises:
            TypeError: a reward function returned something that is not a number.
            ValueError: a component, or the total, is not finite (whatever its weight).
        """
        total = 0.0
        components: dict[str, float] = {}
        for name, fn, weight, when in self._plan:
            if when == "end" and not ctx.done:
                continue
            value = _as_float(name, fn(ctx))
            components[name] = value
            total += weight * value
        if not math.isfinite(total):
            _refuse_not_finite(total, components)
        return total, components

    def weights(self) -> dict[str, float]:
        """Each component's weight, by name."""
        return {r.name: r.weight for r in self.rewards}


def _refuse_not_finite(total: float, components: dict[str, float]) -> None:
    for name, value in components.items():
        if not math.isfinite(value):
            raise ValueError(f"reward {name!r} returned {value}; rewards must be finite")
    raise ValueError(f"the rewards sum to {total} (components {components}); rewards must be finite")


def _as_float(name: str, value: Any) -> float:
    """A reward function's value as a ``float``, or a ``TypeError`` naming the reward."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"reward {name!r} returned {clip_text(show_value(value))}; a reward must be a number") from None


def format_error(ctx: TurnContext) -> float:
    """1.0 when the turn's action was malformed (bad tool-call JSON, unknown tool, bad arguments), else 0.

    Give it a negative weight to charge a format penalty.
    """
    return 1.0 if ctx.format_errors else 0.0


def turn_efficiency(ctx: TurnContext) -> float:
    """At the end: 1.0 when done in one turn, falling linearly to 0 at the turn budget."""
    budget = max(ctx.env.max_turns, 1)
    return max(0.0, 1.0 - (ctx.turn - 1) / budget)


def length_penalty(budget_tokens: int) -> RewardFn:
    """Per turn: how far the action ran over ``budget_tokens``, as a fraction of the budget.

    The seeds' cost knob: give it a negative weight so replies longer than the
    budget cost reward in proportion.

    Raises:
        ValueError: ``budget_tokens < 1`` (the penalty is a fraction of it).
    """
    _check_budget(budget_tokens)

    def length_penalty(ctx: TurnContext) -> float:
        return max(0, ctx.action_tokens - budget_tokens) / budget_tokens

    return length_penalty


def thinking_penalty(budget_tokens: int) -> RewardFn:
    """Per turn: reasoning (``<think>``) tokens over ``budget_tokens``, as a fraction of it (overthinking).

    Raises:
        ValueError: ``budget_tokens < 1`` (the penalty is a fraction of it).
    """
    _check_budget(budget_tokens)

    def thinking_penalty(ctx: TurnContext) -> float:
        return max(0, ctx.thinking_tokens - budget_tokens) / budget_tokens

    return thinking_penalty


def _check_budget(budget_tokens: int) -> None:
    if budget_tokens < 1:  # caught here, not as a ZeroDivisionError in the first step
        raise ValueError(f"budget_tokens must be >= 1, got {budget_tokens}")


def tool_error_rate(ctx: TurnContext) -> float:
    """At the end: the fraction of the episode's tool calls that failed (0 when none were made)."""
    results = [r for c in [*ctx.history, ctx] for _, r in c.tool_results]
    return sum(not r.ok for r in results) / len(results) if results else 0.0
