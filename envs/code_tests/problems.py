"""Programming problems for CodeTests: seeded generated families plus a small hand-written set.

Holds :class:`CodeProblem` (spec, function name, visible examples, hidden
test inputs and the expected outputs computed by a trusted reference
implementation on the host) and :func:`make_problem`. Generated families draw
a parameter (a shift, a base, a divisor...) so the spec itself varies, and
draw the hidden inputs separately from the visible ones, so a program that
special-cases the examples fails the hidden tests. The hand-written set
lives in :mod:`.handwritten`.
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmgym.envs.code_tests.handwritten import HANDWRITTEN

__all__ = ["CodeProblem", "Family", "FAMILIES", "make_problem", "normalize"]


def normalize(value: Any) -> Any:
    """A value as it looks after a JSON round trip (tuples become lists), so outputs compare on the host."""
    return json.loads(json.dumps(value))


@dataclass
class CodeProblem:
    """One task: write ``function`` to satisfy ``spec``.

    Attributes:
        name: the family or hand-written problem's name.
        function: the function the agent must define.
        spec: the task text (with the visible examples).
        visible: ``(args, expected)`` pairs shown to the agent.
        hidden: ``(args, expected)`` pairs only the grader sees.
    """

    name: str
    function: str
    spec: str
    visible: list[tuple[list[Any], Any]] = field(default_factory=list)
    hidden: list[tuple[list[Any], Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Family:
    """A generated problem family: a parameter, a spec, a reference and an input generator.

    ``rivals(param)`` lists the parameter values a careless reader could take
    instead (another shift, base or divisor; a rotation by 0): the visible
    examples are chosen so that, together, they tell the real one apart from
    each rival (see :func:`informative_examples`). ``misreadings`` are whole
    functions (called like the reference, with ``param``) for misreadings that
    are not another parameter, such as not merging a run in run-length coding.
    """

    function: str
    spec: str
    param: Callable[[np.random.Generator], Any]
    reference: Callable[..., Any]
    make_input: Callable[[np.random.Generator, Any], list[Any]]
    rivals: Callable[[Any], list[Any]]
    misreadings: tuple[Callable[..., Any], ...] = ()


def _word(rng: np.random.Generator, alphabet: str = string.ascii_lowercase, low: int = 0, high: int = 12) -> str:
    return "".join(alphabet[int(i)] for i in rng.integers(0, len(alphabet), int(rng.integers(low, high))))


def _shift(text: str, k: int) -> str:
    return "".join(chr((ord(c) - 97 + k) % 26 + 97) if "a" <= c <= "z" else c for c in text)


def _count_multiples(lo: int, hi: int, divisors: tuple[int, int]) -> int:
    """Integers in [lo, hi] divisible by either divisor, by inclusion-exclusion.

    Floor division counts negatives too.
    """
    if lo > hi:
        return 0
    a, b = divisors
    both = a * b // math.gcd(a, b)
    return sum(sign * (hi // d - (lo - 1) // d) for sign, d in ((1, a), (1, b), (-1, both)))


def _two_divisors(rng: np.random.Generator) -> tuple[int, int]:
    first = int(rng.integers(2, 10))
    second = int(rng.integers(2, 14))
    return first, second + (second >= first)  # 2..14 without the first: never "by 8 or by 8"


def _digit_sum(n: int, base: int) -> int:
    total = 0
    while n:
        n, digit = divmod(n, base)
        total += digit
    return total


def _kth_largest(values: list[int], k: int) -> int | None:
    distinct = sorted(set(values), reverse=True)
    return distinct[k - 1] if len(distinct) >= k else None


def _rotate(values: list[int], k: int) -> list[int]:
    if not values:
        return []
    k %= len(values)
    return values[-k:] + values[:-k] if k else list(values)


def _run_length(text: str, sep: str) -> str:
    out, i = [], 0
    while i < len(text):
        j = i
        while j < len(text) and text[j] == text[i]:
            j += 1
        out.append(f"{text[i]}{sep}{j - i}")
        i = j
    return "".join(out)


FAMILIES: dict[str, Family] = {
    "shift_letters": Family(
        "shift_letters",
        "Write a Python function `shift_letters(text)` that returns `text` with every lowercase letter a-z moved "
        "{param} places forward in the alphabet, wrapping around from z to a. Every other character stays as it is.",
        lambda rng: int(rng.integers(1, 26)),
        _shift,
        lambda rng, p: [_word(rng, "abcdefghijklmnopqrstuvwxyz  .!AZ", 0, 16)],
        lambda p: [k for k in range(26) if k != p],
    ),
    "digit_sum": Family(
        "digit_sum",
        "Write a Python function `digit_sum(n)` that returns the sum of the digits of the non-negative integer "
        "`n` written in base {param}.",
        lambda rng: int(rng.integers(2, 17)),
        _digit_sum,
        lambda rng, p: [int(rng.integers(0, 10 ** int(rng.integers(1, 8))))],
        lambda p: [b for b in range(2, 17) if b != p],
    ),
    "count_multiples": Family(
        "count_multiples",
        "Write a Python function `count_multiples(lo, hi)` that returns how many integers x with lo <= x <= hi "
        "are divisible by {param[0]} or by {param[1]} (or both). If lo > hi the answer is 0.",
        _two_divisors,
        _count_multiples,
        lambda rng, p: sorted(int(v) for v in rng.integers(-50, 400, 2)) if rng.random() < 0.9 else [10, 3],
        lambda p: [(a, b) for a in range(2, 10) for b in range(2, 15) if {a, b} != set(p)],
    ),
    "kth_largest": Family(
        "kth_largest",
        "Write a Python function `kth_largest(values)` that returns the {param}-th largest distinct value in the "
        "list of integers `values` (the largest is the 1st), or None when there are fewer than {param} "
        "distinct values.",
        lambda rng: int(rng.integers(1, 4)),
        _kth_largest,
        lambda rng, p: [[int(v) for v in rng.integers(-20, 20, int(rng.integers(0, 9)))]],
        lambda p: [k for k in range(1, 4) if k != p],
        (lambda values, k: sorted(values, reverse=True)[k - 1] if len(values) >= k else None,),  # duplicates kept
    ),
    "rotate": Family(
        "rotate",
        "Write a Python function `rotate(values)` that returns a new list: `values` rotated {param} places to the "
        "right (the last element moves to the front, {param} times). An empty list stays empty.",
        lambda rng: int(rng.integers(1, 7)),
        _rotate,
        lambda rng, p: [[int(v) for v in rng.integers(0, 100, int(rng.integers(0, 9)))]],
        lambda p: [k for k in range(7) if k != p],
    ),
    "run_length": Family(
        "run_length",
        "Write a Python function `run_length(text)` that encodes every run of a repeated character as the "
        "character, the separator {param!r} and the run's length, e.g. 'aab' -> 'a{param}2b{param}1'.",
        lambda rng: ["", "-", ":", "*"][int(rng.integers(0, 4))],
        _run_length,
        lambda rng, p: [_word(rng, "aaabbbcxy", 0, 14)],
        lambda p: [sep for sep in ["", "-", ":", "*"] if sep != p],
        (lambda text, sep: "".join(f"{c}{sep}1" for c in text),),  # every character its own run: runs not merged
    ),
}


def _generated(rng: np.random.Generator, n_visible: int, n_hidden: int) -> CodeProblem:
    names = sorted(FAMILIES)
    family = FAMILIES[names[int(rng.integers(len(names)))]]
    param = family.param(rng)

    def case() -> tuple[list[Any], Any]:
        args = family.make_input(rng, param)
        return args, normalize(family.reference(*args, param))

    visible = informative_examples(family, param, [case() for _ in range(_CANDIDATES)], n_visible)
    seen = {json.dumps(args) for args, _ in visible}
    hidden: list[tuple[list[Any], Any]] = []
    for _ in range(n_hidden * 20):
        if len(hidden) == n_hidden:
            break
        args, expected = case()
        if json.dumps(args) not in seen:  # the hidden tests are never the visible ones
            seen.add(json.dumps(args))
            hidden.append((args, expected))
    spec = family.spec.format(param=param)
    return CodeProblem(
        family.function, family.function, _with_examples(spec, family.function, visible), visible, hidden
    )


_HANDWRITTEN_EDGES = 3  # fixed edge-case inputs among a hand-written problem's hidden tests
_CANDIDATES = 120  # inputs drawn per problem to choose the visible examples from


def informative_examples(
    family: Family, param: Any, candidates: list[tuple[list[Any], Any]], n: int
) -> list[tuple[list[Any], Any]]:
    """``n`` of ``candidates`` that, together, tell ``param`` apart from as many rivals as they can.

    Greedy set cover: each pick is the candidate whose expected output differs
    from the most rivals' outputs still standing; ties go to the one that
    differs from the most rivals overall, then to the first drawn. Inputs are
    never repeated. So ``rotate([4, 7]) == [4, 7]`` (a rotation by 2 that also
    reads as no rotation) is shown only when nothing better was drawn.

    Example:
        >>> family = FAMILIES["rotate"]
        >>> cases = [([[4, 7]], [4, 7]), ([[1, 2, 3]], [2, 3, 1])]
        >>> informative_examples(family, 2, cases, 1)
        [([[1, 2, 3]], [2, 3, 1])]
    """
    standing = [_with_param(family.reference, rival) for rival in family.rivals(param)]
    standing += [_with_param(misreading, param) for misreading in family.misreadings]
    unique = list({json.dumps(args): (args, expected) for args, expected in candidates}.values())
    beats: dict[int, frozenset[int]] = {}  # computed as the scan reaches a candidate: most are never needed

    def beaten(c: int) -> frozenset[int]:
        if c not in beats:
            args, expected = unique[c]
            beats[c] = frozenset(i for i, rival in enumerate(standing) if _differs(rival(*args), expected))
        return beats[c]

    left, chosen, everyone = set(range(len(standing))), [], len(standing)
    pool = list(range(len(unique)))
    while pool and len(chosen) < n:
        best = None
        for c in pool:  # in drawing order: the first that beats every rival cannot be bettered
            if best is None or (len(beaten(c) & left), len(beaten(c)), -c) > (
                len(beaten(best) & left),
                len(beaten(best)),
                -best,
            ):
                best = c
            if len(beaten(c)) == everyone:
                break
        chosen.append(best)
        pool.remove(best)
        left -= beaten(best)
    return [unique[c] for c in chosen]


def _differs(output: Any, expected: Any) -> bool:
    if type(output) in (int, str, type(None)):  # JSON as it is: no round trip needed (the common case)
        return output != expected
    return normalize(output) != expected


def _with_param(function: Callable[..., Any], param: Any) -> Callable[..., Any]:
    return lambda *args: function(*args, param)


def _with_examples(spec: str, function: str, visible: list[tuple[list[Any], Any]]) -> str:
    lines = [f"    {function}({', '.join(repr(a) for a in args)}) == {expected!r}" for args, expected in visible]
    return spec + "\n\nExamples:\n" + "\n".join(lines)


def make_problem(
    rng: np.random.Generator, source: str = "mixed", n_visible: int = 3, n_hidden: int = 12
) -> CodeProblem:
    """Draw a problem: ``source`` is ``"generated"``, ``"handwritten"`` or ``"mixed"`` (a quarter hand-written).

    Example:
        >>> problem = make_problem(np.random.default_rng(0), "generated")
        >>> len(problem.visible), len(problem.hidden) > 0, problem.function in problem.spec
        (3, True, True)
    """
    if source not in ("generated", "handwritten", "mixed"):
        raise ValueError(f"source must be 'generated', 'handwritten' or 'mixed', got {source!r}")
    handwritten = source == "handwritten" or (source == "mixed" and rng.random() < 0.25)
    if not handwritten:
        return _generated(rng, n_visible, n_hidden)
    entry = HANDWRITTEN[int(rng.integers(len(HANDWRITTEN)))]
    # Fresh inputs from the episode's rng, plus a few fixed edge cases that are never shown: a table of
    # past episodes' examples cannot cover the hidden tests.
    edges = [list(entry.inputs[int(i)]) for i in rng.permutation(len(entry.inputs))[:_HANDWRITTEN_EDGES]]
    seen: set[str] = set()
    visible: list[list[Any]] = []
    hidden: list[list[Any]] = []
    for _ in range((n_visible + n_hidden) * 20):
        if len(visible) == n_visible and len(hidden) == n_hidden:
            break
        args = edges.pop() if len(visible) == n_visible and edges else list(entry.make_input(rng))
        if json.dumps(args) not in seen:  # the hidden tests are never the visible ones, nor repeated
            seen.add(json.dumps(args))
            (visible if len(visible) < n_visible else hidden).append(args)
    visible_cases = [(args, normalize(entry.reference(*args))) for args in visible]
    hidden_cases = [(args, normalize(entry.reference(*args))) for args in hidden]
    return CodeProblem(
        entry.function,
        entry.function,
        _with_examples(entry.spec, entry.function, visible_cases),
        visible_cases,
        hidden_cases,
    )
