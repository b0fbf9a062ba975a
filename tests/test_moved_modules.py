"""Old import paths of moved modules (llmgym/_moved.py): each still imports, warns, and is the moved module itself."""

from __future__ import annotations

import importlib
import re
import sys

import pytest

from llmgym._moved import MOVED


def _import_new(new: str):
    try:
        return importlib.import_module(new)
    except ImportError as err:  # the module needs an extra this environment lacks
        pytest.skip(f"{new} needs {err.name}")


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_path_gives_the_moved_module_and_a_deprecation_warning_naming_the_new_one(old, new, monkeypatch):
    moved = _import_new(new)
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=f"{re.escape(old)} moved to {re.escape(new)}; import it from there"):
        imported = importlib.import_module(old)
    assert imported is moved and sys.modules[old] is moved
    assert moved.__name__ == new and moved.__spec__.name == new  # the module keeps its own name and spec


def test_the_warning_points_at_the_line_that_imports(monkeypatch):
    protocol = _import_new("llmgym.wrappers.server.protocol")
    monkeypatch.delitem(sys.modules, "llmgym.wrappers.server_protocol", raising=False)
    # ``from package import name`` takes an attribute the package already has: remove the one set earlier
    monkeypatch.delattr(sys.modules["llmgym.wrappers"], "server_protocol", raising=False)
    with pytest.warns(DeprecationWarning) as caught:
        from llmgym.wrappers import server_protocol
    assert server_protocol is protocol and server_protocol.APIError is protocol.APIError
    assert caught[0].filename == __file__


def test_a_second_import_of_an_old_path_is_the_same_module_and_does_not_warn_again(monkeypatch, recwarn):
    _import_new("llmgym.wrappers.server.lora")
    monkeypatch.delitem(sys.modules, "llmgym.wrappers.server_lora", raising=False)
    with pytest.warns(DeprecationWarning):
        lora = importlib.import_module("llmgym.wrappers.server_lora")
    recwarn.clear()
    assert importlib.import_module("llmgym.wrappers.server_lora") is lora
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]


def test_names_that_did_not_move_are_left_to_the_import_system():
    with pytest.raises(ModuleNotFoundError, match="llmgym.wrappers.no_such_module"):
        importlib.import_module("llmgym.wrappers.no_such_module")
