"""The TRL integration (llmgym/wrappers/trl.py): chat rows from episodes, and ``trl_environment``'s tool methods.

Belongs in tests/wrappers/ (kept here while that folder is being reorganised).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

from llmgym import Episode, LLMEnv, Reward, Rubric
from llmgym.wrappers.trl import trl_environment


def test_trl_rows_hold_a_text_protocol_call_once():
    from llmgym.wrappers.trl import episodes_to_messages

    env = gym.make("llmgym/Wordle-v0")
    env.reset(seed=0)
    *_, info = env.step('Trying. <tool_call>{"name":"guess","arguments":{"word":"pious"}}</tool_call>')
    assistant = [m for m in episodes_to_messages([Episode("llmgym/Wordle-v0", messages=info["messages"])])[0]["messages"]
                 if m["role"] == "assistant"]
    assert len(assistant) == 1 and assistant[0]["content"] == "Trying."
    assert [c["function"] for c in assistant[0]["tool_calls"]] == [{"name": "guess", "arguments": {"word": "pious"}}]
    native = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "guess", "arguments": '{"word": "crane"}'}}]}
    row = episodes_to_messages([Episode("x", messages=[native])])[0]["messages"][0]
    assert row["tool_calls"][0]["function"]["arguments"] == {"word": "crane"}


class NoToolsEnv(LLMEnv):
    """Plain-text answers only: nothing TRL could call."""

    def setup(self, options: dict[str, Any] | None) -> str:
        return "Say hello."

    def build_rubric(self) -> Rubric:
        return Rubric([Reward(lambda ctx: 0.0, when="end", name="nothing")])


def test_trl_environment_refuses_an_env_without_tools():
    env_id = "llmgym-interop-test/NoTools-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=NoToolsEnv)
    with pytest.raises(ValueError, match="has no tools: TRL passes only tool calls"):
        trl_environment(env_id)


def test_trl_tool_methods_take_arguments_by_position_as_their_signature_says():
    env = trl_environment("llmgym/Wordle-v0")()
    env.reset(seed=0)
    assert env.guess("crane").splitlines()[0] == "CRANE x x x x Y"
    assert env.guess(word="slate").splitlines()[0].startswith("SLATE")
    with pytest.raises(TypeError, match="takes 1 arguments"):
        env.guess("crane", "slate")
    with pytest.raises(TypeError, match="several values"):
        env.guess("crane", word="slate")
