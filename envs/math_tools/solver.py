"""A scripted MathTools player: reads the question, works it out step by step with the calculator, answers.

The honest baseline for tests and benchmarks. It recognises each question
template by its wording (it reads only the observation, like any agent),
plans the calculator expressions, sends one per turn and answers with the
last result.
"""

from __future__ import annotations

import json
import re

__all__ = ["MathToolsSolver", "plan"]

_N = r"(\d+(?:\.\d+)?)"
_PATTERNS: list[tuple[re.Pattern[str], object]] = [
    (
        re.compile(rf"buys {_N} packs of \w+ with {_N} \w+ in each pack and then gives away {_N}"),
        lambda p, k, g: [f"{p} * {k}", f"{p} * {k} - {g}"],
    ),
    (
        re.compile(rf"travels at {_N} km per hour for {_N} hours and then covers another {_N} km"),
        lambda v, t, d: [f"{v} * {t}", f"{v} * {t} + {d}"],
    ),
    (
        re.compile(
            rf"costs \${_N}\. During a sale its price is cut by {_N}%\. \w+ buys {_N} of them and pays with \${_N}"
        ),
        lambda p, c, n, b: [
            f"{p} * {c} / 100",
            f"{p} - {p} * {c} / 100",
            f"{n} * ({p} - {p} * {c} / 100)",
            f"{b} - {n} * ({p} - {p} * {c} / 100)",
        ],
    ),
    (
        re.compile(rf"earns \${_N} a month, spends {_N}/{_N} of it on rent and then {_N}% of"),
        lambda t, a, b, c: [
            f"{t} * {a} / {b}",
            f"{t} - {t} * {a} / {b}",
            f"({t} - {t} * {a} / {b}) * {c} / 100",
            f"({t} - {t} * {a} / {b}) * (100 - {c}) / 100",
        ],
    ),
    (
        re.compile(rf"{_N} times a number, increased by {_N}, equals {_N} minus the number"),
        lambda a, b, c: [f"{c} - {b}", f"{a} + 1", f"({c} - {b}) / ({a} + 1)"],
    ),
    (
        re.compile(rf"sum of two numbers is {_N} and their difference is {_N}"),
        lambda s, d: [f"({s} + {d}) / 2", f"({s} - {d}) / 2", f"(({s} + {d}) / 2) * (({s} - {d}) / 2)"],
    ),
    (
        re.compile(rf"is {_N} cm longer than it is wide, and its perimeter is {_N} cm"),
        lambda k, p: [
            f"{p} / 2",
            f"({p} / 2 - {k}) / 2",
            f"({p} / 2 - {k}) / 2 + {k}",
            f"(({p} / 2 - {k}) / 2) * (({p} / 2 - {k}) / 2 + {k})",
        ],
    ),
]


def plan(question: str) -> list[str]:
    """Calculator expressions that solve ``question``, the last one giving the answer ([] if unrecognised).

    Example:
        >>> plan("A train travels at 60 km per hour for 3 hours and then covers another 20 km. How far?")
        ['60 * 3', '60 * 3 + 20']
    """
    for pattern, build in _PATTERNS:
        match = pattern.search(question)
        if match:
            return build(*match.groups())  # type: ignore[operator]
    return []


class MathToolsSolver:
    """One calculator call per reference step, then ``answer`` with the last result.

    Example:
        >>> import gymnasium as gym, llmgym
        >>> env = gym.make("llmgym/MathTools-v0", difficulty=2)
        >>> obs, info = env.reset(seed=3)
        >>> solver, done = MathToolsSolver(), False
        >>> while not done:
        ...     obs, reward, terminated, truncated, info = env.step(solver.act(obs))
        ...     done = terminated or truncated
        >>> env.unwrapped.correct
        True
    """

    def __init__(self) -> None:
        self.steps: list[str] = []
        self.last = ""

    def act(self, observation: str) -> str:
        """The next action: a new question starts a new plan; a calculator reply moves to the next step."""
        steps = plan(observation)
        if steps:
            self.steps, self.last = steps, ""
        else:
            self.last = observation.split(" = ")[0].strip()
        if self.steps:
            return _call("calculator", {"expression": self.steps.pop(0)})
        return _call("answer", {"value": self.last or "0"})


def _call(name: str, arguments: dict[str, str]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"
