"""Session 6 regressions in the core step path and the server's request checks.

Each case was a reproduced bug: a tool call drafted inside ``<think>`` was made;
native calls skipped the size limit and token budget when the text held a
``<tool_call>`` tag; dict arguments that are not JSON crashed ``step``; Wordle's
"Out of turns" note pushed the observation past its space; a malformed
``tool_choice`` was a 500.
"""

from __future__ import annotations

import json

import gymnasium as gym
import httpx
import pytest

import llmgym  # noqa: F401
from llmgym.parsing import parse_text_tool_calls
from llmgym.wrappers.scripted import load_scripted
from llmgym.wrappers.server import create_app, serve_in_thread


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_a_call_drafted_inside_think_is_not_made():
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


def native(content, arguments):
    return {"role": "assistant", "content": content,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "search", "arguments": arguments}}]}


@pytest.mark.parametrize("content", [None, "", "<tool_call>", "see <tool_call>{}</tool_call>"])
def test_native_call_arguments_count_toward_the_size_limit_and_token_budget(content):
    env = gym.make("llmgym/WikiSearch-v0", max_action_chars=1000, max_tokens=100)
    env.reset(seed=0)
    observation, _, _, truncated, _ = env.step(native(content, json.dumps({"query": "x " * 200_000})))
    assert "the limit is 1000" in observation and truncated
    assert env.unwrapped.tokens_used > 100_000


def test_a_small_native_call_beside_a_tag_in_the_text_is_counted_once_with_the_text():
    env = gym.make("llmgym/WikiSearch-v0")
    env.reset(seed=0)
    env.step(native("<tool_call>", json.dumps({"query": "cats"})))
    counted = env.unwrapped.tokens_used
    assert counted == env.unwrapped.count_tokens('<tool_call>\n<tool_call>{"name": "search", "arguments": {"query": "cats"}}</tool_call>')


@pytest.mark.parametrize("arguments", [{"word": b"crane"}, {"word": {1, 2}}, "cycle"])
def test_dict_arguments_that_are_not_json_are_an_observation_not_a_crash(arguments):
    if arguments == "cycle":
        arguments = {}
        arguments["self"] = arguments
    env = gym.make("llmgym/Wordle-v0")
    env.reset(seed=0)
    observation, reward, *_, info = env.step(
        {"role": "assistant", "tool_calls": [{"function": {"name": "guess", "arguments": arguments}}]})
    assert "arguments must be JSON" in observation and reward < 0
    json.dumps(info["messages"])  # the transcript stays JSON


def test_wordle_out_of_turns_note_stays_inside_the_observation_space():
    env = gym.make("llmgym/Wordle-v0", max_turns=1)
    env.reset(seed=0)
    observation, *_ = env.step("<tool_call>x</tool_call>" * 1365)
    assert env.observation_space.contains(observation)
    assert observation.endswith(f"Out of turns. The word was {env.unwrapped.answer.upper()}.")


@pytest.fixture(scope="module")
def scripted():
    app = create_app(load_scripted("wordle"), model_name="bot")
    with serve_in_thread(app) as base_url:
        yield base_url


TOOLS = [{"type": "function", "function": {"name": "guess", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize("choice", [{"type": "function", "function": "x"}, {"type": "function", "function": [1]},
                                    {"type": "function"}, {"type": "retrieval", "function": {"name": "guess"}}])
def test_a_malformed_tool_choice_is_a_400_naming_it(scripted, choice):
    response = httpx.post(f"{scripted}/chat/completions", timeout=30,
                          json={"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, "tool_choice": choice})
    assert response.status_code == 400, response.text
    assert "tool_choice" in json.dumps(response.json()["error"])


def test_required_or_named_tool_choice_without_tools_is_a_400(scripted):
    for choice in ["required", {"type": "function", "function": {"name": "guess"}}]:
        response = httpx.post(f"{scripted}/chat/completions", timeout=30,
                              json={"messages": [{"role": "user", "content": "hi"}], "tool_choice": choice})
        assert response.status_code == 400 and "needs tools" in response.json()["error"]["message"]
    named = httpx.post(f"{scripted}/chat/completions", timeout=30, json={
        "messages": [{"role": "user", "content": "Guess."}], "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "guess"}}})
    assert named.status_code == 200 and named.json()["choices"][0]["finish_reason"] == "tool_calls"


def test_an_unclosed_think_is_reasoning_to_the_end():
    _, calls, errors = parse_text_tool_calls(f"{call('a')} <think>and then {call('b')}")
    assert [c.name for c in calls] == ["a"] and errors == []


def test_on_text_reads_the_answer_outside_the_reasoning():
    env = gym.make("llmgym/MentalMath-v0").unwrapped
    observation, _ = env.reset(seed=0)  # "What is 8 + 6?"
    _, reward, terminated, _, info = env.step("<think>maybe 15? no: 8 + 6 = 14</think>14")
    assert terminated and info["reward_components"]["correct"] == 1.0
    env.reset(seed=0)
    _, _, _, _, info = env.step("<think>8 + 6 = 14</think>")  # reasoning alone is no answer
    assert info["reward_components"]["correct"] == 0.0


@pytest.mark.parametrize("kwargs", [{"max_turns": 2.5}, {"max_turns": True}, {"max_turns": "three"}, {"max_turns": 0},
                                    {"max_tokens": 0}, {"max_tokens": 1.5}, {"max_action_chars": -1},
                                    {"max_tool_calls": 1.0}])
def test_budget_arguments_must_be_whole_numbers_of_at_least_one(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        gym.make("llmgym/WikiSearch-v0", **kwargs)


def test_numpy_integers_and_none_token_budget_are_fine():
    import numpy as np

    env = gym.make("llmgym/WikiSearch-v0", max_turns=np.int64(2), max_tokens=None)
    assert env.unwrapped.max_turns == 2
