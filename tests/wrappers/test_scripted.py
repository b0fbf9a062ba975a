"""Scripted policies (llmgym/wrappers/scripted.py): specs that make no actor, or are no import path, are refused."""

from __future__ import annotations

import pytest

from llmgym.wrappers.scripted import load_scripted


@pytest.mark.parametrize(
    "spec, message",
    [
        ("json:JSONDecoder", "is a class without an act(observation) -> str method"),
        ("os:getenv", "cannot make an actor: TypeError"),
        ("collections:OrderedDict", "is a class without an act(observation) -> str method"),
    ],
)
def test_load_scripted_refuses_what_makes_no_actor(spec, message):
    with pytest.raises(ValueError, match="scripted policy") as err:
        load_scripted(spec)
    assert message in str(err.value)


@pytest.mark.parametrize("spec", [".relative:Actor", ":Actor", "llmgym.envs.wordle.solver:__all__"])
def test_load_scripted_refuses_bad_paths_with_value_error(spec):
    with pytest.raises(ValueError, match="scripted policy"):
        load_scripted(spec)  # the CLI turns ValueError into a clean message; TypeError was a traceback
    with pytest.raises(ValueError, match="scripted policy"):
        load_scripted(spec, use_tool=False)  # with kwargs a non-callable used to fail only when acting
