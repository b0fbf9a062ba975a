"""A byte-offset index over an episodes JSONL file: table rows, filters, sorting and search without loading it.

Holds :class:`EpisodeIndex` and :class:`Query`. The index reads the file once, line by
line, and keeps for each episode only where its line starts and ends and the numbers
the table shows (reward, each component's total, turns, tokens, outcome), in flat
arrays: about 60 bytes an episode plus 8 per reward component. An episode is read
back from its bytes when it is opened. Indexing runs in a background thread
(:meth:`EpisodeIndex.start`), so the first page is served while a large file is
still being read; a file that grows (a run still writing) is read on from where the
index stopped (a last line without its newline once it is a whole episode).

A line that is not an episode (binary garbage, not JSON, cut short, nested too deep, a
seed or reward out of a float's range) is skipped and listed in :attr:`EpisodeIndex.bad_lines` with its line
number and why; the rest of the file is indexed. Only a failure to read the file at all
stops the index (:attr:`EpisodeIndex.error`).

Text search scans the file's bytes for the query (as JSON writes it) and confirms each
candidate by reading its messages, so a query for ``role`` or ``user`` matches only what
the transcript says, never the keys around it.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llmgym.viewer.safe_json import bad_json_reason, parse_json

__all__ = ["EpisodeIndex", "Query", "row_numbers", "transcript_matches", "SORT_KEYS", "OUTCOMES"]

#: Columns the table sorts by (``component:NAME`` sorts by a component's total).
SORT_KEYS = ("index", "seed", "reward", "turns", "tokens", "step")
#: An episode's outcome: a policy or env ``error``, ``solved`` (the final turn's ``solved``
#: component > 0 after termination; where the env has no ``solved`` component, a total
#: reward > 0, as ``summarize`` counts success), else ``failed``.
OUTCOMES = ("solved", "failed", "error")
_BATCH = 2000  # lines read between publishing rows to readers
_SEARCH_BLOCK = 8 << 20  # bytes a text search reads at once
_LISTED_BAD_LINES = 100  # bad lines listed; all are counted (a file of garbage stays small in memory)
_UNFINISHED = object()  # a last line that is not an episode (yet): no newline after it


@dataclass
class Query:
    """What the episodes table shows: filters, order and page.

    Attributes:
        min_reward, max_reward: total reward range (inclusive); ``None`` = open.
        component: a reward component's name; ``component_min``/``component_max`` bound its total.
        outcome: one of :data:`OUTCOMES`, or ``None`` for all.
        text: a case-insensitive substring of the transcript (any message's text, tool-call
            names and arguments); ``""`` for all.
        step: only the training samples of this step; ``None`` for all.
        sort: one of :data:`SORT_KEYS` or ``component:NAME``; ``descending`` reverses it.
        offset, limit: the page.
    """

    min_reward: float | None = None
    max_reward: float | None = None
    component: str | None = None
    component_min: float | None = None
    component_max: float | None = None
    outcome: str | None = None
    text: str = ""
    step: int | None = None
    sort: str = "index"
    descending: bool = False
    offset: int = 0
    limit: int = 50


class EpisodeIndex:
    """Episodes of one JSONL file, found by byte offset.

    Args:
        path: an episodes JSONL file (``llmgym eval``'s ``episodes.jsonl``, a rollout's
            ``jsonl_path``, a training run's ``samples.jsonl``).

    Example:
        >>> import tempfile
        >>> from llmgym.episode import Episode, save_jsonl
        >>> path = Path(tempfile.mkdtemp()) / "e.jsonl"
        >>> save_jsonl([Episode("x", seed=s, turn_rewards=[s / 2]) for s in range(4)], path)
        >>> index = EpisodeIndex(path).build()
        >>> page = index.page(Query(min_reward=0.5, sort="reward", descending=True, limit=2))
        >>> page["total"], [row["seed"] for row in page["rows"]]
        (3, [3, 2])
        >>> index.episode(1)["turn_rewards"]
        [0.5]
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._offsets = array("q")  # where each episode's line starts
        self._lengths = array("q")  # its length in bytes, newline excluded
        self._numbers = {name: array("d") for name in ("seed", "reward", "turns", "tokens", "step", "group_index")}
        self._components: dict[str, array] = {}  # name -> each episode's total (0 where absent)
        self._outcomes = array("b")  # index into OUTCOMES
        self._truncated = array("b")
        self._labels: dict[str, array] = {"env_id": array("i"), "policy": array("i")}
        self._names: dict[str, list[str]] = {"env_id": [], "policy": []}
        self._codes: dict[str, dict[str, int]] = {"env_id": {}, "policy": {}}
        self.read_to = 0  # bytes of the file indexed (complete lines)
        self._bad_count = 0  # complete lines that are not episodes, all of them
        self._bad_lines: list[dict[str, Any]] = []  # the first _LISTED_BAD_LINES of them
        self._torn: dict[str, Any] | None = None  # the last line, not an episode and with no newline yet
        self._line_number = 0  # lines read so far
        self._open_line = False  # the last line read was an episode without its newline
        self._seen = 0  # the file's size when it was last read to its end
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._restart = threading.Lock()  # one refresh starts one thread, however many requests ask
        self.error: str | None = None  # why indexing stopped (the file cannot be read...)

    # -- building -------------------------------------------------------------------

    def start(self) -> EpisodeIndex:
        """Index the file in a background thread; rows appear as they are read."""
        self._done.clear()
        self._thread = threading.Thread(target=self._run, name=f"index {self.path.name}", daemon=True)
        self._thread.start()
        return self

    def build(self) -> EpisodeIndex:
        """Index the file now (what :meth:`start` does, in this thread)."""
        self._done.clear()
        self._run()
        return self

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until indexing finished (an index never started is built now); whether it has."""
        if self._thread is None and not self._done.is_set():
            self.build()
        return self._done.wait(timeout)

    @property
    def indexing(self) -> bool:
        """Whether the background thread is still reading."""
        return not self._done.is_set()

    def refresh(self) -> None:
        """Read what was appended since the file was last read (a run still writing).

        A no-op while indexing, and once indexing failed (:attr:`error`): it would fail again.
        """
        with self._restart:
            if self._done.is_set() and self.error is None and _size(self.path) > self._seen:
                self.start()

    @property
    def bad_lines(self) -> list[dict[str, Any]]:
        """Lines that are not episodes, each ``{"file", "line", "reason"}`` (the first 100 listed).

        An unfinished last line (no newline yet) is listed last while it is one; it is read
        again when the file grows.
        """
        return self._bad_lines + ([self._torn] if self._torn else [])

    @property
    def bad_line_count(self) -> int:
        """How many lines are not episodes (all of them, listed or not)."""
        return self._bad_count + (1 if self._torn else 0)

    def _run(self) -> None:
        try:
            self._read()
        except OSError as err:
            self.error = f"cannot read {self.path}: {err.strerror or err}"
        except Exception as err:  # recorded, so the page says why instead of "indexing" forever
            self.error = f"indexing {self.path} stopped after line {self._line_number}: {type(err).__name__}: {err}"
        finally:
            self._done.set()

    def _read(self) -> None:
        batch: list[tuple[int, int, dict[str, Any]]] = []
        offset = self.read_to
        self._torn = None
        with open(self.path, "rb") as file:
            file.seek(offset)
            for raw in file:
                line, complete = raw.rstrip(b"\r\n"), raw.endswith(b"\n")
                # the newline of a last line indexed without it ends that line, not a new one
                number = self._line_number + (0 if self._open_line else 1)
                if not line.strip() and not complete:
                    break  # trailing blanks: the next line may start here
                row = self._row(line, number, complete) if line.strip() else None
                if row is _UNFINISHED:
                    break  # read it again when the file grows
                if row is not None:
                    batch.append((offset, len(line), row))
                offset += len(raw)
                self._line_number, self._open_line = number, not complete
                if len(batch) >= _BATCH:
                    self._publish(batch, offset)
                    batch = []
            self._seen = file.tell()
        self._publish(batch, offset)

    def _row(self, line: bytes, number: int, complete: bool) -> Any:
        """The table's numbers of one line; ``None`` if it is not an episode (listed in
        :attr:`bad_lines`), ``_UNFINISHED`` if it is also the last line and has no newline yet."""
        try:
            data = parse_json(line)
            if not isinstance(data, dict) or "env_id" not in data:
                kind = "object" if isinstance(data, dict) else type(data).__name__
                raise ValueError(f"not an episode: a JSON {kind} without env_id")
            return row_numbers(data)
        except Exception as err:  # whatever is wrong with one line is that line's problem, not the file's
            reason = bad_json_reason(err)
            if not complete:
                self._torn = {"file": str(self.path), "line": number, "reason": f"unfinished last line: {reason}"}
                return _UNFINISHED
            self._bad_count += 1
            if len(self._bad_lines) < _LISTED_BAD_LINES:
                self._bad_lines.append({"file": str(self.path), "line": number, "reason": reason})
            return None

    def _publish(self, batch: list[tuple[int, int, dict[str, Any]]], read_to: int) -> None:
        with self._lock:
            for offset, length, row in batch:
                count = len(self._offsets)
                self._offsets.append(offset)
                self._lengths.append(length)
                for name, column in self._numbers.items():
                    column.append(row[name])
                for name, value in row["components"].items():
                    if name not in self._components:
                        self._components[name] = array("d", bytes(8 * count))
                    self._components[name].append(value)
                for column in self._components.values():
                    if len(column) == count:
                        column.append(0.0)
                self._outcomes.append(OUTCOMES.index(row["outcome"]))
                self._truncated.append(row["truncated"])
                for name, column in self._labels.items():
                    codes = self._codes[name]
                    if row[name] not in codes:
                        codes[row[name]] = len(self._names[name])
                        self._names[name].append(row[name])
                    column.append(codes[row[name]])
            self.read_to = read_to

    # -- reading --------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def components(self) -> list[str]:
        """The reward components seen so far, sorted."""
        with self._lock:
            return sorted(self._components)

    def status(self) -> dict[str, Any]:
        """How far indexing got: episodes, bytes read of the file's size, lines that are not episodes."""
        return {
            "path": str(self.path),
            "episodes": len(self),
            "bytes_read": self.read_to,
            "bytes": _size(self.path),
            "indexing": self.indexing,
            "bad_lines": self.bad_lines,
            "bad_line_count": self.bad_line_count,
            "error": self.error,
            "components": self.components,
            "steps": sorted({int(s) for s in self._column("step") if not math.isnan(s)}),
        }

    def _column(self, name: str) -> np.ndarray:
        with self._lock:
            if name.startswith("component:"):
                source = self._components.get(name.partition(":")[2])
                return np.array(source if source is not None else array("d", bytes(8 * len(self))), dtype=np.float64)
            if name == "index":
                return np.arange(len(self._offsets), dtype=np.float64)
            if name == "outcome":
                return np.array(self._outcomes, dtype=np.int8)
            return np.array(self._numbers[name], dtype=np.float64)

    def select(self, query: Query) -> np.ndarray:
        """The indices of the episodes that pass ``query``'s filters, in its order.

        Raises:
            ValueError: an unknown sort key, outcome or component.
        """
        if query.sort not in SORT_KEYS and not (
            query.sort.startswith("component:") and query.sort.partition(":")[2] in self.components
        ):
            raise ValueError(f"cannot sort by {query.sort!r}: one of {', '.join(SORT_KEYS)} or component:NAME")
        if query.outcome is not None and query.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {query.outcome!r}: one of {', '.join(OUTCOMES)}")
        if query.component is not None and query.component not in self.components:
            raise ValueError(f"unknown reward component {query.component!r}: one of {', '.join(self.components)}")
        count = len(self)
        keep = np.ones(count, dtype=bool)
        reward = self._column("reward")[:count]
        keep &= _within(reward, query.min_reward, query.max_reward)
        if query.component is not None:
            keep &= _within(
                self._column(f"component:{query.component}")[:count], query.component_min, query.component_max
            )
        if query.outcome is not None:
            keep &= self._column("outcome")[:count] == OUTCOMES.index(query.outcome)
        if query.step is not None:
            keep &= self._column("step")[:count] == query.step
        if query.text:
            keep &= self.search(query.text, count)
        chosen = np.flatnonzero(keep)
        values = self._column(query.sort)[:count][chosen]
        order = np.argsort(-values if query.descending else values, kind="stable")
        return chosen[order]

    def page(self, query: Query) -> dict[str, Any]:
        """One page of table rows: ``{"total": matches, "rows": [...]}`` (see :meth:`rows`)."""
        chosen = self.select(query)
        offset = max(query.offset, 0)
        return {"total": int(chosen.size), "rows": self.rows(chosen[offset : offset + max(query.limit, 0)])}

    def rows(self, indices: np.ndarray | list[int]) -> list[dict[str, Any]]:
        """The table rows of these episodes: index, env, seed, policy, reward, components, turns, tokens, outcome."""
        with self._lock:
            out = []
            for i in (int(i) for i in indices):
                numbers = {name: column[i] for name, column in self._numbers.items()}
                out.append(
                    {
                        "index": i,
                        "env_id": self._names["env_id"][self._labels["env_id"][i]],
                        "policy": self._names["policy"][self._labels["policy"][i]],
                        "seed": _int_or_none(numbers["seed"]),
                        "group_index": _int_or_none(numbers["group_index"]),
                        "step": _int_or_none(numbers["step"]),
                        "reward": numbers["reward"],
                        "turns": int(numbers["turns"]),
                        "tokens": _int_or_none(numbers["tokens"]),
                        "outcome": OUTCOMES[self._outcomes[i]],
                        "truncated": bool(self._truncated[i]),
                        "components": {name: column[i] for name, column in sorted(self._components.items())},
                    }
                )
            return out

    def raw(self, i: int) -> bytes:
        """The JSON line of episode ``i``.

        Raises:
            IndexError: no such episode.
        """
        if not 0 <= i < len(self):
            raise IndexError(f"no episode {i}: the file has {len(self)}")
        with self._lock:
            offset, length = self._offsets[i], self._lengths[i]
        with open(self.path, "rb") as file:
            file.seek(offset)
            return file.read(length)

    def episode(self, i: int) -> dict[str, Any]:
        """Episode ``i`` as the dict its line holds (``NaN`` and ``Infinity``, which strict JSON lacks, as ``None``)."""
        return parse_json(self.raw(i))

    def search(self, text: str, count: int | None = None) -> np.ndarray:
        """A boolean mask over the first ``count`` episodes: whose transcript contains ``text`` (any case)."""
        count = len(self) if count is None else count
        found = np.zeros(count, dtype=bool)
        if count == 0 or not text:
            return found
        with self._lock:
            starts = np.frombuffer(self._offsets, dtype=np.int64)[:count].copy()
            end = self._offsets[count - 1] + self._lengths[count - 1]
        pattern, longest = _byte_pattern(text)
        candidates: set[int] = set()
        with open(self.path, "rb") as file:  # in blocks: memory stays flat however large the file
            position, tail = 0, b""
            while position < end:
                block = file.read(min(_SEARCH_BLOCK, end - position))
                if not block:
                    break
                data = tail + block
                hits = [position - len(tail) + m.start() for m in pattern.finditer(data)]
                candidates.update((np.searchsorted(starts, hits, side="right") - 1).tolist())
                candidates.discard(-1)  # a hit before the first episode (in a line that is not one)
                position += len(block)
                tail = data[-(longest - 1) :] if longest > 1 else b""  # a match may straddle two blocks
        needle = text.casefold()
        for i in sorted(candidates):
            if transcript_matches(self.episode(i).get("messages") or [], needle):
                found[i] = True
        return found


