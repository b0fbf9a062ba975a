"""JSON the viewer reads from files it did not write, and sends on as strict JSON whatever they held.

Holds :func:`parse_json`, :func:`sendable`, :func:`bad_json_reason` and :data:`MAX_DEPTH`.
``json.loads`` accepts values the viewer cannot send on, so one line holding such a value
would break every request that touches it:

- nesting deep enough that writing the value again (FastAPI walks it recursively) runs
  out of stack; 5,000 levels already fail ``json.loads`` itself. :func:`parse_json`
  refuses more than :data:`MAX_DEPTH` levels, so the line is skipped as not an episode.
- ``NaN`` and ``Infinity`` (Python's ``json.dumps`` writes them for a ``nan`` or ``inf``
  float, e.g. a diverged loss): :func:`parse_json` reads them as ``None``, a missing value.
- a number out of a float's range (``1e400``, which Python reads as ``inf``) and an
  unpaired surrogate escape (``"\\ud800"``, which :meth:`~llmgym.episode.Episode.to_json`
  writes for text that is not Unicode): strict JSON and UTF-8 cannot hold them.
  :func:`sendable` makes them ``None`` and U+FFFD once an answer is found to hold one;
  looking for them in every line read would slow down every line for values almost
  never there.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np

__all__ = ["parse_json", "sendable", "bad_json_reason", "MAX_DEPTH"]

#: Deepest nesting read (an episode line nests about 6 deep: messages, a message, its
#: tool calls, a call, its function); FastAPI's encoder needs about one stack frame a level.
MAX_DEPTH = 100
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_SURROGATE = re.compile("[\ud800-\udfff]")  # json.loads joins paired ones, so any left is unpaired


def parse_json(raw: bytes) -> Any:
    """The JSON value of ``raw`` (UTF-8), ``NaN`` and ``Infinity`` read as ``None``.

    Raises:
        ValueError: ``raw`` is not UTF-8, not JSON, or nests more than :data:`MAX_DEPTH`
            levels (:func:`bad_json_reason` says which, briefly).

    Example:
        >>> parse_json(b'{"loss": NaN, "seed": 3}')
        {'loss': None, 'seed': 3}
        >>> parse_json(b"[" * 101 + b"]" * 101)
        Traceback (most recent call last):
        ...
        ValueError: nested more than 100 levels deep
    """
    text = raw.decode("utf-8").removeprefix("\ufeff")  # UTF-8 only, as JSON Lines are; a BOM is allowed
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _depth(raw) > MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
    return json.loads(text, parse_constant=_none)


def sendable(value: Any) -> Any:
    """``value`` (as :func:`parse_json` reads it) with every non-finite float ``None`` and every
    unpaired surrogate U+FFFD, so strict JSON in UTF-8 can hold it.

    Example:
        >>> sendable({"seed": float("inf"), "text": "a\\ud800b"})
        {'seed': None, 'text': 'a�b'}
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {sendable(key): sendable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [sendable(item) for item in value]
    return value


def bad_json_reason(err: BaseException) -> str:
    """A short reason (at most 120 characters) for ``err``, raised reading one line."""
    if isinstance(err, json.JSONDecodeError):
        text = f"not JSON: {err.msg} (column {err.colno})"
    elif isinstance(err, UnicodeDecodeError):
        text = f"not UTF-8 text: byte 0x{err.object[err.start]:02x} at column {err.start + 1}"
    elif isinstance(err, RecursionError):
        text = "nested too deep to read"
    else:
        text = str(err) or type(err).__name__
    return text[:120]


def _depth(raw: bytes) -> int:
    """How deep ``raw``'s arrays and objects nest (brackets inside strings left out)."""
    brackets = np.frombuffer(_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS), dtype=np.uint8)
    steps = np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1)
    return int(np.cumsum(steps).max(initial=0))


def _none(literal: str) -> None:
    return None
