"""An environment's plain-data state, and where two such states differ.

Holds :func:`plain_state` (copies of the attributes of an environment that are
plain data: numbers, strings, arrays and containers of them) and
:func:`first_difference` (where two nested values differ, NaN equal to NaN).
The ``determinism`` check of :mod:`llmgym.checker` compares two runs with both:
hidden state the actions did not reveal (a target drawn with ``random``) shows
up there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from llmgym.parsing import clip_text

__all__ = ["plain_state", "first_difference"]

_NOT_PLAIN = object()


def plain_state(env: Any) -> dict[str, Any]:
    """Copies of the attributes of ``env`` that are plain data (numbers, strings, arrays, containers of them).

    Objects (random generators, sandboxes, connections, tools) are left out: only
    data two runs with the same seed must agree on is compared.

    Example:
        >>> class Env:
        ...     def __init__(self):
        ...         self.secret, self.guesses, self.rng = "crane", ["slate"], np.random.default_rng(0)
        >>> plain_state(Env())
        {'secret': 'crane', 'guesses': ['slate']}
    """
    state = {}
    for name, value in getattr(env, "__dict__", {}).items():  # a __slots__ env has no plain state to compare
        copied = _plain_copy(value, 0)
        if copied is not _NOT_PLAIN:
            state[name] = copied
    return state


def _plain_copy(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, (bool, int, float, str, bytes, np.generic)):
        return value
    if depth > 32:
        return _NOT_PLAIN
    if isinstance(value, np.ndarray):
        return value.copy() if value.dtype != object else _NOT_PLAIN
    if type(value) in (list, tuple, set, frozenset):
        items = [_plain_copy(item, depth + 1) for item in value]
        if any(item is _NOT_PLAIN for item in items):
            return _NOT_PLAIN
        return type(value)(items) if type(value) in (list, tuple) else frozenset(items)
    if type(value) is dict:
        copied = {}
        for key, item in value.items():
            item = _plain_copy(item, depth + 1)
            if item is _NOT_PLAIN or _plain_copy(key, depth + 1) is _NOT_PLAIN:
                return _NOT_PLAIN
            copied[key] = item
        return copied
    return _NOT_PLAIN


def first_difference(a: Any, b: Any, path: str = "") -> str:
    """Where two nested values differ ('' when they are equal).

    Example:
        >>> first_difference({"board": [1, 2]}, {"board": [1, 3]}, "step 1 obs")
        "step 1 obs['board'][1]: 2 vs 3"
        >>> first_difference({"score": float("nan")}, {"score": float("nan")})
        ''
    """
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        try:
            same = np.array_equal(a, b, equal_nan=True)  # NaN where both runs hold NaN is the same state
        except TypeError:  # equal_nan on a non-numeric dtype
            same = np.array_equal(a, b)
        return "" if same else f"{path or 'value'}: arrays differ"
    if type(a) is not type(b):
        return f"{path or 'value'}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return f"{path or 'info'}: keys {sorted(a)} vs {sorted(b)}"
        return next((d for k in a if (d := first_difference(a[k], b[k], f"{path}[{k!r}]"))), "")
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{path or 'value'}: {len(a)} vs {len(b)} entries"
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := first_difference(x, y, f"{path}[{i}]"))), "")
    if isinstance(a, (float, complex, np.generic)) and a != a and b != b:  # NaN (np.float32 too), NaT: same state
        return ""
    return "" if a == b else f"{path or 'value'}: {clip_text(repr(a), 60)} vs {clip_text(repr(b), 60)}"
