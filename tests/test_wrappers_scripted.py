"""Scripted policies (llmgym/wrappers/scripted.py): a spec that makes no actor is refused when loaded.

Belongs in tests/wrappers/ (kept here while that folder is being reorganised).
"""

from __future__ import annotations

import pytest

from llmgym.wrappers.scripted import load_scripted


@pytest.mark.parametrize("spec, message", [
    ("json:JSONDecoder", "is a class without an act(observation) -> str method"),
    ("os:getenv", "cannot make an actor: TypeError"),
    ("collections:OrderedDict", "is a class without an act(observation) -> str method"),
])
def test_load_scripted_refuses_what_makes_no_actor(spec, message):
    with pytest.raises(ValueError, match="scripted policy") as err:
        load_scripted(spec)
    assert message in str(err.value)
