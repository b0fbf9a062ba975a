"""Resuming a rollout: which episodes of an earlier run's JSONL file a run keeps.

Holds :func:`episode_key` (the (seed, index in group) pair that names an episode
within a run), :func:`resume_conflict` (why an episode of the file does not
belong to a run of given settings), :func:`resumed_episodes` (the episodes of
the file a run keeps, after repairing a last line cut short by a kill) and
:func:`as_recorded` (a value as a JSONL record reads it back).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from llmgym.episode import Episode, iter_jsonl
from llmgym.policy import SamplingParams

__all__ = ["episode_key", "resume_conflict", "resumed_episodes", "as_recorded"]


def episode_key(episode: Episode) -> tuple[int | None, int]:
    """The (seed, index in its group) pair that identifies an episode within a run.

    Example:
        >>> episode_key(Episode("llmgym/Wordle-v0", seed=4, metadata={"group_index": 1}))
        (4, 1)
    """
    return episode.seed, int(episode.metadata.get("group_index", 0))


def resume_conflict(
    episode: Episode,
    env_id: str | None,
    env_kwargs: dict[str, Any] | None,
    sampling: SamplingParams,
) -> str | None:
    """Why ``episode``, read from a file being resumed, does not belong to a run of these settings; ``None`` if it does.

    Compares the env id, the env kwargs (``metadata["env_kwargs"]``, recorded for an env id
    since this check exists) and the sampling settings (``metadata["sampling"]``) except the
    seed: a resumed run may add seeds, and so a first seed of its own. ``None`` arguments
    and settings the episode does not record are not compared.

    Example:
        >>> ep = Episode("llmgym/Wordle-v0", metadata={"env_kwargs": {"max_turns": 6},
        ...              "sampling": {"temperature": 0.7, "top_p": 1.0, "seed": 0}})
        >>> resume_conflict(ep, "llmgym/Wordle-v0", {"max_turns": 6}, SamplingParams(seed=5)) is None
        True
        >>> resume_conflict(ep, "llmgym/Wordle-v0", {}, SamplingParams())
        "holds episodes played with env_kwargs {'max_turns': 6}, not {}"
        >>> resume_conflict(ep, "llmgym/Wordle-v0", None, SamplingParams(temperature=0.0))
        'holds episodes sampled with temperature=0.7, not temperature=0.0'
    """
    if env_id is not None and episode.env_id != env_id:
        return f"holds episodes of {episode.env_id!r}, not {env_id!r}"
    recorded, now = episode.metadata.get("env_kwargs"), as_recorded(env_kwargs)
    if isinstance(recorded, dict) and isinstance(now, dict) and recorded != now:
        return f"holds episodes played with env_kwargs {recorded}, not {env_kwargs}"
    recorded = episode.metadata.get("sampling")
    if isinstance(recorded, dict):
        now = as_recorded(dataclasses.asdict(sampling))
        for name, value in now.items():
            if name != "seed" and name in recorded and recorded[name] != value:
                return f"holds episodes sampled with {name}={recorded[name]!r}, not {name}={value!r}"
    return None


def resumed_episodes(
    path: str | os.PathLike[str],
    env_id: str | None,
    env_kwargs: dict[str, Any] | None,
    sampling: SamplingParams,
    groups: dict[int, int],
    group_size: int,
) -> dict[tuple[int | None, int], Episode]:
    """The episodes of ``path`` a resumed run keeps, by :func:`episode_key`; none when the file does not exist.

    Kept: the finished (not failed) episodes whose seed is in ``groups`` (seed -> this run's
    group number, which they are given) and whose index is below ``group_size``; a later line
    wins over an earlier one. A last line cut short by a kill is repaired first (see
    :func:`_repair_tail`), so that appended lines stay whole.

    Raises:
        ValueError: an episode of the file was played with other settings (:func:`resume_conflict`),
            or a line is not an episode.
    """
    path = Path(path)
    done: dict[tuple[int | None, int], Episode] = {}
    if not path.exists():
        return done
    _repair_tail(path)
    for episode in iter_jsonl(path):
        conflict = resume_conflict(episode, env_id, env_kwargs, sampling)
        if conflict is not None:
            raise ValueError(f"{path} {conflict}: resume with the same settings or write to another file")
        key = episode_key(episode)
        if key[0] in groups and key[1] < group_size and "error" not in episode.metadata:
            episode.group = groups[key[0]]  # this run's group numbering: the file may come from other seeds
            done[key] = episode
    return done


def as_recorded(value: Any) -> Any:
    """``value`` as it reads back from a JSONL record (tuples become lists); ``None`` when it is not JSON.

    Example:
        >>> as_recorded({"shape": (3, 4)}), as_recorded({"fn": len})
        ({'shape': [3, 4]}, None)
    """
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        return None


def _repair_tail(path: Path) -> None:
    """End a JSONL file cut short mid-line (a killed run) cleanly, so appended lines stay whole.

    A last line that is a complete episode gets its newline; a half-written one is cut off
    (:func:`~llmgym.episode.iter_jsonl` skips it too, so that episode is played again).
    """
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    try:
        Episode.from_json(data[cut:].decode("utf-8"))
        complete = True
    except (ValueError, TypeError, UnicodeDecodeError):
        complete = False
    with open(path, "r+b") as file:
        if complete:
            file.seek(0, os.SEEK_END)
            file.write(b"\n")
        else:
            file.truncate(cut)
