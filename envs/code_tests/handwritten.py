"""The hand-written CodeTests problems: a spec, a trusted reference, and test inputs for each.

Holds :data:`HANDWRITTEN`. Each problem has a seeded input generator and a
few fixed edge-case inputs: per episode the visible examples and most hidden
tests are drawn fresh from the episode's rng, plus some edge cases that are
never shown, so a lookup table of past episodes' examples cannot cover the
hidden tests. This file (like all of llmgym's sources)
is hidden from programs running in the sandbox.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["HandwrittenProblem", "HANDWRITTEN"]


@dataclass(frozen=True)
class HandwrittenProblem:
    """A fixed problem: the function to write, its spec, a reference, fixed edge-case inputs and an input generator."""

    function: str
    spec: str
    reference: Callable[..., Any]
    inputs: tuple[tuple[Any, ...], ...]
    make_input: Callable[[np.random.Generator], tuple[Any, ...]]


def _balanced(text: str) -> bool:
    pairs, stack = {")": "(", "]": "[", "}": "{"}, []
    for char in text:
        if char in "([{":
            stack.append(char)
        elif char in pairs:
            if not stack or stack.pop() != pairs[char]:
                return False
    return not stack


def _roman(text: str) -> int:
    values = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
    total = 0
    for i, char in enumerate(text):
        value = values[char]
        total += -value if i + 1 < len(text) and values[text[i + 1]] > value else value
    return total


def _merge(intervals: list[list[int]]) -> list[list[int]]:
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def _flatten(nested: list[Any]) -> list[int]:
    out: list[int] = []
    for item in nested:
        out.extend(_flatten(item) if isinstance(item, list) else [item])
    return out


def _top_word(text: str) -> str:
    counts: dict[str, int] = {}
    for word in text.lower().split():
        word = "".join(c for c in word if c.isalpha())
        if word:
            counts[word] = counts.get(word, 0) + 1
    return min(counts, key=lambda w: (-counts[w], w)) if counts else ""


def _brackets(rng: np.random.Generator) -> tuple[str]:
    chars: list[str] = []
    for _ in range(int(rng.integers(2, 7))):  # a balanced string: nested and concatenated pairs
        pair = int(rng.integers(3))
        opening, closing = "([{"[pair], ")]}"[pair]
        at = int(rng.integers(len(chars) + 1))
        chars[at:at] = [opening, closing]
    if rng.random() < 0.5:  # half of them broken: a swap, a dropped or a changed bracket
        at = int(rng.integers(len(chars)))
        kind = int(rng.integers(3))
        if kind == 0:
            other = int(rng.integers(len(chars)))
            chars[at], chars[other] = chars[other], chars[at]
        elif kind == 1:
            del chars[at]
        else:
            chars[at] = "()[]{}"[int(rng.integers(6))]
    for _ in range(int(rng.integers(0, 4))):
        chars.insert(int(rng.integers(len(chars) + 1)), "abxyz "[int(rng.integers(6))])
    return ("".join(chars),)


def _to_roman(n: int) -> str:
    out = ""
    for value, numeral in (
        (1000, "M"),
        (900, "CM"),
        (500, "D"),
        (400, "CD"),
        (100, "C"),
        (90, "XC"),
        (50, "L"),
        (40, "XL"),
        (10, "X"),
        (9, "IX"),
        (5, "V"),
        (4, "IV"),
        (1, "I"),
    ):
        count, n = divmod(n, value)
        out += numeral * count
    return out


def _intervals(rng: np.random.Generator) -> tuple[list[list[int]]]:
    starts = rng.integers(-10, 30, int(rng.integers(0, 7)))
    return ([[int(s), int(s + rng.integers(0, 8))] for s in starts],)


def _nested(rng: np.random.Generator, depth: int = 0) -> list[Any]:
    items: list[Any] = []
    for _ in range(int(rng.integers(0, 5))):
        items.append(_nested(rng, depth + 1) if depth < 3 and rng.random() < 0.35 else int(rng.integers(-9, 30)))
    return items


_WORDS = ("the", "cat", "hat", "dog", "apple", "banana", "it's", "sun", "moon", "tree", "a", "b")


def _sentence(rng: np.random.Generator) -> tuple[str]:
    words = []
    for _ in range(int(rng.integers(0, 9))):
        word = _WORDS[int(rng.integers(len(_WORDS)))]
        word = word.upper() if rng.random() < 0.2 else word.capitalize() if rng.random() < 0.2 else word
        words.append(word + ("" if rng.random() < 0.7 else ",.!?"[int(rng.integers(4))]))
    return (" ".join(words),)


HANDWRITTEN: tuple[HandwrittenProblem, ...] = (
    HandwrittenProblem(
        "is_balanced",
        "Write a Python function `is_balanced(text)` that returns True when the brackets (), [] and {} in `text` "
        "are balanced and properly nested, and False otherwise. Other characters are ignored.",
        _balanced,
        (
            ("()",),
            ("([]{})",),
            ("(]",),
            ("((",),
            ("",),
            ("a(b[c]d)e",),
            ("}{",),
            ("([)]",),
            ("{[()()]}",),
            ("((((((()))))))",),
            ("abc)",),
            ("[(])",),
            ("{{}}[",),
            ("x{y[z(w)v]u}t",),
        ),
        _brackets,
    ),
    HandwrittenProblem(
        "roman_to_int",
        "Write a Python function `roman_to_int(text)` that converts a valid Roman numeral (I, V, X, L, C, D, M, "
        "with subtractive forms such as IV and CM) to an integer.",
        _roman,
        (
            ("III",),
            ("IV",),
            ("IX",),
            ("LVIII",),
            ("MCMXCIV",),
            ("XL",),
            ("CDXLIV",),
            ("MMXXIV",),
            ("DCCCXC",),
            ("XCIX",),
            ("MMMCMXCIX",),
            ("CM",),
            ("XIV",),
            ("I",),
        ),
        lambda rng: (_to_roman(int(rng.integers(1, 4000))),),
    ),
    HandwrittenProblem(
        "merge_intervals",
        "Write a Python function `merge_intervals(intervals)` that takes a list of [start, end] pairs (start <= "
        "end) and returns the merged, sorted list of [start, end] pairs; intervals that touch or overlap merge.",
        _merge,
        (
            ([[1, 3], [2, 6], [8, 10]],),
            ([[1, 4], [4, 5]],),
            ([],),
            ([[5, 7]],),
            ([[6, 8], [1, 2]],),
            ([[1, 10], [2, 3], [4, 5]],),
            ([[0, 0], [0, 0]],),
            ([[3, 5], [1, 2], [2, 3]],),
            ([[-5, -1], [-2, 4]],),
            ([[1, 2], [3, 4], [5, 6]],),
            ([[9, 12], [1, 9]],),
            ([[2, 2], [1, 3]],),
        ),
        _intervals,
    ),
    HandwrittenProblem(
        "flatten",
        "Write a Python function `flatten(nested)` that returns the integers of an arbitrarily nested list in "
        "order, as one flat list.",
        _flatten,
        (
            ([1, [2, 3]],),
            ([],),
            ([[[]]],),
            ([[1], [[2]], [[[3]]]],),
            ([1, 2, 3],),
            ([[1, [2, [3, [4]]]], 5],),
            ([[], [1], []],),
            ([0, [-1, [-2]]],),
            ([[7, 8], 9, [[10]]],),
            ([[[5]], 6],),
            ([4, [], [[]], 4],),
        ),
        lambda rng: (_nested(rng),),
    ),
    HandwrittenProblem(
        "top_word",
        "Write a Python function `top_word(text)` that returns the most frequent word in `text`, ignoring case and "
        "any non-letter characters inside words; ties go to the alphabetically first word; '' for no words.",
        _top_word,
        (
            ("the cat and the hat",),
            ("",),
            ("Dog dog CAT",),
            ("b a",),
            ("Hello, hello! world.",),
            ("x y z y x",),
            ("one two three",),
            ("It's it is IT",),
            ("... !!!",),
            ("apple Apple banana BANANA cherry",),
            ("zz zz aa",),
            ("a-b ab",),
        ),
        _sentence,
    ),
)
