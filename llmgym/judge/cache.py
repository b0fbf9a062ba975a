"""Verdicts kept for reuse: :class:`VerdictCache`, an in-memory LRU plus an optional SQLite file."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from llmgym.judge.verdict import Verdict

__all__ = ["VerdictCache"]


class VerdictCache:
    """Verdicts by key: an in-memory LRU and, with ``path``, a SQLite file that outlives the process.

    Thread-safe. Only verdicts that parsed are stored (a fallback is retried next time).
    A copy (``copy.deepcopy``, pickle) has its own lock and, with ``path``, its own connection to the same file.

    Args:
        max_entries: most verdicts kept in memory.
        path: a SQLite file (created if missing) shared by runs and processes; ``None``: memory only.

    Example:
        >>> cache = VerdictCache(max_entries=2)
        >>> cache.put("k", Verdict([7.0], "fine"))
        >>> cache.get("k").scores, cache.get("missing")
        ([7.0], None)
    """

    def __init__(self, max_entries: int = 4096, path: str | Path | None = None):
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.max_entries = max_entries
        self.path = Path(path) if path is not None else None
        self._memory: OrderedDict[str, Verdict] = OrderedDict()
        self._lock = threading.Lock()
        self._db = self._open()

    def _open(self) -> sqlite3.Connection | None:
        if self.path is None:
            return None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
        db.execute("CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, verdict TEXT NOT NULL)")
        db.commit()
        return db

    def __getstate__(self) -> dict[str, Any]:
        # a lock and a SQLite connection cannot be copied: __setstate__ makes new ones
        with self._lock:
            return {**self.__dict__, "_memory": OrderedDict(self._memory), "_lock": None, "_db": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._db = self._open()

    def get(self, key: str) -> Verdict | None:
        """The cached verdict for ``key`` (marked ``cached=True``), or ``None``."""
        with self._lock:
            verdict = self._memory.get(key)
            if verdict is not None:
                self._memory.move_to_end(key)
            elif self._db is not None:
                row = self._db.execute("SELECT verdict FROM verdicts WHERE key = ?", (key,)).fetchone()
                if row is not None:
                    data = json.loads(row[0])
                    verdict = Verdict(data["scores"], data["reasoning"], raw=data["raw"])
                    self._remember(key, verdict)
        if verdict is None:
            return None
        return Verdict(list(verdict.scores), verdict.reasoning, None, verdict.raw, cached=True)

    def put(self, key: str, verdict: Verdict) -> None:
        """Store a verdict that parsed (fallbacks are ignored)."""
        if not verdict.ok:
            return
        with self._lock:
            self._remember(key, verdict)
            if self._db is not None:
                record = json.dumps({"scores": verdict.scores, "reasoning": verdict.reasoning, "raw": verdict.raw})
                self._db.execute("INSERT OR REPLACE INTO verdicts (key, verdict) VALUES (?, ?)", (key, record))
                self._db.commit()

    def _remember(self, key: str, verdict: Verdict) -> None:
        self._memory[key] = verdict
        self._memory.move_to_end(key)
        while len(self._memory) > self.max_entries:
            self._memory.popitem(last=False)

    def close(self) -> None:
        """Close the SQLite file."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
