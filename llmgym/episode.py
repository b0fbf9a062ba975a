"""Episode records: what happened in one episode, in a form trainers and files share.

Holds :class:`Episode` and JSONL helpers (:func:`save_jsonl`,
:func:`load_jsonl`, :class:`JSONLWriter`). An episode keeps the chat
messages, the reward of every turn and its components, and, when the policy
provided them, the token ids it generated with a mask (1 = policy token,
0 = prompt/env/tool token) and their log-probs. Timing lives here, never in
``info``, so environments stay deterministic.

Files are strict JSON (no ``NaN``/``Infinity``), and a float strict JSON cannot
hold never loses an episode: a non-finite log-prob is written as
:data:`LOGPROB_FLOOR`, any other non-finite float as ``null``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Episode", "save_jsonl", "load_jsonl", "iter_jsonl", "JSONLWriter", "LOGPROB_FLOOR", "floor_logprobs"]

#: What a log-prob that is not a finite number (``-inf`` for a token the policy gave probability 0)
#: is recorded as: vLLM's stand-in, which ``llmgym serve`` answers too. A reader always gets a
#: number, and a trainer's importance weight ``exp(old - generator)`` for the token hits its cap.
LOGPROB_FLOOR = -9999.0


def floor_logprobs(logprobs: list[float]) -> list[float]:
    """``logprobs`` with every value that is not a finite number replaced by :data:`LOGPROB_FLOOR`.

    Example:
        >>> floor_logprobs([0.0, -0.5, float("-inf"), float("nan")])
        [0.0, -0.5, -9999.0, -9999.0]
    """
    return [x if math.isfinite(x) else LOGPROB_FLOOR for x in logprobs]


@dataclass
class Episode:
    """One episode.

    Attributes:
        env_id: the registered id (``llmgym/Wordle-v0``).
        seed: the seed given to ``reset``.
        messages: the chat, OpenAI format.
        tools: the tool schemas the agent was offered.
        turn_rewards: the reward of each turn.
        reward_components: each turn's unweighted components by name.
        terminated: the task ended (solved, failed, answered).
        truncated: a turn or token budget ended it.
        token_ids: prompt and generated tokens of the whole episode, in order.
        mask: 1 for tokens the policy generated, 0 for the rest; same length as ``token_ids``.
        logprobs: the policy's log-prob of each token (0.0 where ``mask`` is 0); written to JSON
            with :data:`LOGPROB_FLOOR` for a value that is not a finite number.
        turn_spans: ``[start, end)`` of each turn's generated tokens in ``token_ids``.
        group: which GRPO group the episode belongs to (episodes of one seed share it).
        policy: a name for the policy that played.
        timing: seconds spent in the env, in the policy, in total.
        metadata: anything else (model name, sampling settings, thinking tokens...).
    """

    env_id: str
    seed: int | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    reward_components: list[dict[str, float]] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    token_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    group: int | None = None
    policy: str = ""
    timing: dict[str, float] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def total_reward(self) -> float:
        """The sum of the turn rewards."""
        return float(sum(self.turn_rewards))

    @property
    def num_turns(self) -> int:
        """How many turns the agent took."""
        return len(self.turn_rewards)

    def component_totals(self) -> dict[str, float]:
        """Each reward component summed over the turns."""
        totals: dict[str, float] = {}
        for components in self.reward_components:
            for name, value in components.items():
                totals[name] = totals.get(name, 0.0) + value
        return totals

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        data = dataclasses.asdict(self)
        data["turn_spans"] = [list(span) for span in self.turn_spans]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Episode:
        """Rebuild an episode from :meth:`to_dict` output.

        Raises:
            ValueError: a key is unknown or ``env_id`` is missing.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown episode fields {sorted(unknown)}")
        if "env_id" not in data:
            raise ValueError("an episode needs env_id")
        data = dict(data)
        data["turn_spans"] = [tuple(span) for span in data.get("turn_spans", [])]
        return cls(**data)

    def to_json(self) -> str:
        """One line of strict JSON (non-ASCII kept as is, unless the text cannot be UTF-8, e.g. a lone surrogate).

        A log-prob that is not a finite number is written as :data:`LOGPROB_FLOOR`,
        any other non-finite float (in ``timing``, ``metadata``...) as ``null``;
        the episode itself is left as it is.

        Example:
            >>> Episode.from_json(Episode("x", messages=[{"content": "\\ud800 é"}]).to_json()).messages
            [{'content': '\\ud800 é'}]
            >>> line = Episode("x", logprobs=[-0.5, float("-inf")], timing={"wall_s": float("nan")}).to_json()
            >>> json.loads(line)["logprobs"], json.loads(line)["timing"]
            ([-0.5, -9999.0], {'wall_s': None})
        """
        data = self.to_dict()
        try:
            return _dumps(data)
        except ValueError:  # a NaN or infinity somewhere: strict JSON has no such numbers
            data["logprobs"] = floor_logprobs(data["logprobs"])
            return _dumps(_finite(data))

    @classmethod
    def from_json(cls, line: str) -> Episode:
        """Read one line of :meth:`to_json` output.

        Example:
            >>> ep = Episode("llmgym/Wordle-v0", seed=3, turn_rewards=[0.5, 1.0])
            >>> Episode.from_json(ep.to_json()) == ep, ep.total_reward
            (True, 1.5)
        """
        return cls.from_dict(json.loads(line))


