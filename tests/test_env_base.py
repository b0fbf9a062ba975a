"""LLMEnv behaviour shared by every environment, on a small generic test env."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from llmgym import LLMEnv, Reward, Rubric, tool
from llmgym.rubric import format_error, length_penalty, thinking_penalty, tool_error_rate, turn_efficiency


class EchoEnv(LLMEnv):
    """Echo tool; done when the agent says 'bye'."""

    system_prompt = "Echo things."

    def setup(self, options):
        self.finished = False
        return "Say something."

    @tool
    def echo(self, text: str) -> str:
        """Echo text back.

        Args:
            text: what to echo.
        """
        return text

    def on_text(self, text):
        if text.strip() == "bye":
            self.finished = True
            return "Goodbye."
        return super().on_text(text)

    def is_done(self):
        return self.finished

    def build_rubric(self):
        return Rubric(
            [
                Reward(format_error, weight=-1.0),
                Reward(length_penalty(4), weight=-0.5),
                Reward(thinking_penalty(2), weight=-0.1),
                Reward(turn_efficiency, weight=1.0, when="end"),
                Reward(tool_error_rate, weight=0.0, when="end"),
            ]
        )


def call(name, **arguments):
    import json

    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_tool_call_round_trip_and_messages():
    env = EchoEnv()
    obs, info = env.reset(seed=0)
    assert obs == "Say something." and info["tools"][0]["function"]["name"] == "echo"
    obs, reward, terminated, truncated, info = env.step(call("echo", text="hi"))
    assert obs == "hi" and not terminated and not truncated
    roles = [m["role"] for m in info["messages"]]
    assert roles == ["system", "user", "assistant", "tool"]
    assert info["messages"][3]["tool_call_id"] == info["messages"][2]["tool_calls"][0]["id"] == "call_1_0"


def test_several_calls_in_one_turn_are_labelled():
    env = EchoEnv()
    env.reset()
    obs, *_ = env.step(call("echo", text="a") + call("echo", text="b"))
    assert obs == "[echo] a\n[echo] b"


def test_unknown_tool_and_bad_arguments_are_format_errors():
    env = EchoEnv()
    env.reset()
    obs, reward, *_, info = env.step(call("nope"))
    assert "unknown tool 'nope'" in obs and info["reward_components"]["format_error"] == 1.0
    obs, reward, *_, info = env.step(call("echo", text=5))
    assert "invalid arguments" in obs and info["reward_components"]["format_error"] == 1.0


def test_malformed_json_gives_a_protocol_hint():
    env = EchoEnv()
    env.reset()
    obs, reward, *_, info = env.step("<tool_call>{oops}</tool_call>")
    assert obs.startswith("Format error: tool call is not valid JSON") and "<tool_call>" in obs
    assert info["messages"][-1]["role"] == "user"


def test_tool_calls_per_turn_are_capped():
    env = EchoEnv(max_tool_calls=2)
    env.reset()
    obs, *_ = env.step(call("echo", text="a") * 3)
    assert obs.count("Error: at most 2 tool calls") == 1


def test_turn_budget_truncates_and_end_rewards_apply():
    env = EchoEnv(max_turns=2)
    env.reset()
    env.step("hello")
    obs, reward, terminated, truncated, info = env.step(call("echo", text="x"))
    assert truncated and not terminated
    assert info["reward_components"]["turn_efficiency"] == pytest.approx(0.5)
    with pytest.raises(RuntimeError, match="reset"):
        env.step("again")


def test_token_budget_truncates():
    env = EchoEnv(max_tokens=10)
    env.reset()
    assert env.step("a" * 20)[3] is False
    assert env.step("a" * 20)[3] is True


def test_length_and_thinking_penalties():
    env = EchoEnv()
    env.reset()
    _, reward, *_, info = env.step("<think>" + "x" * 16 + "</think>bye")
    assert info["reward_components"]["length_penalty"] == pytest.approx((9 - 4) / 4)
    assert info["reward_components"]["thinking_penalty"] == pytest.approx((4 - 2) / 2)


def test_an_unclosed_think_counts_as_thinking_to_the_very_end():
    # the count used to stop before a last newline ("$"); the call parser and on_text read it to the end
    env = EchoEnv()
    env.reset()
    _, _, _, _, info = env.step("<think>" + "x" * 16 + "\n")  # 17 characters: 5 tokens, 3 over the budget of 2
    assert info["reward_components"]["thinking_penalty"] == pytest.approx((5 - 2) / 2)


def test_tool_error_rate_metric():
    env = EchoEnv()
    env.reset()
    env.step(call("echo", text="ok"))
    env.step(call("echo", text=1))
    *_, info = env.step("bye")
    assert info["reward_components"]["tool_error_rate"] == 0.5


def test_oversized_action_is_refused_but_kept():
    env = EchoEnv(max_action_chars=100)
    env.reset()
    obs, reward, *_, info = env.step("y" * 1000)
    assert "1000 characters; the limit is 100" in obs
    assert info["messages"][2]["content"] == "y" * 1000


def test_render_ansi():
    env = EchoEnv(render_mode="ansi")
    env.reset()
    env.step(call("echo", text="hi"))
    text = env.render()
    assert "[assistant]" in text and "-> echo" in text and "[tool] hi" in text


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="render_mode"):
        EchoEnv(render_mode="human")
    with pytest.raises(ValueError, match="max_turns"):
        EchoEnv(max_turns=0)


def test_reward_names_must_be_unique():
    with pytest.raises(ValueError, match="unique"):
        Rubric([Reward(format_error), Reward(format_error)])


def _stepped_with_second_reward(value, weight=1.0):
    """An EchoEnv whose rubric holds a fine reward and one returning ``value``, after reset, ready to step."""
    rubric = Rubric([Reward(lambda ctx: 1.0, name="fine"), Reward(lambda ctx: value, weight=weight, name="bad")])

    class Bad(EchoEnv):
        def build_rubric(self):
            return rubric

    env = Bad()
    env.reset()
    return env


@pytest.mark.parametrize("value, weight", [(float("nan"), 1.0), (float("inf"), 0.0), (float("-inf"), -0.5)])
def test_non_finite_rewards_are_rejected(value, weight):
    # weight 0 too: a metric-only component that is not finite is still a broken reward function
    with pytest.raises(ValueError, match="reward 'bad' returned .*finite"):
        _stepped_with_second_reward(value, weight).step("hi")


@pytest.mark.parametrize("value", [None, "high", [1.0]])
def test_a_reward_that_is_not_a_number_is_named(value):
    # float(None) raised a TypeError that did not say which reward function was broken
    with pytest.raises(TypeError, match="reward 'bad' returned .*a reward must be a number"):
        _stepped_with_second_reward(value).step("hi")


def test_a_subclass_overriding_a_tool_method_replaces_the_tool():
    # tools were collected from every class in the MRO, so a plain override crashed __init__
    # (AttributeError: no 'schema') and a renamed override left the old name pointing at the new tool
    class NoEcho(EchoEnv):
        def echo(self, text):
            return text

    class Renamed(EchoEnv):
        @tool(name="repeat")
        def echo(self, text: str) -> str:
            """Repeat text.

            Args:
                text: what to repeat.
            """
            return text * 2

    env = NoEcho()
    assert env.tools == {} and env.tool_schemas == []
    env = Renamed()
    assert list(env.tools) == ["repeat"] and [s["function"]["name"] for s in env.tool_schemas] == ["repeat"]
    env.reset()
    assert env.step(call("repeat", text="ab"))[0] == "abab"


def native(name, **arguments):
    import json

    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        ],
    }


def test_native_tool_calls_count_toward_the_action_budgets():
    # only the message content was measured: native tool_calls escaped max_tokens and max_action_chars
    env = EchoEnv(max_tokens=100)
    env.reset()
    _, _, _, truncated, info = env.step(native("echo", text="a" * 800))
    text_env = EchoEnv(max_tokens=100)
    text_env.reset()
    text_env.step(call("echo", text="a" * 800))
    assert truncated and env.tokens_used == text_env.tokens_used > 200  # as many as the same call written as text
    assert info["reward_components"]["length_penalty"] > 0
    env = EchoEnv(max_action_chars=100)
    env.reset()
    obs, _, _, _, info = env.step(native("echo", text="y" * 1000))
    assert "characters; the limit is 100" in obs and info["reward_components"]["format_error"] == 1.0
    assert "y" * 1000 in info["messages"][2]["content"] and "tool_calls" not in info["messages"][2]
    assert env.step(native("echo", text="short"))[0] == "short"  # small native calls still run


@pytest.mark.parametrize("factory", [length_penalty, thinking_penalty])
def test_a_zero_token_budget_is_refused_when_the_rubric_is_built(factory):
    # it divided by the budget: a ZeroDivisionError out of the first step()
    with pytest.raises(ValueError, match="budget_tokens must be >= 1"):
        factory(0)


def test_a_recorded_episode_keeps_its_tools_when_tools_are_added_later():
    env = EchoEnv()
    env.reset(seed=0)
    episode = env.episode()
    before = list(episode.tools)

    class Extra:
        name = "extra"
        schema = {
            "type": "function",
            "function": {"name": "extra", "description": "x", "parameters": {"type": "object"}},
        }

        def call(self, arguments):
            raise AssertionError("not called")

    env.add_tools([Extra()])
    assert episode.tools == before and len(env.episode().tools) == len(before) + 1


def test_a_copied_env_scores_its_own_state():
    # rubric lambdas close over the env: a deepcopy used to keep scoring the original ("solved" read 0.0)
    import copy
    import pickle

    import gymnasium as gym

    import llmgym  # noqa: F401

    guess = '<tool_call>{"name": "guess", "arguments": {"word": "%s"}}</tool_call>'
    env = gym.make("llmgym/Wordle-v0").unwrapped
    env.reset(options={"answer": "crane"})
    env.step(guess % "pilot")
    for clone in (copy.deepcopy(env), pickle.loads(pickle.dumps(env))):
        _, _, terminated, _, info = clone.step(guess % "crane")
        assert terminated and info["reward_components"]["solved"] == 1.0
        assert clone.unwrapped.tools["guess"].instance is clone
    assert not env.solved and len(env.guesses) == 1


def test_a_str_subclass_action_plays_as_the_plain_string():
    # numpy.str_ is one: a vectorized or SB3 pipeline may hand one over
    class Reply(str):
        """A str subclass."""

    def play(actions):
        env = EchoEnv()
        seen = [env.reset(seed=0)]
        seen += [env.step(action) for action in actions]
        return seen, env.episode().to_dict()

    actions = [call("echo", text="hi"), "Saying. " + call("echo", text="there"), "<tool_call>{oops}</tool_call>", "bye"]
    assert play([Reply(a) for a in actions]) == play(actions)


def native_search_call(content, arguments):
    """An assistant message with ``content`` and a native call of WikiSearch's ``search`` (``arguments``: JSON text)."""
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "search", "arguments": arguments}}],
    }


