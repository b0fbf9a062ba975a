"""Tool calls and their JSON: reading OpenAI entries, writing them back, and what is refused."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import llmgym  # noqa: F401  registers the envs
from llmgym.messages import ToolCall, loads_json


def test_a_call_round_trips_through_the_openai_format():
    call = ToolCall("guess", {"word": "cr\u00e8me", "n": [1, 2.5, None]}, id="c0")
    entry = call.to_openai()
    assert entry["function"]["arguments"] == '{"word": "cr\u00e8me", "n": [1, 2.5, null]}'  # unicode kept as is
    assert ToolCall.from_openai(entry) == call


def test_encoding_refuses_what_json_dumps_refuses():
    with pytest.raises(TypeError, match="not JSON serializable"):
        ToolCall("t", {"x": object()}).to_openai()


@pytest.mark.parametrize(
    "entry, fragment",
    [
        ({"function": {"name": "t", "arguments": "{oops"}}, "arguments are not valid JSON"),
        ({"function": {"name": "t", "arguments": "[1]"}}, "arguments must be a JSON object"),
        ({"function": {"name": "t", "arguments": {"x": object()}}}, "arguments must be JSON"),
        ({"function": {"arguments": "{}"}}, "function.name"),
        ("t", "must be an object"),
    ],
)
def test_bad_entries_are_value_errors_that_say_what_is_wrong(entry, fragment):
    with pytest.raises(ValueError, match=fragment):
        ToolCall.from_openai(entry)


def test_an_integer_too_long_for_python_is_a_json_error_and_an_error_observation():
    # json.loads raises a bare ValueError for integers over int()'s 4,300-digit limit: it must not escape step()
    huge = "1" * 5000
    with pytest.raises(json.JSONDecodeError, match="too long"):
        loads_json(huge)
    env = gym.make("llmgym/Wordle-v0")
    for action in (
        f'<tool_call>{{"name": "guess", "arguments": {{"word": {huge}}}}}</tool_call>',
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "guess", "arguments": f'{{"word": {huge}}}'}}
            ],
        },
    ):
        env.reset(seed=0)
        observation, _, _, _, info = env.step(action)
        assert "too long" in observation and info["reward_components"]["format_error"] == 1.0
