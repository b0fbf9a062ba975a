"""Every registered llmgym environment: check_env, determinism, fuzz."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llmgym

ENV_IDS = llmgym.list_envs()


def _scripted_actions(env: gym.Env, n: int) -> list[str]:
    """A fixed, env-agnostic action sequence: prose, a tool call per offered tool, garbage."""
    tools = [t["function"]["name"] for t in env.unwrapped.tool_schemas] if hasattr(env.unwrapped, "tool_schemas") else []
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
    # llmgym's own ids come without Gymnasium's OrderEnforcing wrapper: the env itself must refuse
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


HOSTILE = st.one_of(
    st.text(max_size=200),
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=31), max_size=50),
    st.builds(lambda body: f"<tool_call>{body}</tool_call>", st.text(max_size=80)),
    st.builds(
        lambda name, args: "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>",
        st.sampled_from(["guess", "nope", "", "answer", "move", "python"]),
        st.dictionaries(st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=10), st.none(), st.lists(st.integers(), max_size=3)), max_size=3),
    ),
    st.just("x" * 1_000_000),
    st.just("<tool_call>" * 1000),
    st.just({"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "guess", "arguments": "{bad json"}}]}),
    st.just({"role": "assistant", "content": 5, "tool_calls": "not a list"}),
)


@pytest.mark.parametrize("env_id", ENV_IDS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(actions=st.lists(HOSTILE, min_size=1, max_size=4))
def test_fuzz_never_raises(env_id, actions):
    env = gym.make(env_id)
    env.reset(seed=0)
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and obs in env.observation_space
        assert isinstance(reward, float) and reward == reward
        assert type(terminated) is bool and type(truncated) is bool
        assert isinstance(info["messages"], list)
        if terminated or truncated:
            env.reset(seed=1)
    env.close()
