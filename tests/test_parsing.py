"""Tool-call parsing: text protocol and native OpenAI tool_calls; reasoning blocks; how values are quoted."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import llmgym  # noqa: F401
from llmgym.parsing import (
    THINK_BLOCK,
    parse_action,
    parse_text_tool_calls,
    show_value,
    thoughts,
    without_leading_thinking,
    without_thinking,
)


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


def test_reasoning_is_read_alike_by_the_call_parser_the_answer_and_the_thinking_count():
    text = f"<think>try {call('a')}</think>said {call('b')}<think>cut off {call('c')}"
    prose, calls, _ = parse_text_tool_calls(text)
    assert [c.name for c in calls] == ["b"]
    assert without_thinking(text) == f"said {call('b')}"
    assert thoughts(text) == [f"try {call('a')}", f"cut off {call('c')}"]
    assert [block[0] for block in THINK_BLOCK.finditer(prose)] == [
        f"<think>try {call('a')}</think>",
        f"<think>cut off {call('c')}",
    ]


def test_only_the_exact_lower_case_tags_mark_reasoning():
    # as chat templates write them and vLLM's reasoning parsers read them; MathTools alone used to ignore case
    text = f"<THINK>{call('a')}</THINK> <Think>Final answer: 3</Think>"
    assert [c.name for c in parse_text_tool_calls(text)[1]] == ["a"]
    assert without_thinking(text) == text and thoughts(text) == []


def test_an_unclosed_thought_runs_to_the_very_end():
    # the rubric's pattern ended at "$", which also matches before a last newline: that newline went uncounted
    assert thoughts("<think>abc\n") == ["abc\n"] and without_thinking("x<think>abc\n") == "x"


@pytest.mark.parametrize(
    "text, expected",
    [
        ('  <think>a</think>{"x": "<think>"}', '{"x": "<think>"}'),
        ('{"x": "<think>y</think>"}', '{"x": "<think>y</think>"}'),  # not leading: kept, quotes and all
        ("<think>a</think><think>b</think>c", "<think>b</think>c"),  # one block, the one it opens with
        ("<think>never closed", ""),
    ],
)
def test_without_leading_thinking_removes_only_the_block_the_text_opens_with(text, expected):
    assert without_leading_thinking(text) == expected


def test_show_value_is_repr_or_names_the_type_when_repr_raises():
    class Loud:
        def __str__(self):
            raise RuntimeError("no str")

        def __repr__(self):
            return "Loud()"

    class Mute:
        def __repr__(self):
            raise RuntimeError("no repr")

    assert show_value("high") == "'high'" and show_value(Loud()) == "Loud()"
    assert show_value(Mute()) == "<Mute value that cannot be shown: RuntimeError>"


_SOURCES = ("llmgym", "envs", "wrappers", "trainers")
_REGEX_CALLS = {"compile", "sub", "subn", "search", "match", "fullmatch", "findall", "finditer", "split"}


def _think_regexes(path: Path) -> list[int]:
    """Lines of ``path`` where a ``re`` function is given a pattern that mentions ``think``."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _REGEX_CALLS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "re"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and "think" in str(node.args[0].value).lower()
        ):
            lines.append(node.lineno)
    return lines


def test_reasoning_has_one_pattern_the_one_in_parsing():
    root = Path(__file__).resolve().parent.parent
    found = {
        f"{path.relative_to(root)}:{line}"
        for folder in _SOURCES
        for path in sorted((root / folder).rglob("*.py"))
        for line in _think_regexes(path)
    }
    assert len(found) == 1 and next(iter(found)).startswith("llmgym/parsing.py:"), (
        f"regular expressions over <think> outside llmgym/parsing.py: {sorted(found)}; "
        "use llmgym.parsing.THINK_BLOCK, without_thinking, without_leading_thinking or thoughts"
    )