def _dumps(data: dict[str, Any]) -> str:
    """``data`` as one line of strict JSON, UTF-8 safe.

    Raises:
        ValueError: ``data`` holds a NaN or an infinity.
    """
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, default=_number)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from an agent: escape them so the file stays valid UTF-8
        text = json.dumps(data, ensure_ascii=True, allow_nan=False, default=_number)
    return text


def _number(value: Any) -> bool | int | float | list[Any] | None:
    """What ``json`` calls for a type it does not know: a numpy scalar (``np.float32``, ``np.bool_``)
    becomes a plain value, a numpy array a (nested) list.

    Raises:
        TypeError: ``value`` is not a number, a numpy bool or a numpy array.
    """
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.ndarray):
        return _finite(value.tolist())
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return _finite(float(value))
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _finite(value: Any) -> Any:
    """``value`` with every float that is not a finite number, at any depth, replaced by ``None``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


class JSONLWriter:
    """Appends episodes to a JSONL file, one flushed line each, so a crash loses nothing.

    Use as a context manager; ``append=True`` continues an existing file.
    """

    def __init__(self, path: str | os.PathLike[str], append: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a" if append else "w", encoding="utf-8")

    def write(self, episode: Episode) -> None:
        """Write one episode and flush it to disk."""
        self._file.write(episode.to_json() + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> JSONLWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def save_jsonl(episodes: list[Episode], path: str | os.PathLike[str]) -> None:
    """Write episodes to ``path`` (replacing it), one JSON line each."""
    with JSONLWriter(path, append=False) as writer:
        for episode in episodes:
            writer.write(episode)


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[Episode]:
    """Episodes from a JSONL file, skipping a last line cut short by a crash.

    A line cut short is the start of a line :class:`JSONLWriter` writes (``{"env_id": ...``)
    that is not valid JSON and has no newline after it: the writer ends every line with one.

    Raises:
        ValueError: a line is not a valid episode (or not UTF-8), unless it is the last one, cut short.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "e.jsonl"
        >>> _ = path.write_text(Episode("x", seed=1).to_json() + '\\n{"env_id": "x", "se')
        >>> [e.seed for e in iter_jsonl(path)]
        [1]
        >>> _ = path.write_text('{not json\\n')  # one line, not JSON: not a cut-short write, which has no newline
        >>> try:
        ...     list(iter_jsonl(path))
        ... except ValueError as err:
        ...     print(str(err).split("/")[-1][:27])
        e.jsonl:1: not an episode (
    """
    with open(path, "rb") as file:
        lines = file.read().split(b"\n")
    unterminated = len(lines)  # the last piece has no newline after it (empty when the file ends with one)
    while lines and not lines[-1].strip():
        lines.pop()
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        cut_short = number == unterminated
        try:
            yield Episode.from_json(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            if cut_short and _starts_an_episode_line(raw):
                return  # the run was killed mid-write (maybe mid-character); the episode is played again on resume
            raise ValueError(f"{path}:{number}: not an episode ({err})") from None
        except (ValueError, TypeError) as err:
            raise ValueError(f"{path}:{number}: not an episode ({err})") from None


def _starts_an_episode_line(raw: bytes) -> bool:
    """Whether ``raw`` may be the beginning of a :meth:`Episode.to_json` line (``env_id`` is its first key)."""
    start = b'{"env_id": '
    return raw.startswith(start) or start.startswith(raw)


def load_jsonl(path: str | os.PathLike[str]) -> list[Episode]:
    """All episodes in a JSONL file."""
    return list(iter_jsonl(path))