def transcript_matches(messages: list[Any], needle: str) -> bool:
    """Whether ``needle`` (already casefolded) is in a message's text, a tool call's name or its arguments."""
    return any(needle in piece.casefold() for piece in _transcript_text(messages))


def _transcript_text(messages: Any) -> Iterator[str]:
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        for key in ("content", "reasoning_content", "name"):
            if isinstance(message.get(key), str):
                yield message[key]
        if isinstance(message.get("content"), list):  # content parts
            yield from (p["text"] for p in message["content"] if isinstance(p, dict) and isinstance(p.get("text"), str))
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                yield from (str(function.get(key, "")) for key in ("name", "arguments"))


def _byte_pattern(text: str) -> tuple[re.Pattern[bytes], int]:
    """Any way a JSON line can hold ``text`` inside a string, and the longest such form's length in bytes.

    Character by character: lower or upper case (regex ``IGNORECASE`` on bytes folds ASCII
    only), each as raw UTF-8 or as JSON escapes it (``\\u00e9``, ``\\"``).
    """
    pieces, longest = [], 0
    for char in text:
        forms = {
            json.dumps(variant, ensure_ascii=ascii_only)[1:-1].encode("utf-8", "surrogatepass")
            for variant in {char, char.lower(), char.upper()}
            if len(variant) == 1
            for ascii_only in (False, True)
        }
        pieces.append(b"(?:" + b"|".join(re.escape(form) for form in sorted(forms)) + b")")
        longest += max(len(form) for form in forms)
    return re.compile(b"".join(pieces), re.IGNORECASE), longest


