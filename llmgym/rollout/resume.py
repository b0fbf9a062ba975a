"""Resuming a rollout: which episodes of an earlier run's JSONL file a run keeps.

Holds :func:`episode_key` (the (seed, index in group) pair that names an episode
within a run), :func:`resume_conflict` (why an episode of the file does not
belong to a run of given settings), :func:`repair_jsonl` (one line per episode:
drops the lines of an episode recorded twice and lines torn by a kill or by two
runs writing at once), :func:`resumed_episodes` (the episodes of the file a run
keeps, after that repair) and :func:`as_recorded` (a value as a JSONL record
reads it back).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, NamedTuple

from llmgym.episode import Episode, iter_jsonl
from llmgym.policy import SamplingParams

__all__ = ["episode_key", "resume_conflict", "repair_jsonl", "Repair", "resumed_episodes", "as_recorded"]


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


class Repair(NamedTuple):
    """What :func:`repair_jsonl` dropped from a file.

    Example:
        >>> str(Repair(duplicates=350, torn=1))
        'dropped 350 duplicate lines and 1 torn line (one line kept per episode)'
        >>> str(Repair(duplicates=0, torn=2))
        'dropped 2 torn lines'
    """

    duplicates: int
    torn: int

    def __str__(self) -> str:
        counts = ((self.duplicates, "duplicate line"), (self.torn, "torn line"))
        dropped = " and ".join(f"{n} {what}{'' if n == 1 else 's'}" for n, what in counts if n) or "no line"
        return f"dropped {dropped}" + (" (one line kept per episode)" if self.duplicates else "")


def repair_jsonl(path: str | os.PathLike[str]) -> Repair:
    """Leave one whole line per episode in the JSONL file ``path``; the file is replaced only if that changes it.

    Dropped: a line of an episode (:func:`episode_key`) that another line records too (a finished
    episode wins over a failed one, else the later line wins), and a torn line, one that is not JSON:
    the rest of a write cut short by a kill, or a line two runs wrote into at once (its episode is
    played again). A last line without its newline gets one. The new file is written beside the old
    one and moved over it (:func:`os.replace`): a kill during the repair leaves one or the other whole.

    Returns:
        How many lines of each kind were dropped; none when ``path`` does not exist.

    Raises:
        ValueError: a line is JSON but not an episode, or no line is an episode and a line before the
            last is not JSON either (not a file of episodes). The file is left as it was.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "e.jsonl"
        >>> one, two = Episode("x", seed=1).to_json(), Episode("x", seed=2).to_json()
        >>> _ = path.write_text(f"{one}\\n{two[:30]}\\n{two}\\n{one}\\n")
        >>> repair_jsonl(path)
        Repair(duplicates=1, torn=1)
        >>> [episode.seed for episode in iter_jsonl(path)]
        [2, 1]
    """
    path = Path(path)
    if not path.exists():
        return Repair(0, 0)
    data = path.read_bytes()
    lines = data.split(b"\n")  # the last piece is what follows the last newline: empty in a whole file
    chosen: dict[tuple[int | None, int], tuple[int, bool]] = {}  # episode -> (its line's index, failed)
    episodes, torn = 0, []
    for index, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            episode = Episode.from_json(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            torn.append(index)
            continue
        except (ValueError, TypeError) as err:
            raise ValueError(f"{path}:{index + 1}: not an episode ({err})") from None
        episodes += 1
        key, failed = episode_key(episode), "error" in episode.metadata
        if key not in chosen or not failed or chosen[key][1]:
            chosen[key] = (index, failed)
    if not chosen and any(index < len(lines) - 1 for index in torn):
        raise ValueError(f"{path}:{torn[0] + 1}: not an episode (not JSON), and no line is one: not a file of episodes")
    repair = Repair(duplicates=episodes - len(chosen), torn=len(torn))
    if repair.duplicates or repair.torn or (data and not data.endswith(b"\n")):
        kept = sorted(index for index, _ in chosen.values())
        _replace(path, b"".join(lines[index] + b"\n" for index in kept))
    return repair


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
    group number, which they are given) and whose index is below ``group_size``. The file is
    repaired first (:func:`repair_jsonl`: one line per episode, every line whole, so that appended
    lines stay whole); a ``RuntimeWarning`` says what it dropped. Call it while holding the file
    (:func:`~llmgym.rollout.output_lock.hold_output`): the repair replaces it.

    Raises:
        ValueError: an episode of the file was played with other settings (:func:`resume_conflict`),
            or a line is not an episode.
    """
    path = Path(path)
    done: dict[tuple[int | None, int], Episode] = {}
    if not path.exists():
        return done
    repair = repair_jsonl(path)
    if repair.duplicates or repair.torn:
        warnings.warn(f"{path}: {repair}", RuntimeWarning, stacklevel=2)
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


def _replace(path: Path, data: bytes) -> None:
    """Replace the file ``path`` by one holding ``data``, atomically: written beside it, synced, renamed over it."""
    file = tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False)
    try:
        with file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(file.name, path.stat().st_mode & 0o7777)  # the temporary file is private (0600); keep the old mode
        os.replace(file.name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(file.name)
        raise
