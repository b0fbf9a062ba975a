"""Multiply-v0: questions, the two tags, every reward component, the outcome-only setting, and replies that must
not pay (a farmed tool call, numbers from the question) scoring below the scripted solver."""

from __future__ import annotations

import gymnasium as gym
import pytest
import sympy

import llmgym  # noqa: F401
from llmgym.envs.multiply import MixedMultiplyTeacher, MultiplyEnv, MultiplySolver
from llmgym.rollout import rollout
from llmgym.wrappers.scripted import ScriptedPolicy


def play(replies: list[str], **kwargs) -> tuple[list[float], list[dict[str, float]], bool]:
    env = MultiplyEnv(**kwargs)
    env.reset(options={"a": 347, "b": 89})
    rewards, components, terminated = [], [], False
    for reply in replies:
        _, reward, terminated, truncated, info = env.step(reply)
        rewards.append(reward)
        components.append(info["reward_components"])
        if terminated or truncated:
            break
    return rewards, components, terminated


def test_registered_with_a_question_from_the_seed():
    env = gym.make("llmgym/Multiply-v0")
    obs, info = env.reset(seed=3)
    inner = env.unwrapped
    assert 100 <= inner.a <= 999 and 11 <= inner.b <= 99 and str(inner.a) in obs and str(inner.b) in obs
    assert info["tools"] == [] and "<calc>" in info["messages"][0]["content"]
    assert obs == env.reset(seed=3)[0] and obs != env.reset(seed=4)[0]


def test_the_calculator_turn_then_the_answer_turn():
    rewards, components, terminated = play(["<calc>347 * 89</calc>", "<answer>30883</answer>"])
    assert terminated and rewards == pytest.approx([0.5, 1.0])
    assert components[0] == {"tool_ran": 1.0, "tool_found": 1.0, "no_action": 0.0, "called_tool": 1.0}
    assert components[1]["correct"] == 1.0 and components[1]["tool_ran"] == 0.0  # each pays once


def test_the_result_is_shown_and_errors_are_observations():
    env = MultiplyEnv()
    env.reset(options={"a": 347, "b": 89})
    assert env.step("<calc>347*89</calc>")[0] == "Result: 30883"
    env.reset(options={"a": 347, "b": 89})
    obs, reward, terminated, truncated, info = env.step("<calc>347 *</calc>")
    assert obs.startswith("Calculator error") and not terminated and reward == 0.0
    assert info["reward_components"]["called_tool"] == 1.0 and info["reward_components"]["tool_ran"] == 0.0
    obs, *_ = env.step("hello")
    assert "<calc>" in obs and "<answer>" in obs


@pytest.mark.parametrize(
    "replies, total, correct",
    [
        (["<answer>30883</answer>"], 1.0, 1.0),  # right at once (a lucky guess)
        (["<answer>30,883</answer>"], 1.0, 1.0),
        (["<answer>347</answer>"], 0.0, 0.0),  # a number from the question
        (["<answer>347 89 30883 1</answer>"], 0.0, 0.0),  # the last number counts
        (["<calc>1+1</calc>", "<answer>2</answer>"], 0.1, 0.0),  # farming the tool call
        (["<calc>347*89</calc>", "<answer>30000</answer>"], 0.5, 0.0),  # found, then copied wrong
        (["I think it is 30883", "no idea"], -0.2, 0.0),  # no tags: two reminders
        (["<calc>347*89</calc> <answer>12</answer>"], 0.5, 0.0),  # answered before seeing the result
    ],
)
def test_rewards(replies, total, correct):
    rewards, components, _ = play(replies)
    assert sum(rewards) == pytest.approx(total)
    assert components[-1].get("correct", 0.0) == correct


def test_outcome_only_keeps_the_turn_components_as_metrics():
    rewards, components, _ = play(["<calc>347 * 89</calc>", "<answer>30883</answer>"], turn_rewards=False)
    assert rewards == pytest.approx([0.0, 1.0]) and components[0]["tool_found"] == 1.0
    rewards, _, _ = play(["hello", "hello"], turn_rewards=False)
    assert rewards == [0.0, 0.0]


