"""What ``llmgym view PATH [PATH]`` opens: episodes files, eval folders, training run folders, and a comparison.

Holds :class:`Viewer` (the data behind the page: one or two episode sources, a run's
metrics, an eval's summary), :class:`EpisodeSource`, :func:`open_source` and
:class:`ViewerError`.

A PATH is one of:

- an episodes JSONL file (a rollout's ``jsonl_path``, ``llmgym play --out``);
- an ``llmgym eval --out`` folder: ``episodes.jsonl``, with ``summary.json`` beside it;
- an ``llmgym league --out`` folder: ``episodes.jsonl``, with ``league.json`` (the standings) beside it;
- an ``llmgym train grpo --out`` folder: ``metrics.jsonl`` (the curves), ``samples.jsonl``
  (each step's sample episodes with their token advantages) and ``config.json``.

Two PATHs are compared: their episodes are paired by (env id, seed), and the seeds
where the mean rewards differ most come first.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llmgym.viewer.index import EpisodeIndex
from llmgym.viewer.safe_json import parse_json

__all__ = ["Viewer", "EpisodeSource", "ViewerError", "open_source"]


class ViewerError(ValueError):
    """A path the viewer cannot show, with what it expected there."""


@dataclass
class EpisodeSource:
    """One path given to the viewer.

    Attributes:
        label: how the page names it (the folder or file name).
        path: what was given.
        kind: ``episodes`` (a JSONL file), ``eval`` (an eval folder) or ``run`` (a training run folder).
        index: its episodes (a run's ``samples.jsonl``), or ``None`` for a run without samples.
        summary: an eval folder's ``summary.json``.
        league: a league folder's ``league.json``.
        metrics_path: a run's ``metrics.jsonl``.
        config: a run's ``config.json``.
    """

    label: str
    path: Path
    kind: str
    index: EpisodeIndex | None = None
    summary: dict[str, Any] | None = None
    league: dict[str, Any] | None = None
    metrics_path: Path | None = None
    config: dict[str, Any] | None = None

    def metrics(self) -> list[dict[str, Any]]:
        """A run's metrics, one dict per step.

        Lines the page cannot show (not JSON objects, a torn last one, see
        :func:`~llmgym.viewer.safe_json.parse_json`) are skipped; a ``NaN`` metric is ``None``.
        """
        if self.metrics_path is None or not self.metrics_path.is_file():
            return []
        rows = []
        for line in self.metrics_path.read_bytes().splitlines():
            try:
                row = parse_json(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(row, dict):
                rows.append(row)
        return rows


def open_source(path: str | os.PathLike[str]) -> EpisodeSource:
    """The source at ``path`` (see the module docstring), its episodes not yet indexed.

    Raises:
        ViewerError: the path does not exist, or is a folder with neither ``episodes.jsonl``
            nor ``metrics.jsonl``.
    """
    path = Path(path)
    if path.is_file():
        return EpisodeSource(path.name, path, "episodes", EpisodeIndex(path))
    if not path.is_dir():
        raise ViewerError(
            f"{path} does not exist: give an episodes .jsonl file, an eval --out or a training run folder"
        )
    label = path.resolve().name
    if (path / "metrics.jsonl").is_file():
        samples = path / "samples.jsonl"
        return EpisodeSource(
            label,
            path,
            "run",
            EpisodeIndex(samples) if samples.is_file() else None,
            metrics_path=path / "metrics.jsonl",
            config=_json_object(path / "config.json"),
        )
    if (path / "episodes.jsonl").is_file():
        return EpisodeSource(
            label,
            path,
            "eval",
            EpisodeIndex(path / "episodes.jsonl"),
            summary=_json_object(path / "summary.json"),
            league=_json_object(path / "league.json"),
        )
    raise ViewerError(
        f"{path} holds neither episodes.jsonl (an `llmgym eval --out` folder) nor metrics.jsonl "
        "(an `llmgym train grpo --out` folder); give one of those or an episodes .jsonl file"
    )


def _json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or ``None`` if it is missing or not one the page can show."""
    try:
        data = parse_json(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


@dataclass
class Viewer:
    """The data behind one page: one source, or two to compare.

    Args:
        paths: one or two paths (see :func:`open_source`).

    Raises:
        ViewerError: a path cannot be shown, there are more than two, or one of two compared
            sources has no episodes.
    """

    paths: list[str | os.PathLike[str]]
    sources: list[EpisodeSource] = field(init=False)

    def __post_init__(self) -> None:
        if not 1 <= len(self.paths) <= 2:
            raise ViewerError(f"give one path to view or two to compare, not {len(self.paths)}")
        self.sources = [open_source(p) for p in self.paths]
        if len(self.sources) == 2:
            for source in self.sources:
                if source.index is None:
                    raise ViewerError(f"{source.path} has no episodes to compare (a run without samples.jsonl)")
            if self.sources[0].label == self.sources[1].label:
                self.sources[1].label += " (2)"

    def start(self) -> Viewer:
        """Start indexing every source in the background."""
        for source in self.sources:
            if source.index is not None:
                source.index.start()
        return self

    def wait(self) -> Viewer:
        """Wait until every source is indexed."""
        for source in self.sources:
            if source.index is not None:
                source.index.wait()
        return self

    def index(self, source: int) -> EpisodeIndex:
        """The episodes of source number ``source``.

        Raises:
            ViewerError: no such source, or it has no episodes.
        """
        if not 0 <= source < len(self.sources) or self.sources[source].index is None:
            raise ViewerError(f"no episodes in source {source}")
        return self.sources[source].index

    def info(self) -> dict[str, Any]:
        """What the page needs to lay itself out: the sources, their indexing progress, summary, league and config."""
        for source in self.sources:
            if source.index is not None:
                source.index.refresh()
        return {
            "title": " vs ".join(s.label for s in self.sources),
            "compare": len(self.sources) == 2,
            "sources": [
                {
                    "label": s.label,
                    "path": str(s.path),
                    "kind": s.kind,
                    "episodes": s.index.status() if s.index is not None else None,
                    "summary": s.summary,
                    "league": s.league,
                    "config": s.config,
                    "has_metrics": s.metrics_path is not None,
                }
                for s in self.sources
            ],
        }

    def compare(self, offset: int = 0, limit: int = 50) -> dict[str, Any]:
        """The seeds both sources played, the largest difference in mean reward first.

        Returns ``{"total", "only_first", "only_second", "indexing", "rows"}``; a row holds
        ``env_id``, ``seed``, and per source (``a``, ``b``) the ``mean`` reward, ``solved``
        fraction and the episode ``indices``, and ``diff`` = b's mean - a's.

        Raises:
            ViewerError: fewer than two sources.
        """
        if len(self.sources) != 2:
            raise ViewerError("compare needs two paths: llmgym view A B")
        first, second = (_by_seed(self.index(i)) for i in (0, 1))
        shared = first.keys() & second.keys()
        rows = []
        for key in shared:
            a, b = first[key], second[key]
            rows.append({"env_id": key[0], "seed": key[1], "a": a, "b": b, "diff": b["mean"] - a["mean"]})
        rows.sort(key=lambda r: (-abs(r["diff"]), r["env_id"], r["seed"]))
        return {
            "total": len(rows),
            "only_first": len(first.keys() - shared),
            "only_second": len(second.keys() - shared),
            "indexing": any(self.index(i).indexing for i in (0, 1)),
            "rows": rows[max(offset, 0) : max(offset, 0) + max(limit, 0)],
        }


def _by_seed(index: EpisodeIndex) -> dict[tuple[str, int], dict[str, Any]]:
    """Per (env id, seed): the mean reward, the solved fraction and the episodes (errors left out)."""
    rows = index.rows(np.arange(len(index)))
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in rows:
        if row["seed"] is not None and row["outcome"] != "error":
            groups.setdefault((row["env_id"], row["seed"]), []).append(row)
    return {
        key: {
            "mean": float(np.mean([r["reward"] for r in members])),
            "solved": float(np.mean([r["outcome"] == "solved" for r in members])),
            "indices": [r["index"] for r in members],
        }
        for key, members in groups.items()
        if all(math.isfinite(r["reward"]) for r in members)
    }
