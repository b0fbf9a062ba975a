"""The step path's JSON helpers give exactly what the standard library gives."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgym.messages import ToolCall, _encode, loads_json
from llmgym.parsing import parse_text_tool_calls

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_loads_and_encode_agree_with_the_standard_library(value):
    text = json.dumps(value, ensure_ascii=False)
    assert repr(loads_json(text)) == repr(json.loads(text))
    assert _encode(value) == text


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(codec=None, exclude_categories=())),  # surrogates too
       st.text(st.characters(codec=None, exclude_categories=())) | st.integers() | st.none())
def test_one_argument_arguments_encode_as_the_standard_library(key, value):
    # the usual arguments, one string, are written without the C encoder; anything else goes through it
    class Word(str):
        """A str subclass: it keeps the general path."""

    for arguments in ({key: value}, {key: Word(key)}, {Word(key): key}):
        assert _encode(arguments) == json.dumps(arguments, ensure_ascii=False)


@pytest.mark.parametrize("text", [
    '{"a": 123456789012345678901234567890}',  # over 64 bits
    '{"a": -9223372036854775809}',
    '{"a": NaN, "b": -Infinity}',  # not standard JSON, accepted by json.loads
    '"\\ud800"',  # lone surrogate escape
    '{"a": 1, "a": 2}',
])
def test_edge_inputs_read_as_json_loads_reads_them(text):
    assert repr(loads_json(text)) == repr(json.loads(text))


@pytest.mark.parametrize("text", ["{", '{"a":}', "", "[1,]"])
def test_errors_are_json_loads_errors(text):
    with pytest.raises(json.JSONDecodeError) as ours:
        loads_json(text)
    with pytest.raises(json.JSONDecodeError) as theirs:
        json.loads(text)
    assert (ours.value.msg, ours.value.pos) == (theirs.value.msg, theirs.value.pos)


def test_deep_nesting_behaves_as_json_loads_and_the_parser_never_raises():
    text = "[" * 5000 + "]" * 5000  # past pydantic-core's depth limit
    try:
        expected = json.loads(text)
    except RecursionError:
        with pytest.raises(RecursionError):
            loads_json(text)
        assert parse_text_tool_calls(f"<tool_call>{text}</tool_call>")[2] == ["tool call JSON is nested too deeply"]
    else:
        assert loads_json(text) == expected


def test_encoding_refuses_what_json_dumps_refuses():
    with pytest.raises(TypeError, match="not JSON serializable"):
        ToolCall("t", {"x": object()}).to_openai()


_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["<tool_call>", "</tool_call>", '{"name": "t", "arguments": {}}', "x", "\n", "<tool_", "call>"]),
                max_size=8))
def test_blocks_are_found_as_the_non_greedy_pattern_finds_them(pieces):
    text = "".join(pieces)
    calls = parse_text_tool_calls(text, "c")[1]
    expected = [m.group(1).strip() for m in _BLOCK.finditer(text)]
    assert len(calls) == sum(body == '{"name": "t", "arguments": {}}' for body in expected)


def test_an_integer_too_long_for_python_is_a_json_error_and_an_error_observation():
    # json.loads raises a bare ValueError for integers over int()'s 4,300-digit limit: it must not escape step()
    import gymnasium as gym

    import llmgym  # noqa: F401

    huge = "1" * 5000
    with pytest.raises(json.JSONDecodeError, match="too long"):
        loads_json(huge)
    env = gym.make("llmgym/Wordle-v0")
    for action in (
        f'<tool_call>{{"name": "guess", "arguments": {{"word": {huge}}}}}</tool_call>',
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "guess", "arguments": f'{{"word": {huge}}}'}}]},
    ):
        env.reset(seed=0)
        observation, _, _, _, info = env.step(action)
        assert "too long" in observation and info["reward_components"]["format_error"] == 1.0
