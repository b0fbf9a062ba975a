"""Vector environments for llmgym ids.

Holds :func:`make_vec`, ``gymnasium.make_vec`` with llmgym's defaults
(``SAME_STEP`` autoreset, so no LLM call is spent on a finished episode, and
``shared_memory=False`` for ``async``), and the shared-memory codec for
:class:`llmgym.Text` that Gymnasium's ``AsyncVectorEnv`` uses when
``shared_memory=True``: Gymnasium's own codec for ``spaces.Text`` keeps only
characters of the space's charset and pads with them, so every observation
came back as garbage; and it reads the memory once, into a ``tuple`` of
``str`` that never changes again (stale observations). This codec stores a
length and the Unicode code points, and reads through :class:`SharedTextBatch`,
a live view, so plain ``gymnasium.make_vec(id, vectorization_mode="async")``
is exact too.
Importing :mod:`llmgym` registers the codec.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Iterator, Mapping, Sequence
from copy import deepcopy
from multiprocessing.sharedctypes import SynchronizedArray
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Tuple
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, iterate
from gymnasium.vector.utils.shared_memory import (
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)

from llmgym.spaces import Text

__all__ = ["make_vec", "AutoresetMode", "SharedTextBatch", "TextBatch"]


def make_vec(
    id: str,
    num_envs: int = 1,
    vectorization_mode: str = "sync",
    *,
    autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP,
    vector_kwargs: dict[str, Any] | None = None,
    **env_kwargs: Any,
) -> VectorEnv:
    """Make ``num_envs`` copies of an environment as one Gymnasium vector env.

    Observations batch into a ``tuple`` of ``str``; actions are a sequence of
    ``str`` (or assistant-message dicts), one per sub-environment.

    With ``SAME_STEP`` autoreset (the default here; Gymnasium's is
    ``NEXT_STEP``), a sub-environment whose episode ends is reset inside the
    same ``step``: the observation returned is the new episode's first one and
    the last one is in ``info["final_obs"]`` (with ``info["final_info"]``), so
    every action the policy generates is played. With ``NEXT_STEP`` the next
    action sent to a finished sub-environment is thrown away: one wasted LLM
    call per episode. ``DISABLED`` leaves resets to the caller
    (``reset(options={"reset_mask": ...})``), as a rollout engine does.

    Args:
        id: a registered id, e.g. ``llmgym/Wordle-v0``.
        num_envs: how many sub-environments.
        vectorization_mode: ``"sync"`` (one process) or ``"async"`` (a process each).
        autoreset_mode: ``SAME_STEP`` (default), ``NEXT_STEP`` or ``DISABLED``.
        vector_kwargs: more keyword arguments for the vector env; ``async``
            defaults to ``shared_memory=False`` (pipes carry text exactly).
        **env_kwargs: keyword arguments for each environment.

    Raises:
        ValueError: an unknown ``vectorization_mode``.

    Example:
        >>> import llmgym
        >>> envs = llmgym.make_vec("llmgym/Wordle-v0", num_envs=2)
        >>> obs, info = envs.reset(seed=0)
        >>> obs
        ('Guess the five-letter word. You have 6 guesses.', 'Guess the five-letter word. You have 6 guesses.')
        >>> obs, rewards, terminated, truncated, info = envs.step(["crane", "hello"])
        >>> [o.splitlines()[0] for o in obs]
        ['CRANE x x x x Y', 'HELLO Y G Y x x']
        >>> envs.close()
    """
    if vectorization_mode not in ("sync", "async"):
        raise ValueError(f"vectorization_mode must be 'sync' or 'async', got {vectorization_mode!r}")
    options: dict[str, Any] = {"autoreset_mode": AutoresetMode(autoreset_mode)}
    if vectorization_mode == "async":
        options["shared_memory"] = False
    options.update(vector_kwargs or {})
    return gym.make_vec(
        id, num_envs=num_envs, vectorization_mode=vectorization_mode, vector_kwargs=options, **env_kwargs
    )


# -- batches of llmgym.Text: one action per environment, checked before any is played --


class TextBatch(Tuple):
    """The batched space of :class:`llmgym.Text`: a ``Tuple`` of one ``Text`` per sub-environment.

    A plain ``Tuple`` of ``Text`` (Gymnasium's batch) hands the actions out
    lazily, so a list of the wrong length played the first actions and only
    then raised (and ``AsyncVectorEnv`` was left with results it never read:
    every later observation came one step late). Iterating a ``TextBatch``
    checks the count first, and refuses a lone ``str`` or ``dict``.
    """


@batch_space.register(Text)
def _batch_text_space(space: Text, n: int = 1) -> TextBatch:
    batched = TextBatch(tuple(deepcopy(space) for _ in range(n)), seed=deepcopy(space.np_random))
    batched.seed(list(map(int, deepcopy(space.np_random).integers(0, int(1e8), n))))
    return batched


@iterate.register(TextBatch)
def _iterate_text_batch(space: TextBatch, items: Any) -> Iterator[Any]:
    if isinstance(items, (str, bytes, Mapping)):
        raise ValueError(
            f"actions must be a sequence of {len(space)} actions, one per sub-environment, "
            f"got a single {type(items).__name__}"
        )
    items = items if hasattr(items, "__len__") else list(items)
    if len(items) != len(space):
        raise ValueError(f"expected {len(space)} actions, one per sub-environment, got {len(items)}")
    return iter(items)


# -- shared memory for llmgym.Text: a length then the code points, per environment --


@create_shared_memory.register(Text)
def _create_text_shared_memory(space: Text, n: int = 1, ctx: ModuleType = mp) -> SynchronizedArray:
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


@write_to_shared_memory.register(Text)
def _write_text_to_shared_memory(space: Text, index: int, value: str, shared_memory: SynchronizedArray) -> None:
    if not space.contains(value):
        raise ValueError(f"{space} does not contain an observation of {len(value)} characters")
    codes = np.frombuffer(value.encode("utf-32-le", "surrogatepass"), dtype="<u4").astype(np.int32)
    size = space.max_length + 1
    destination = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)
    destination[index * size] = len(codes)
    destination[index * size + 1 : index * size + 1 + len(codes)] = codes


@read_from_shared_memory.register(Text)
def _read_text_from_shared_memory(space: Text, shared_memory: SynchronizedArray, n: int = 1) -> SharedTextBatch:
    return SharedTextBatch(np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape(n, space.max_length + 1))


class SharedTextBatch(Sequence):
    """A live view of the observations in shared memory: each item is decoded when read.

    ``AsyncVectorEnv`` reads its shared memory once, when it starts, and
    relies on the result being a view (true of NumPy arrays, never of a tuple
    of ``str``). A deep copy (what ``AsyncVectorEnv`` returns with its default
    ``copy=True``) is a plain ``tuple`` of ``str``.
    """

    def __init__(self, rows: np.ndarray):
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self)[index]
        row = self._rows[index]
        return row[1 : 1 + row[0]].astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: Any) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    def __repr__(self) -> str:
        return repr(tuple(self))
