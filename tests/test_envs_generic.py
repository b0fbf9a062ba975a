"""Every registered llmgym environment: check_env, determinism, fuzz; and arguments no env can play with are refused."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llmgym
from llmgym.fuzzing import sample_arguments

ENV_IDS = llmgym.list_envs()


def _scripted_actions(env: gym.Env, n: int) -> list[str]:
    """A fixed, env-agnostic action sequence: prose, a tool call per offered tool, garbage."""
    tools = (
        [t["function"]["name"] for t in env.unwrapped.tool_schemas] if hasattr(env.unwrapped, "tool_schemas") else []
    )
    actions = ["hello", "crane"]
    actions += [f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call>' for name in tools]
    actions += ['<tool_call>{"name": 1}</tool_call>', "}}{{"]
    return (actions * n)[:n]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env(env_id):
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_step_before_reset_is_refused(env_id):
    # Gymnasium's OrderEnforcing wrapper refuses first; an unwrapped env refuses by itself (tested in test_env_base)
    env = gym.make(env_id)
    with pytest.raises((RuntimeError, gym.error.ResetNeeded), match="reset"):
        env.step("hello")
    env.reset(seed=0)
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_seed_same_actions_same_episode(env_id):
    def play(seed):
        env = gym.make(env_id)
        obs, info = env.reset(seed=seed)
        trace = [obs, json.dumps(info, sort_keys=True, default=str)]
        for action in _scripted_actions(env, 6):
            obs, reward, terminated, truncated, info = env.step(action)
            trace.append((obs, reward, terminated, truncated, json.dumps(info, sort_keys=True, default=str)))
            if terminated or truncated:
                break
        env.close()
        return trace

    assert play(7) == play(7)


def _hostile(tool_schemas: list[dict]) -> st.SearchStrategy:
    """Hostile actions for an env offering ``tool_schemas``: its own tool and argument names with wrong
    values, unknown names, broken markup, huge and control-character text."""
    tools = [t["function"] for t in tool_schemas]
    names = sorted({t["name"] for t in tools} | {"nope", ""})
    keys = sorted({k for t in tools for k in t.get("parameters", {}).get("properties", {})})
    key = st.sampled_from(keys) | st.text(max_size=8) if keys else st.text(max_size=8)
    value = st.one_of(
        st.integers(),
        st.floats(),
        st.booleans(),
        st.text(max_size=10),
        st.none(),
        st.lists(st.integers(), max_size=3),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    )
    calls = [st.tuples(st.sampled_from(names), st.dictionaries(key, value, max_size=3))]
    for tool in tools:  # every tool called with valid arguments and with each argument present but hostile
        schema = tool.get("parameters", {})
        calls.append(
            st.tuples(
                st.just(tool["name"]),
                st.integers(0, 2**32 - 1).map(
                    lambda seed, schema=schema: sample_arguments(schema, np.random.default_rng(seed))
                ),
            )
        )
        calls.append(
            st.tuples(st.just(tool["name"]), st.fixed_dictionaries(dict.fromkeys(schema.get("properties", {}), value)))
        )
    return st.one_of(
        st.text(max_size=200),
        st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=31), max_size=50),
        st.builds(lambda body: f"<tool_call>{body}</tool_call>", st.text(max_size=80)),
        st.one_of(calls).map(
            lambda call: "<tool_call>" + json.dumps({"name": call[0], "arguments": call[1]}) + "</tool_call>"
        ),
        st.just("x" * 1_000_000),
        st.just("<tool_call>" * 1000),
        st.just(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"function": {"name": names[-1], "arguments": "{bad json"}}],
            }
        ),
        st.just({"role": "assistant", "content": 5, "tool_calls": "not a list"}),
    )


@pytest.mark.parametrize("env_id", ENV_IDS)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.data())
def test_fuzz_never_raises(env_id, data):
    env = gym.make(env_id)
    env.reset(seed=0)
    # each env's own tool and argument names: a fixed list of names never reached most envs' tools
    actions = data.draw(st.lists(_hostile(getattr(env.unwrapped, "tool_schemas", [])), min_size=1, max_size=4))
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and obs in env.observation_space
        assert isinstance(reward, float) and reward == reward
        assert type(terminated) is bool and type(truncated) is bool
        assert isinstance(info["messages"], list)
        if terminated or truncated:
            env.reset(seed=1)
    env.close()


@pytest.mark.parametrize(
    ("env_id", "kwargs", "message"),
    [
        ("llmgym/Wordle-v0", {"max_guesses": 0}, "max_guesses"),  # played one turn that could never guess
        ("llmgym/Wordle-v0", {"max_guesses": -1}, "max_guesses"),
        ("llmgym/Wordle-v0", {"max_guesses": 2.5}, "max_guesses"),
        ("llmgym/CodeTests-v0", {"per_test_timeout_s": 0}, "per_test_timeout_s"),  # every test would time out
        ("llmgym/CodeTests-v0", {"per_test_timeout_s": -1.0}, "per_test_timeout_s"),
        ("llmgym/CodeTests-v0", {"per_test_timeout_s": float("nan")}, "per_test_timeout_s"),
    ],
)
def test_degenerate_env_arguments_are_refused(env_id, kwargs, message):
    with pytest.raises(ValueError, match=message):
        gym.make(env_id, **kwargs)
