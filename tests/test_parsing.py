"""Tool-call parsing: text protocol and native OpenAI tool_calls."""

from __future__ import annotations

import json
import re

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import llmgym  # noqa: F401
from llmgym.parsing import parse_action, parse_text_tool_calls, without_thinking


def test_several_calls_with_whitespace_and_fences():
    text = (
        'Let me check.\n<tool_call>\n  {"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
        '<tool_call>```json\n{"name": "b", "arguments": "{\\"y\\": 2}"}\n```</tool_call> done'
    )
    prose, calls, errors = parse_text_tool_calls(text)
    assert errors == []
    assert [(c.name, c.arguments) for c in calls] == [("a", {"x": 1}), ("b", {"y": 2})]
    assert [c.id for c in calls] == ["call_0", "call_1"]
    assert prose == "Let me check.\n\n done"


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("<tool_call>{not json}</tool_call>", "not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "must be a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', "function.name"),
        ('<tool_call>{"name": "a", "arguments": [1]}</tool_call>', "arguments must be a JSON object"),
        ('<tool_call>{"name": "a", "arguments": {}, "extra": 1}</tool_call>', "unexpected keys"),
        ('<tool_call>{"name": "a", "arguments": "{oops"}</tool_call>', "not valid JSON"),
        ('<tool_call>{"name": "a", "arguments": {}}', "not closed"),
        ('{"name": "a"}</tool_call>', "no matching"),
    ],
)
def test_strict_about_what_it_accepts(text, fragment):
    _, calls, errors = parse_text_tool_calls(text)
    assert calls == [] and len(errors) == 1 and fragment in errors[0]


def test_a_bad_block_does_not_hide_a_good_one():
    _, calls, errors = parse_text_tool_calls(
        '<tool_call>{x}</tool_call><tool_call>{"name": "ok", "arguments": {}}</tool_call>'
    )
    assert [c.name for c in calls] == ["ok"] and len(errors) == 1


def test_json_outside_tags_is_prose_not_a_call():
    prose, calls, errors = parse_text_tool_calls('```json\n{"name": "guess", "arguments": {"word": "crane"}}\n```')
    assert calls == [] and errors == [] and "guess" in prose


def test_native_tool_calls():
    parsed = parse_action(
        {
            "role": "assistant",
            "content": "thinking",
            "tool_calls": [
                {"id": "x1", "type": "function", "function": {"name": "guess", "arguments": '{"word": "crane"}'}},
                {"type": "function", "function": {"name": "bad", "arguments": "{oops"}},
                {"type": "function", "function": {"name": "empty", "arguments": ""}},
            ],
        }
    )
    assert [(c.id, c.name, c.arguments) for c in parsed.tool_calls] == [
        ("x1", "guess", {"word": "crane"}),
        ("call_2", "empty", {}),
    ]
    assert len(parsed.errors) == 1 and "not valid JSON" in parsed.errors[0]
    assert parsed.message["tool_calls"][0]["function"]["name"] == "guess"


def test_dict_without_native_calls_reads_the_text_protocol():
    parsed = parse_action({"role": "assistant", "content": '<tool_call>{"name": "g", "arguments": {}}</tool_call>'})
    assert [c.name for c in parsed.tool_calls] == ["g"] and parsed.ok


def test_non_action_types_are_programming_errors():
    with pytest.raises(TypeError, match="an action must be str or an OpenAI assistant message dict, got int"):
        parse_action(42)  # type: ignore[arg-type]


_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["<tool_call>", "</tool_call>", '{"name": "t", "arguments": {}}', "x", "\n", "<tool_", "call>"]
        ),
        max_size=8,
    )
)
def test_blocks_are_found_as_the_non_greedy_pattern_finds_them(pieces):
    text = "".join(pieces)
    calls = parse_text_tool_calls(text, "c")[1]
    expected = [m.group(1).strip() for m in _BLOCK.finditer(text)]
    assert len(calls) == sum(body == '{"name": "t", "arguments": {}}' for body in expected)


def test_deeply_nested_json_is_a_format_error_not_a_crash():
    text = "[" * 5000 + "]" * 5000  # past json's recursion limit
    assert parse_text_tool_calls(f"<tool_call>{text}</tool_call>")[2] == ["tool call JSON is nested too deeply"]


def test_calls_drafted_while_thinking_are_not_made_and_block_numbers_run_on():
    call = '<tool_call>{"name": "t", "arguments": {}}</tool_call>'
    text = f"{call}<think>maybe {call}</think> then {call}<think>unfinished {call}"
    prose, calls, errors = parse_text_tool_calls(text)
    assert [c.id for c in calls] == ["call_0", "call_1"] and errors == []
    assert prose == f"<think>maybe {call}</think> then <think>unfinished {call}"
    assert without_thinking(text) == f"{call} then {call}"


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_a_call_drafted_inside_think_is_not_made():
    """Regression: a tool call drafted inside ``<think>`` used to be made."""
    text = f"<think>maybe {call('guess', word='crane')}? no</think>\n{call('guess', word='slate')}"
    prose, calls, errors = parse_text_tool_calls(text)
    assert [c.arguments for c in calls] == [{"word": "slate"}] and errors == [] and calls[0].id == "call_0"
    assert "<think>maybe" in prose  # the reasoning stays in the prose, unread
    env = gym.make("llmgym/Wordle-v0").unwrapped
    env.reset(seed=0)
    env.step(text)
    assert [guess[0] for guess in env.guesses] == ["slate"]


def test_think_blocks_do_not_hide_calls_or_tag_errors_outside_them():
    text = f"{call('a')}<think>x</think>{call('b')}<think>y {call('c')}</think><tool_call>"
    _, calls, errors = parse_text_tool_calls(text)
    assert [c.name for c in calls] == ["a", "b"] and [c.id for c in calls] == ["call_0", "call_1"]
    assert errors == ["a <tool_call> block is not closed with </tool_call>"]
    # tags out of order are no think block: the call is read as before
    _, calls, _ = parse_text_tool_calls(f"</think>{call('a')}<think>")
    assert [c.name for c in calls] == ["a"]


def test_an_unclosed_think_is_reasoning_to_the_end():
    _, calls, errors = parse_text_tool_calls(f"{call('a')} <think>and then {call('b')}")
    assert [c.name for c in calls] == ["a"] and errors == []