@pytest.mark.parametrize("content", [None, "", "<tool_call>", "see <tool_call>{}</tool_call>"])
def test_native_call_arguments_count_toward_the_size_limit_and_token_budget(content):
    """Regression: native calls skipped the size limit and token budget when the text held a ``<tool_call>`` tag."""
    env = gym.make("llmgym/WikiSearch-v0", max_action_chars=1000, max_tokens=100)
    env.reset(seed=0)
    observation, _, _, truncated, _ = env.step(native_search_call(content, json.dumps({"query": "x " * 200_000})))
    assert "the limit is 1000" in observation and truncated
    assert env.unwrapped.tokens_used > 100_000


def test_a_small_native_call_beside_a_tag_in_the_text_is_counted_once_with_the_text():
    env = gym.make("llmgym/WikiSearch-v0")
    env.reset(seed=0)
    env.step(native_search_call("<tool_call>", json.dumps({"query": "cats"})))
    counted = env.unwrapped.tokens_used
    assert counted == env.unwrapped.count_tokens(
        '<tool_call>\n<tool_call>{"name": "search", "arguments": {"query": "cats"}}</tool_call>'
    )


@pytest.mark.parametrize("arguments", [{"word": b"crane"}, {"word": {1, 2}}, "cycle"])
def test_dict_arguments_that_are_not_json_are_an_observation_not_a_crash(arguments):
    """Regression: dict arguments that are not JSON used to crash ``step``."""
    if arguments == "cycle":
        arguments = {}
        arguments["self"] = arguments
    env = gym.make("llmgym/Wordle-v0")
    env.reset(seed=0)
    observation, reward, *_, info = env.step(
        {"role": "assistant", "tool_calls": [{"function": {"name": "guess", "arguments": arguments}}]}
    )
    assert "arguments must be JSON" in observation and reward < 0
    json.dumps(info["messages"])  # the transcript stays JSON


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_turns": 2.5},
        {"max_turns": True},
        {"max_turns": "three"},
        {"max_turns": 0},
        {"max_tokens": 0},
        {"max_tokens": 1.5},
        {"max_action_chars": -1},
        {"max_tool_calls": 1.0},
    ],
)
def test_budget_arguments_must_be_whole_numbers_of_at_least_one(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        gym.make("llmgym/WikiSearch-v0", **kwargs)


def test_numpy_integers_and_none_token_budget_are_fine():
    import numpy as np

    env = gym.make("llmgym/WikiSearch-v0", max_turns=np.int64(2), max_tokens=None)
    assert env.unwrapped.max_turns == 2


def test_step_before_any_reset_says_no_episode_started():
    import gymnasium as gym

    env = gym.make("llmgym/Wordle-v0")
    with pytest.raises(gym.error.ResetNeeded):  # Gymnasium's order enforcing, on for every registered id
        env.step("crane")
    with pytest.raises(RuntimeError, match="no episode has started: call reset"):  # the env itself, unwrapped
        env.unwrapped.step("crane")
    env.reset(seed=0)
    env.close()


class ScaledEnv(EchoEnv):
    """Its rubric reads state that ``__init__`` sets after ``super().__init__()``."""

    builds = 0

    def __init__(self, scale: float, **kwargs):
        super().__init__(**kwargs)
        self.scale = scale

    def build_rubric(self):
        type(self).builds += 1
        return Rubric([Reward(lambda ctx: 1.0, weight=self.scale, name="scaled")])


def test_a_subclass_may_set_its_rubric_state_after_super_init():
    # the rubric was built inside LLMEnv.__init__: this raised AttributeError (no self.scale yet)
    env = ScaledEnv(scale=0.25)
    env.reset(seed=0)
    _, reward, *_ = env.step("hi")
    assert reward == 0.25 and env.rubric.weights() == {"scaled": 0.25}


def test_the_rubric_is_built_once_when_first_needed_and_may_be_replaced():
    ScaledEnv.builds = 0
    env = ScaledEnv(scale=1.0)
    assert ScaledEnv.builds == 0  # not in __init__
    env.reset(seed=0)
    env.step("hi")
    env.step("hi")
    assert ScaledEnv.builds == 1
    env.rubric = Rubric([Reward(lambda ctx: 2.0, name="two")])
    assert env.step("hi")[1] == 2.0 and ScaledEnv.builds == 1
