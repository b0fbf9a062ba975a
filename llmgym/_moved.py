"""Modules that moved, still importable under their old names for one release, with a ``DeprecationWarning``.

Holds :data:`MOVED` (old module name -> new one) and the import hook that
serves it, installed by ``import llmgym``. Importing an old name imports the
new module and binds it under the old name too: both names give the same
module object, so a class imported either way is the same class, and the
warning names the new path to import instead. Remove an entry one release
after its move.

Example:
    >>> import importlib, sys, warnings
    >>> sys.modules.pop("llmgym.wrappers.server_protocol", None) and None
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     old = importlib.import_module("llmgym.wrappers.server_protocol")
    >>> old is importlib.import_module("llmgym.wrappers.server.protocol")
    True
    >>> str(caught[0].message).split(";")[0]
    'llmgym.wrappers.server_protocol moved to llmgym.wrappers.server.protocol'
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

__all__ = ["MOVED", "install"]

#: Old module name -> the module's new name (0.2: each role in a subpackage named for it).
MOVED: dict[str, str] = {
    "llmgym.wrappers.server_backend": "llmgym.wrappers.server.backend",
    "llmgym.wrappers.server_complete": "llmgym.wrappers.server.complete",
    "llmgym.wrappers.server_protocol": "llmgym.wrappers.server.protocol",
    "llmgym.wrappers.server_lora": "llmgym.wrappers.server.lora",
    "llmgym.wrappers.llama_decode": "llmgym.wrappers.decoding.llama",
    "llmgym.wrappers.sb3": "llmgym.wrappers.classic_rl.sb3",
    "llmgym.wrappers.trl": "llmgym.trainers.trl",
    "llmgym.rollout_resume": "llmgym.rollout.resume",
    "llmgym.rollout_stats": "llmgym.rollout.stats",
    "llmgym.rollout_tokens": "llmgym.rollout.tokens",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old names of :data:`MOVED` and loads each as its new module."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        # stacklevel 2: the frame that imports (the import machinery's own frames are skipped)
        warnings.warn(
            f"{spec.name} moved to {new}; import it from there (the old name goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(new)
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import system set the old name's spec on the module: give it back its own
        module.__spec__ = module.__spec__.loader_state


def install() -> None:
    """Put the hook on ``sys.meta_path`` (once), after the finders of real modules."""
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModules())
