"""Registering environments with Gymnasium, and finding them again.

Holds :func:`register` (``gymnasium.register`` plus a one-line description),
:func:`register_alias` (an old id kept working for one release under a new name),
:func:`load_plugins` (runs every ``llmgym.envs`` entry point; llmgym's own
environments arrive the same way as a third party's) and :func:`list_envs`.
A plugin that fails to load gives a warning naming it and never breaks
``import llmgym``.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import importlib.machinery
import sys
import warnings
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

import gymnasium as gym

__all__ = [
    "register",
    "register_alias",
    "DeprecatedAlias",
    "load_plugins",
    "list_envs",
    "describe",
    "close_matches",
    "ENTRY_POINT_GROUP",
]

#: The entry-point group third-party packages use to register environments.
ENTRY_POINT_GROUP = "llmgym.envs"

_descriptions: dict[str, str] = {}
_plugin_ids: dict[str, str] = {}  # env id -> name of the plugin that registered it
_unlisted: set[str] = set()  # ids that play only with arguments the user brings (a server's URL)
_pending: dict[tuple[str, str], EntryPoint] = {}  # plugins still to run (new, failed, or half-imported)
_done: set[tuple[str, str]] = set()  # (name, value) of the plugins that ran
_warned: dict[str, str] = {}  # plugin name -> the failure last warned about
_scanned = False
_running = False
_current_plugin: str | None = None  # the plugin running now, named in conflict warnings


def register(id: str, entry_point: str, description: str = "", *, listed: bool = True, **kwargs: Any) -> None:
    """Register an environment with Gymnasium and remember its description.

    An id already registered is kept: the same ``entry_point`` again does nothing,
    another one gets a ``RuntimeWarning`` (naming the plugin, when a plugin is running).

    Args:
        id: a versioned id, ``namespace/Name-vN``.
        entry_point: ``"module:Class"``.
        description: one line for ``llmgym list``.
        listed: ``False`` keeps the id out of :func:`list_envs`, which lists the envs that play as
            they are; for an env that needs arguments only the user has (``llmgym/OpenEnv-v0`` and
            the ``base_url`` of its server).
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
        if gym.spec(id).entry_point == entry_point:  # the same env again (a package registering at import too)
            if _current_plugin is not None:
                _plugin_ids.setdefault(id, _current_plugin)
        elif _current_plugin is not None:
            _warn_conflict(id, _current_plugin)
        else:
            warnings.warn(
                f"llmgym: {id!r} is already registered (entry point {gym.spec(id).entry_point!r}); kept it",
                RuntimeWarning,
                stacklevel=2,
            )
        return
    gym.register(id=id, entry_point=entry_point, **kwargs)
    if description:
        _descriptions[id] = description
    if not listed:
        _unlisted.add(id)


@dataclasses.dataclass(frozen=True)
class DeprecatedAlias:
    """The entry point of an old id: warns with the new id, then builds the new id's env.

    A plain dataclass of two strings, so a spec that holds it pickles (vector envs, Ray workers).
    """

    old_id: str
    new_id: str

    def __call__(self, **kwargs: Any) -> gym.Env:
        warnings.warn(
            f"{self.old_id} is a deprecated name of {self.new_id}, the same environment; "
            f"make {self.new_id!r} instead (the old name goes in the next release)",
            FutureWarning,  # shown by default: an env id is what end users type, in scripts and on the command line
            stacklevel=3,  # the caller of gymnasium.make
        )
        return gym.envs.registration.load_env_creator(gym.spec(self.new_id).entry_point)(**kwargs)


def register_alias(old_id: str, new_id: str) -> None:
    """Keep ``old_id`` working for one release as a deprecated name of the registered ``new_id``.

    ``gym.make(old_id)`` builds ``new_id``'s env (its spec, so ``env.spec.id`` and episode
    records say ``new_id``) and warns with the new name (``FutureWarning``). The alias is
    stored under ``old_id`` with ``new_id``'s name and version, so Gymnasium never counts it
    as a later version of another env: renaming ``Wordle-v1`` to ``WordleCompact-v0`` leaves
    ``gym.make("llmgym/Wordle-v0")`` without an "out of date" warning. Aliases are not listed.

    Example:
        >>> import warnings, gymnasium as gym, llmgym
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     env = gym.make("llmgym/Wordle-v1")
        >>> env.spec.id, "llmgym/WordleCompact-v0" in str(caught[0].message)
        ('llmgym/WordleCompact-v0', True)

    Raises:
        ValueError: ``new_id`` is not registered.
    """
    if new_id not in gym.registry:
        raise ValueError(f"register {new_id!r} before its deprecated alias {old_id!r}")
    alias = DeprecatedAlias(old_id, new_id)
    if old_id in gym.registry:  # an alias registered again does nothing; an env under that id is kept
        if gym.registry[old_id].entry_point != alias:
            warnings.warn(
                f"llmgym: {old_id!r} is already registered (entry point {gym.registry[old_id].entry_point!r}); "
                f"kept it, not as an alias of {new_id!r}",
                RuntimeWarning,
                stacklevel=2,
            )
        return
    gym.registry[old_id] = dataclasses.replace(gym.spec(new_id), entry_point=alias)
    _descriptions[old_id] = f"deprecated name of {new_id}: make that id instead"
    _unlisted.add(old_id)