def test_the_solver_beats_every_policy_that_does_not_compute():
    seeds = list(range(40))
    solver = rollout("llmgym/Multiply-v0", ScriptedPolicy(MultiplySolver), seeds=seeds)
    assert all(e.total_reward == pytest.approx(1.5) for e in solver)

    class Farmer:
        def act(self, observation: str) -> str:
            return "<calc>1+1</calc>" if not observation.startswith("Result") else "<answer>12345</answer>"

    class Copier:
        def act(self, observation: str) -> str:
            return "<answer>" + " ".join(w for w in observation.split() if w.isdigit()) + "</answer>"

    for cheat in (Farmer, Copier):
        episodes = rollout("llmgym/Multiply-v0", ScriptedPolicy(cheat), seeds=seeds)
        assert max(e.total_reward for e in episodes) <= 0.1


def test_the_mixed_teacher_skips_the_tool_on_about_half_and_replays_the_same():
    seeds = list(range(64))
    first = rollout("llmgym/Multiply-v0", ScriptedPolicy(MixedMultiplyTeacher), seeds=seeds)
    again = rollout("llmgym/Multiply-v0", ScriptedPolicy(MixedMultiplyTeacher), seeds=seeds)
    called = [e.component_totals()["called_tool"] for e in first]
    assert 0.3 < sum(called) / len(called) < 0.7
    assert all(e.component_totals()["correct"] == 1.0 for e in first)
    assert [e.messages for e in first] == [e.messages for e in again]


def test_bad_options_are_a_clear_error():
    with pytest.raises(ValueError, match="'a' and 'b'"):
        MultiplyEnv().reset(options={"a": "347", "b": 89})


def test_convert_asks_for_a_larger_unit_and_credits_each_reference_quantity():
    env = MultiplyEnv(convert=True)
    obs, _ = env.reset(options={"a": 347, "b": 89})
    assert "in dollars" in obs and env.answer == sympy.Rational(30883, 100)
    assert env.step("<calc>347 * 89</calc>")[1] == pytest.approx(0.5)  # the product is progress
    assert env.step("<answer>$308.83</answer>")[1] == pytest.approx(1.0)
    env.reset(options={"a": 347, "b": 89})
    env.step("<calc>347 * 89</calc>")
    assert env.step("<answer>30883</answer>")[1] == 0.0  # not converted


def test_rounded_leaves_the_last_step_to_the_agent():
    env = MultiplyEnv(convert=True, rounded=True)
    obs, _ = env.reset(options={"a": 347, "b": 89})
    assert obs.endswith("rounded to the nearest whole number?") and env.answer == 309
    assert env.step("<calc>347 * 89 / 100</calc>")[0] == "Result: 30883/100 = 308.83"
    assert env.step("<answer>308.83</answer>")[1] == 0.0  # a right calculation, a wrong answer
    env.reset(options={"a": 347, "b": 89})
    env.step("<calc>347 * 89 / 100</calc>")
    assert env.step("<answer>309</answer>")[1] == 1.0
    with pytest.raises(ValueError, match="needs convert"):
        MultiplyEnv(rounded=True)


@pytest.mark.parametrize("kwargs", [{"convert": True}, {"convert": True, "rounded": True}])
def test_the_solver_solves_every_setting(kwargs):
    episodes = rollout("llmgym/Multiply-v0", ScriptedPolicy(MultiplySolver), seeds=list(range(40)), env_kwargs=kwargs)
    assert all(e.total_reward == pytest.approx(1.5) for e in episodes)


@pytest.mark.parametrize("turn_rewards, paid", [(True, 0.5), (False, 0.0)])
def test_a_copy_pays_the_turn_components_the_original_does(turn_rewards, paid):
    # the flag was self.turn_rewards, which LLMEnv.__init__ then set to its list of rewards: a copy,
    # rebuilding its rubric from that (empty) list, paid no turn components
    import copy
    import pickle

    env = MultiplyEnv(turn_rewards=turn_rewards)
    for clone in (copy.deepcopy(env), pickle.loads(pickle.dumps(env)), env):
        clone.reset(options={"a": 347, "b": 89})
        assert clone.step("<calc>347 * 89</calc>")[1] == pytest.approx(paid)
