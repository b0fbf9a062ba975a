"""A scripted CodeTests player: recognises the problem, writes a correct function, checks it, submits.

The honest baseline for tests and benchmarks. It reads only the spec in the
observation (the function name and the family's parameter) and writes the
solution a competent programmer would; it never looks at hidden tests.
"""

from __future__ import annotations

import json
import re
import zlib

__all__ = ["CodeTestsSolver", "FlawedCodeTestsSolver", "write_solution"]

_SOLUTIONS = {
    "shift_letters": (
        "def shift_letters(text):\n"
        "    return ''.join(chr((ord(c) - 97 + {p}) % 26 + 97) if 'a' <= c <= 'z' else c for c in text)\n"
    ),
    "digit_sum": (
        "def digit_sum(n):\n"
        "    total = 0\n"
        "    while n:\n"
        "        n, d = divmod(n, {p})\n"
        "        total += d\n"
        "    return total\n"
    ),
    "count_multiples": (
        "def count_multiples(lo, hi):\n    return sum(1 for x in range(lo, hi + 1) if x % {p} == 0 or x % {q} == 0)\n"
    ),
    "kth_largest": (
        "def kth_largest(values):\n"
        "    d = sorted(set(values), reverse=True)\n"
        "    return d[{p} - 1] if len(d) >= {p} else None\n"
    ),
    "rotate": (
        "def rotate(values):\n"
        "    if not values:\n"
        "        return []\n"
        "    k = {p} % len(values)\n"
        "    return values[-k:] + values[:-k] if k else list(values)\n"
    ),
    "run_length": (
        "from itertools import groupby\n"
        "def run_length(text):\n"
        "    return ''.join(c + {p} + str(len(list(g))) for c, g in groupby(text))\n"
    ),
    "is_balanced": (
        "def is_balanced(text):\n"
        "    pairs, stack = {{')': '(', ']': '[', '}}': '{{'}}, []\n"
        "    for c in text:\n"
        "        if c in '([{{':\n"
        "            stack.append(c)\n"
        "        elif c in pairs and (not stack or stack.pop() != pairs[c]):\n"
        "            return False\n"
        "    return not stack\n"
    ),
    "roman_to_int": (
        "def roman_to_int(text):\n"
        "    v = dict(I=1, V=5, X=10, L=50, C=100, D=500, M=1000)\n"
        "    return sum(-v[c] if i + 1 < len(text) and v[text[i + 1]] > v[c] else v[c] for i, c in enumerate(text))\n"
    ),
    "merge_intervals": (
        "def merge_intervals(intervals):\n"
        "    out = []\n"
        "    for s, e in sorted(intervals):\n"
        "        if out and s <= out[-1][1]:\n"
        "            out[-1][1] = max(out[-1][1], e)\n"
        "        else:\n"
        "            out.append([s, e])\n"
        "    return out\n"
    ),
    "flatten": (
        "def flatten(nested):\n"
        "    out = []\n"
        "    for x in nested:\n"
        "        out.extend(flatten(x) if isinstance(x, list) else [x])\n"
        "    return out\n"
    ),
    "top_word": (
        "from collections import Counter\n"
        "def top_word(text):\n"
        "    words = [''.join(c for c in w if c.isalpha()) for w in text.lower().split()]\n"
        "    counts = Counter(w for w in words if w)\n"
        "    return min(counts, key=lambda w: (-counts[w], w)) if counts else ''\n"
    ),
}
_PARAMS = {
    "shift_letters": r"moved (\d+) places",
    "digit_sum": r"written in base (\d+)",
    "count_multiples": r"divisible by (\d+) or by (\d+)",
    "kth_largest": r"returns the (\d+)-th largest",
    "rotate": r"rotated (\d+) places",
    "run_length": r"the separator ('[^']*')",
}


def write_solution(spec: str) -> str | None:
    """Source code solving the problem in ``spec`` (None when the problem is not recognised).

    Example:
        >>> print(write_solution("Write a Python function `digit_sum(n)` ... written in base 7."), end="")
        def digit_sum(n):
            total = 0
            while n:
                n, d = divmod(n, 7)
                total += d
            return total
    """
    match = re.search(r"function `(\w+)\(", spec)
    if not match or match.group(1) not in _SOLUTIONS:
        return None
    name = match.group(1)
    params: tuple[str, ...] = ()
    if name in _PARAMS:
        found = re.search(_PARAMS[name], spec)
        if not found:
            return None
        params = found.groups()
    return _SOLUTIONS[name].format(p=params[0] if params else "", q=params[1] if len(params) > 1 else "")


class CodeTestsSolver:
    """Write the solution, run it on the examples once, then submit it."""

    def __init__(self) -> None:
        self.code: str | None = None
        self.checked = False

    def act(self, observation: str) -> str:
        """The next action: a spec starts a new problem; an examples report leads to the submission."""
        solution = write_solution(observation)
        if solution is not None:
            self.code, self.checked = solution, False
        code = self.code or "def solution():\n    return None\n"
        if not self.checked:
            self.checked = True
            return _call("run_examples", code)
        return _call("submit", code)


# What a flawed programmer appends to a correct solution, one per problem: nothing, a wrong answer for some
# inputs, a crash, an endless loop, a flood of output, a fork bomb, a file past the size limit.
_FLAWS = (
    "",
    "\n_right = {name}\n{name} = lambda *args: None if len(repr(args)) % 2 else _right(*args)\n",
    "\nraise RuntimeError('bug')\n",
    "\nwhile True: pass\n",
    "\nwhile True: print('x' * 1000)\n",
    "\nimport os\nwhile True:\n    try: os.fork()\n    except OSError: pass\n",
    "\nopen('dump', 'wb').write(b'x' * 64 * 1024 * 1024)\n",
)


class FlawedCodeTestsSolver(CodeTestsSolver):
    """The solver with one flaw per problem (chosen by the spec's checksum): sometimes none, else a wrong answer,
    a crash, an endless loop, a flood of output, a fork bomb or a huge file.

    Its rewards differ from seed to seed, so two sandboxes that grade alike give the same rewards on the same
    seeds only if each contains every flaw the same way (``docs/sandbox.md`` compares the backends with it).
    """

    def act(self, observation: str) -> str:
        solution = write_solution(observation)
        if solution is not None:
            name = re.search(r"function `(\w+)\(", observation).group(1)
            flaw = _FLAWS[zlib.crc32(observation.encode()) % len(_FLAWS)]
            observation = ""  # the parent keeps the code it has; give it the flawed one instead
            self.code, self.checked = solution + flaw.format(name=name), False
        return super().act(observation)


def _call(name: str, code: str) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": {"code": code}}) + "</tool_call>"
