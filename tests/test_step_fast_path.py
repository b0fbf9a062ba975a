"""The usual turn (text with one tool call) takes a shortcut through ``LLMEnv.step``: it must give the same turn.

``LLMEnv.step`` plays an action that :func:`llmgym.parsing.read_single_call` reads itself; every
other action goes the general way (``_general_turn``). These tests play the same
actions twice, once with the shortcut and once with it turned off, and compare everything a
caller or a reward function can see.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llmgym.env
from llmgym import LLMEnv, Reward, Rubric, tool
from llmgym.envs.wordle import WordleEnv
from llmgym.parsing import read_single_call, read_text_tool_calls
from llmgym.rubric import format_error, tool_error_rate
from llmgym.tools import ToolError


class CounterEnv(LLMEnv):
    """Two tools, one that fails on purpose; done after three successful adds."""

    def setup(self, options):
        self.total = 0
        self.adds = 0
        return "Add numbers."

    @tool
    def add(self, n: int) -> str:
        """Add to the total.

        Args:
            n: how much.
        """
        if n < 0:
            raise ToolError("n must be >= 0")
        self.total += n
        self.adds += 1
        return f"total {self.total}"

    @tool
    def boom(self, why: str = "") -> str:
        """Fail.

        Args:
            why: a reason.
        """
        raise RuntimeError(why or "boom")

    def is_done(self):
        return self.adds >= 3

    def build_rubric(self):
        return Rubric([
            Reward(format_error, weight=-1.0),
            Reward(lambda ctx: float(len(ctx.tool_results)), weight=0.5, name="calls"),
            Reward(tool_error_rate, weight=0.0, when="end"),
        ])


class OverAtStartEnv(CounterEnv):
    """Done before the first step: a call must be refused, not run."""

    def setup(self, options):
        prompt = super().setup(options)
        self.adds = 3
        return prompt


def _block(name: str, arguments: object) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


ACTIONS = st.one_of(
    st.builds(lambda w, pre, post: f"{pre}{_block('guess', {'word': w})}{post}",
              st.sampled_from(["crane", "pilot", "zzzzz", "cr", "CRANE ", "react", "eerie"]),
              st.sampled_from(["", "Trying. ", "\n"]), st.sampled_from(["", " done", "\n\n"])),
    st.builds(_block, st.sampled_from(["add", "boom", "guess", "nope"]),
              st.sampled_from([{"n": 2}, {"n": -1}, {"n": "x"}, {}, {"why": "x"}, {"word": "crane"}, {"n": 1, "extra": 1}])),
    st.sampled_from([
        '<tool_call>{"name": "add", "arguments": {"n": 1}}</tool_call><tool_call>{"name": "add", "arguments": {"n": 1}}</tool_call>',
        '<tool_call>{"name": "add"}</tool_call>',
        '<tool_call>{"name": "add", "arguments": {"n": 1}, "id": 3}</tool_call>',
        '<tool_call>["add"]</tool_call>',
        '<tool_call>{"name": 1, "arguments": {}}</tool_call>',
        '</tool_call><tool_call>{"name": "add", "arguments": {"n": 1}}</tool_call>',
        '<think>hm</think><tool_call>{"name": "add", "arguments": {"n": 1}}</tool_call>',
        '```json\n{"name": "add", "arguments": {"n": 1}}\n```',
        '<tool_call>```json\n{"name": "add", "arguments": {"n": 1}}\n```</tool_call>',
        # whitespace inside the block: JSON's own (read by the shortcut) and a no-break space (left to the general path)
        '<tool_call>\n {"name": "add", "arguments": {"n": 1}} \t\n</tool_call>',
        '<tool_call>\u00a0{"name": "add", "arguments": {"n": 1}}\u2003</tool_call>',
        "crane", "just text", "",
    ]),
)


def _play(make, actions: list[str], shortcut: bool, monkeypatch) -> list[str]:
    """Everything visible after each step (returns, info, the turn's context, the env's records), as text."""
    with monkeypatch.context() as patch:
        if not shortcut:
            patch.setattr(llmgym.env, "read_single_call", lambda text: None)
        env = make()
        seen = [repr(env.reset(seed=3))]
        for action in actions:
            if env.unwrapped._over:
                break
            result = env.step(action)
            ctx = env.unwrapped.turn_contexts[-1]
            seen.append(repr(result))
            seen.append(repr([ctx.turn, ctx.action_text, ctx.parsed, ctx.tool_results, ctx.format_errors,
                              ctx.action_tokens, ctx.thinking_tokens, ctx.done, ctx.terminated, len(ctx.history)]))
            seen.append(repr([env.unwrapped.tokens_used, env.unwrapped.turn_rewards, env.unwrapped.turn_components]))
        seen.append(repr(env.unwrapped.episode().to_dict()))
        return seen


@pytest.mark.parametrize("make", [lambda: WordleEnv(max_turns=4), lambda: CounterEnv(max_turns=5, max_tokens=200),
                                  lambda: OverAtStartEnv()], ids=["wordle", "counter", "over-at-start"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=st.lists(ACTIONS, min_size=1, max_size=6))
def test_the_shortcut_gives_the_same_turns_as_the_general_path(make, actions, monkeypatch):
    assert _play(make, actions, True, monkeypatch) == _play(make, actions, False, monkeypatch)


def test_the_shortcut_is_taken_for_the_usual_action(monkeypatch):
    general = []
    original = LLMEnv._general_turn
    monkeypatch.setattr(LLMEnv, "_general_turn", lambda self, action, turn: general.append(action) or original(self, action, turn))
    env = WordleEnv()
    env.reset(seed=0)
    env.step(_block("guess", {"word": "crane"}))  # the usual action: played in step() itself
    env.step("crane")  # plain text: the general path
    env.step(_block("nope", {"word": "crane"}))  # an unknown tool: refused on the shortcut, as the general path refuses it
    assert general == ["crane"]


@given(st.text(max_size=40), st.text(max_size=40), st.sampled_from(["", " ", "\n\t", "\u00a0", "\u2003 "]))
def test_read_single_call_agrees_with_the_general_parse(before, after, space):
    spaced = f"<tool_call>{space}{json.dumps({'name': 'guess', 'arguments': {'word': after}})}{space}</tool_call>"
    for text in (before + _block("guess", {"word": after}) + after, before + after, before + "<tool_call>" + after,
                 spaced, before + spaced):
        single = read_single_call(text)
        prose, calls, errors = read_text_tool_calls(text, "c")  # the general parse, without the shortcut
        if single is not None:
            assert errors == [] and len(calls) == 1
            assert single == (prose, calls[0].name, calls[0].arguments)


TAG_BITS = st.sampled_from(["<tool_call>", "</tool_call>", "tool_call>", "<tool_call", "</tool_call", "<think>", "</think>",
                             "", "x", " ", "\n"])


@settings(max_examples=300)
@given(st.lists(TAG_BITS, max_size=3).map("".join), st.lists(TAG_BITS, max_size=3).map("".join),
       st.lists(TAG_BITS, max_size=2).map("".join))
def test_read_single_call_agrees_with_the_general_parse_around_stray_tags(before, after, inside):
    text = before + _block("guess", {"word": inside}) + after
    single = read_single_call(text)
    prose, calls, errors = read_text_tool_calls(text, "c")
    if single is not None:
        assert errors == [] and len(calls) == 1 and single == (prose, calls[0].name, calls[0].arguments)
    # the shortcut takes every action with one block, no other "tool_call>" and no <think>
    assert (single is not None) == (text.count("tool_call>") == 2 and "<think>" not in text)


def test_a_str_subclass_action_gives_the_same_turn_as_the_plain_string(monkeypatch):
    class Reply(str):
        """A str subclass (numpy.str_ is one): read by the general path."""

    actions = [_block("guess", {"word": "crane"}), "Trying. " + _block("guess", {"word": "pilot"}), "dumpy"]
    plain = _play(WordleEnv, actions, True, monkeypatch)
    subclassed = _play(WordleEnv, [Reply(a) for a in actions], True, monkeypatch)
    assert subclassed == plain