def load_plugins(force: bool = False) -> list[str]:
    """Run each ``llmgym.envs`` entry point until it has run once; returns the names that failed.

    An entry point may name a callable (called with no arguments) or a module
    (importing it registers its environments). A plugin that has run is never run
    again; one that failed, or whose package was still being imported (it imported
    llmgym at its top), is tried again by the next call: ``list_envs`` and the CLI
    call this. A failure is warned about once.

    Args:
        force: look for newly installed entry points even when every known one has run.
    """
    global _scanned, _running
    if _running or (_scanned and not force and not _pending):
        return []  # a plugin that calls list_envs() must not run the plugins again
    _running = True
    try:
        if force or not _scanned:
            for entry in entry_points(group=ENTRY_POINT_GROUP):
                if (entry.name, entry.value) not in _done:
                    _pending[(entry.name, entry.value)] = entry
            _scanned = True
        return [name for name in map(_try, sorted(_pending.values(), key=_builtin_first)) if name]
    finally:
        _running = False


def _builtin_first(entry: EntryPoint) -> tuple[bool, str]:
    return entry.value.split(":")[0] != "llmgym.envs", entry.name


def _try(entry: EntryPoint) -> str | None:
    """Run one plugin; its name if it failed, None if it ran or must wait for its own import to finish."""
    global _current_plugin
    if _half_imported(entry.module):
        return None  # its package imported llmgym at its top and is half-imported: try again later
    before = dict(gym.registry)
    _current_plugin = entry.name
    try:
        target = entry.load()
        if callable(target):
            target()
    except (Exception, SystemExit) as err:  # a broken plugin must not break llmgym (nor exit it)
        message = f"{type(err).__name__}: {err}"
        if _warned.get(entry.name) != message:
            _warned[entry.name] = message
            warnings.warn(
                f"llmgym: environment plugin {entry.name!r} ({entry.value}) failed to load: {message}",
                RuntimeWarning,
                stacklevel=4,
            )
        return entry.name
    finally:
        _current_plugin = None
    del _pending[(entry.name, entry.value)]
    _done.add((entry.name, entry.value))
    for env_id, spec in gym.registry.items():
        if env_id in before and before[env_id] is not spec and _plugin_ids.get(env_id) != entry.name:
            gym.registry[env_id] = before[env_id]  # a plugin never takes over an id registered before it
            _warn_conflict(env_id, entry.name)
        elif env_id not in before:
            _plugin_ids[env_id] = entry.name
    return None


def _half_imported(module: str) -> bool:
    """Whether ``module`` or a package above it is being imported now.

    llmgym itself does not count: its import is what runs the plugins.
    """
    parts = module.split(".")
    names = (".".join(parts[:i]) for i in range(1, len(parts) + 1))
    names = (name for name in names if name != "llmgym")
    return any(getattr(getattr(sys.modules.get(name), "__spec__", None), "_initializing", False) for name in names)


def _warn_conflict(env_id: str, plugin: str) -> None:
    owner = _plugin_ids.get(env_id)
    owner = "llmgym" if owner is None or env_id.startswith("llmgym/") else f"plugin {owner!r}"
    warnings.warn(
        f"llmgym: environment plugin {plugin!r} registered {env_id!r}, which {owner} already registered; "
        f"kept {owner}'s. Give the plugin's environment an id in its own namespace.",
        RuntimeWarning,
        stacklevel=4,
    )


def list_envs() -> list[str]:
    """Ids of llmgym environments: the ``llmgym/`` namespace and every plugin's (not those registered unlisted)."""
    load_plugins()
    ids = {env_id for env_id in gym.registry if env_id.startswith("llmgym/")} | set(_plugin_ids)
    return sorted(ids - _unlisted)


def describe(env_id: str) -> str:
    """The one-line description of a registered environment."""
    if env_id in _descriptions:
        return _descriptions[env_id]
    spec = gym.spec(env_id)
    if isinstance(spec.entry_point, str) and (written := description_in_source(spec.entry_point)):
        return written
    try:
        env_class = (
            spec.entry_point if callable(spec.entry_point) else gym.envs.registration.load_env_creator(spec.entry_point)
        )
    except Exception as err:
        return f"(cannot load: {type(err).__name__})"
    text = getattr(env_class, "description", "") or (env_class.__doc__ or "")
    return text.strip().splitlines()[0] if text.strip() else ""


def description_in_source(entry_point: str) -> str | None:
    """The first line of the ``description`` string that the class of ``"module:Class"`` assigns in its body,
    read from the module's source without importing it (``llmgym list`` would otherwise import every env and
    its libraries); None when it is not written there as a plain string.
    """
    module, _, name = entry_point.partition(":")
    source = _module_source(module)
    if source is None:
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            for statement in node.body:
                targets = getattr(statement, "targets", None) or [getattr(statement, "target", None)]
                value = getattr(statement, "value", None)
                named = any(isinstance(t, ast.Name) and t.id == "description" for t in targets)
                if named and isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value.strip():
                    return value.value.strip().splitlines()[0]
    return None


def _module_source(module: str) -> str | None:
    """A module's source text, found through its parent packages' paths, importing only packages already imported."""
    parts = module.split(".")
    path = None
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        loaded = sys.modules.get(name)
        spec = loaded.__spec__ if loaded is not None else importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        if depth == len(parts):
            if not spec.origin or not spec.origin.endswith(".py"):
                return None
            try:
                return Path(spec.origin).read_text(encoding="utf-8")
            except OSError:
                return None
        path = spec.submodule_search_locations
        if path is None:
            return None
    return None


def close_matches(env_id: str) -> list[str]:
    """Registered ids that look like ``env_id`` (for "did you mean" errors)."""
    candidates = list_envs() or list(gym.registry)
    return difflib.get_close_matches(env_id, candidates, n=3, cutoff=0.5)
