"""Each built-in environment's one-line description is written once, as its class's ``description``."""

from __future__ import annotations

import gymnasium as gym
import pytest

import llmgym.envs
from llmgym.envs import BUILTIN_ENVS
from llmgym.registry import describe


@pytest.mark.parametrize("env_id", sorted(BUILTIN_ENVS))
def test_llmgym_list_shows_the_class_own_description(env_id):
    env_class = gym.envs.registration.load_env_creator(BUILTIN_ENVS[env_id])
    own = vars(env_class).get("description", "")
    assert own, f"{env_class.__name__} sets no description of its own: it would show its base class's line"
    assert describe(env_id) == own == gym.make(env_id).unwrapped.description


def test_register_envs_gives_the_registry_no_second_description(monkeypatch):
    # the registry held a second, different line for most envs (Wordle-v0: no "(guess tool or plain text)")
    calls = []
    monkeypatch.setattr(llmgym.envs, "register", lambda *args, **kwargs: calls.append((args, kwargs)))
    llmgym.envs.register_envs()
    assert calls == [((env_id, entry_point), {}) for env_id, entry_point in BUILTIN_ENVS.items()]