def row_numbers(data: dict[str, Any]) -> dict[str, Any]:
    """The table's values of one episode dict (as :meth:`~llmgym.episode.Episode.to_dict` writes it).

    Example:
        >>> row = row_numbers({"env_id": "x", "seed": 3, "turn_rewards": [0.5, 1.0], "terminated": True,
        ...                    "reward_components": [{"solved": 0.0}, {"solved": 1.0}]})
        >>> row["reward"], row["turns"], row["components"], row["outcome"]
        (1.5, 2.0, {'solved': 1.0}, 'solved')

    Raises:
        ValueError: a reward, a total or a number column is out of a float's range (a
            400-digit seed), or a field has the wrong type (also ``TypeError``).
    """
    turn_components = [c for c in data.get("reward_components") or [] if isinstance(c, dict)]
    components: dict[str, float] = {}
    try:
        rewards = [float(r) for r in data.get("turn_rewards") or [] if r is not None]
        for turn in turn_components:
            for name, value in turn.items():
                if isinstance(value, (int, float)):
                    components[name] = components.get(name, 0.0) + float(value)
    except OverflowError:
        raise ValueError("a reward is out of range: an integer too large for a float") from None
    reward = _finite(sum(rewards), "the total reward")
    if not math.isfinite(sum(components.values())):  # one check for all; which one only when it fails
        for name, total in components.items():
            _finite(total, f"{name}'s total")
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    if metadata.get("error"):
        outcome = "error"
    elif any("solved" in turn for turn in turn_components):
        final = turn_components[-1] if turn_components else {}
        outcome = "solved" if data.get("terminated") and (final.get("solved") or 0) > 0 else "failed"
    else:
        outcome = "solved" if reward > 0 else "failed"
    tokens = metadata.get("generated_tokens")
    if tokens is None and data.get("mask"):
        tokens = sum(data["mask"])
    return {
        "env_id": str(data.get("env_id")),
        "policy": str(data.get("policy") or ""),
        "seed": _float(data.get("seed"), "seed"),
        "group_index": _float(metadata.get("group_index"), "group_index"),
        "step": _float(metadata.get("train_step"), "train_step"),
        "reward": reward,
        "turns": float(len(rewards)),
        "tokens": _float(tokens, "generated_tokens"),
        "components": components,
        "outcome": outcome,
        "truncated": bool(data.get("truncated")),
    }


def _float(value: Any, what: str) -> float:
    """A number for a float column; ``nan`` stands for none."""
    return _finite(value, what) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def _finite(value: Any, what: str) -> float:
    """``value`` as a finite float (the API's JSON and the table's sorting need one).

    Raises:
        ValueError: it is out of a float's range, or not a number.
    """
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float: say how large, not the digits
        raise ValueError(f"{what} is out of range: a {len(str(abs(value)))}-digit number") from None
    if not math.isfinite(number):
        raise ValueError(f"{what} is out of range: reads as {value}")
    return number


def _int_or_none(value: float) -> int | None:
    return int(value) if math.isfinite(value) else None


def _size(path: Path) -> int:
    """The file's size; 0 if it is gone (a file removed while the page is open is no server error)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _within(values: np.ndarray, low: float | None, high: float | None) -> np.ndarray:
    keep = np.ones(values.shape, dtype=bool)
    if low is not None:
        keep &= values >= low
    if high is not None:
        keep &= values <= high
    return keep
