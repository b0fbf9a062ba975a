"""Registering environments with Gymnasium, and finding them again.

Holds :func:`register` (``gymnasium.register`` plus a one-line description),
:func:`load_plugins` (runs every ``llmgym.envs`` entry point; llmgym's own
environments arrive the same way as a third party's) and :func:`list_envs`.
A plugin that fails to load gives a warning naming it and never breaks
``import llmgym``.
"""

from __future__ import annotations

import difflib
import importlib
import warnings
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import gymnasium as gym

__all__ = ["register", "load_plugins", "list_envs", "describe", "close_matches", "ENTRY_POINT_GROUP"]

#: The entry-point group third-party packages use to register environments.
ENTRY_POINT_GROUP = "llmgym.envs"

_descriptions: dict[str, str] = {}
_plugin_ids: dict[str, str] = {}
_loaded = False


def register(id: str, entry_point: str, description: str = "", **kwargs: Any) -> None:
    """Register an environment with Gymnasium and remember its description.

    Args:
        id: a versioned id, ``namespace/Name-vN``.
        entry_point: ``"module:Class"``.
        description: one line for ``llmgym list``.
        **kwargs: passed to ``gymnasium.register`` (``kwargs=``...). Environment kwargs
            must be plain data so the spec can be re-made.

    Raises:
        ValueError: ``max_episode_steps`` is given. Gymnasium's ``TimeLimit`` would end
            episodes behind the env's back (no end-of-episode rewards, an episode record
            that says it was not truncated); set the env's turn budget instead,
            ``kwargs={"max_turns": N}``.
    """
    if kwargs.get("max_episode_steps") is not None:
        raise ValueError(
            f"{id}: max_episode_steps would cut episodes without the env knowing (no end rewards); "
            f'use the env\'s turn budget: kwargs={{"max_turns": {kwargs["max_episode_steps"]}}}'
        )
    if id in gym.registry:
        return  # registering twice (a re-run plugin) is harmless
    gym.register(id=id, entry_point=entry_point, **kwargs)
    if description:
        _descriptions[id] = description


def load_plugins(force: bool = False) -> list[str]:
    """Run every ``llmgym.envs`` entry point once; returns the names that failed.

    An entry point may name a callable (called with no arguments) or a module
    (importing it registers its environments).
    """
    global _loaded
    if _loaded and not force:
        return []
    _loaded = True
    failed = []
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.value.split(":")[0] != "llmgym.envs", e.name)):
        before = set(gym.registry)
        try:
            _run(entry)
        except (Exception, SystemExit) as err:  # a broken plugin must not break llmgym (nor exit it)
            failed.append(entry.name)
            warnings.warn(
                f"llmgym: environment plugin {entry.name!r} ({entry.value}) failed to load: "
                f"{type(err).__name__}: {err}",
                RuntimeWarning,
                stacklevel=2,
            )
            continue
        for env_id in set(gym.registry) - before:
            _plugin_ids[env_id] = entry.name
    return failed


def _run(entry: EntryPoint) -> None:
    target = entry.load()
    if callable(target):
        target()
    elif entry.attr is None:
        importlib.reload(target)


def list_envs() -> list[str]:
    """Ids of llmgym environments: the ``llmgym/`` namespace and every plugin's."""
    load_plugins()
    ids = {env_id for env_id in gym.registry if env_id.startswith("llmgym/")} | set(_plugin_ids)
    return sorted(ids)


def describe(env_id: str) -> str:
    """The one-line description of a registered environment."""
    if env_id in _descriptions:
        return _descriptions[env_id]
    spec = gym.spec(env_id)
    try:
        env_class = spec.entry_point if callable(spec.entry_point) else gym.envs.registration.load_env_creator(spec.entry_point)
    except Exception as err:
        return f"(cannot load: {type(err).__name__})"
    text = getattr(env_class, "description", "") or (env_class.__doc__ or "")
    return text.strip().splitlines()[0] if text.strip() else ""


def close_matches(env_id: str) -> list[str]:
    """Registered ids that look like ``env_id`` (for "did you mean" errors)."""
    candidates = list_envs() or list(gym.registry)
    return difflib.get_close_matches(env_id, candidates, n=3, cutoff=0.5)
