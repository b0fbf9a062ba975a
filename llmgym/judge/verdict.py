"""A judge's verdict and its strict parsing.

Holds :class:`Verdict` (the scores, the reasoning, why it fell back),
:data:`MAX_SCORE` (scores run from 0 to 10), and :func:`parse_verdict` /
:func:`parse_group_verdict`, which accept exactly one JSON object,
``{"reasoning": str, "score": 0..10}`` (group: ``"scores": [G numbers]``),
validated by pydantic, and raise ``ValueError`` saying why for anything else.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pydantic

from llmgym.parsing import without_leading_thinking

__all__ = ["MAX_SCORE", "Verdict", "parse_verdict", "parse_group_verdict"]

MAX_SCORE = 10.0

_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.DOTALL)
_Score = pydantic.confloat(ge=0.0, le=MAX_SCORE, allow_inf_nan=False)


class _SingleVerdict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    reasoning: str
    score: _Score  # type: ignore[valid-type]


class _GroupVerdict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    reasoning: str
    scores: list[_Score]  # type: ignore[valid-type]


@dataclass
class Verdict:
    """A judge's decision.

    Attributes:
        scores: the score of each graded episode, in ``[0, 10]`` (one for :class:`LLMJudge`).
        reasoning: the judge's justification ("" on a fallback).
        error: why the verdict fell back to the default score (``None`` when it parsed).
        raw: the judge's reply text, as it came.
        cached: the verdict came from the cache.
    """

    scores: list[float]
    reasoning: str = ""
    error: str | None = None
    raw: str = ""
    cached: bool = False

    @property
    def score(self) -> float:
        """The first (for a single judge: the only) score."""
        return self.scores[0]

    @property
    def ok(self) -> bool:
        """True when the judge's reply parsed."""
        return self.error is None


def _strip_reply(text: str) -> str:
    text = without_leading_thinking(text).strip()  # only a leading block: the verdict's JSON may quote the tags
    fenced = _FENCE.match(text)
    return fenced.group(1).strip() if fenced else text


def _describe(err: pydantic.ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'reply'}: {e['msg']}" for e in err.errors()[:3])


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict, refusing a repeated key (a plain dict would keep the last one silently)."""
    keys = [key for key, _ in pairs]
    repeated = next((key for key in keys if keys.count(key) > 1), None)
    if repeated is not None:
        raise ValueError(f"invalid verdict: the key {repeated!r} appears more than once")
    return dict(pairs)


def _load_verdict(text: str, model: type[pydantic.BaseModel]) -> Any:
    """The reply as ``model``, or a ValueError saying why not."""
    try:
        data = json.loads(_strip_reply(text), object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as err:
        raise ValueError(f"invalid verdict: reply: not JSON: {err}") from None
    except RecursionError:  # absurdly deep nesting: not a verdict either
        raise ValueError("invalid verdict: reply: nested too deeply") from None
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as err:
        raise ValueError(f"invalid verdict: {_describe(err)}") from None


def parse_verdict(text: str) -> Verdict:
    """Parse a single-episode verdict strictly.

    Accepted: exactly ``{"reasoning": str, "score": number in [0, 10]}``, with
    optional surrounding whitespace, one ```` ```json ```` fence, or a leading
    ``<think>...</think>`` block. Anything else is an error, a repeated key
    included (``{"score": 1, "score": 10}`` has no one score).

    Raises:
        ValueError: the reply is not such an object (the message says why).

    Example:
        >>> parse_verdict('{"reasoning": "correct", "score": 9}').score
        9.0
        >>> parse_verdict('{"reasoning": "x", "score": "10"}')
        Traceback (most recent call last):
        ...
        ValueError: invalid verdict: score: Input should be a valid number
    """
    verdict = _load_verdict(text, _SingleVerdict)
    return Verdict([float(verdict.score)], verdict.reasoning, raw=text)


def parse_group_verdict(text: str, group_size: int) -> Verdict:
    """Parse a group verdict strictly: ``{"reasoning": str, "scores": [group_size numbers in [0, 10]]}``.

    As for :func:`parse_verdict`, a repeated key is an error.

    Raises:
        ValueError: the reply is not such an object, or has the wrong number of scores.

    Example:
        >>> parse_group_verdict('{"reasoning": "b is best", "scores": [2, 9.5]}', 2).scores
        [2.0, 9.5]
    """
    verdict = _load_verdict(text, _GroupVerdict)
    if len(verdict.scores) != group_size:
        raise ValueError(f"invalid verdict: {len(verdict.scores)} scores for {group_size} transcripts")
    return Verdict([float(s) for s in verdict.scores], verdict.reasoning, raw=text)
