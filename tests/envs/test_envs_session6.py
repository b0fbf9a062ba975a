"""Regressions: reasoning-gym partial credit, EmailQA amounts, ``max_turns=0``, RuleDiscovery ``max_tool_calls``."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import llmgym  # noqa: F401  registers the envs
from llmgym.envs.email_qa import answer_is_right


def _call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


# -- reasoning-gym: only a fully correct answer is paid by default -------------------


def _everyone_second_role(question: str) -> str:
    """A constant guess that reads nothing but the answer format: 'A is a knave, and B is a knave'."""
    template = re.search(r'Format your answer like: "(.*)"\)', question)
    assert template, question
    return re.sub(r"(\w+)/(\w+)", r"\2", template.group(1))


def _unsorted_words(question: str) -> str:
    """word_sorting's input copied back in its own order."""
    return question.rsplit(":", 1)[1].strip()


def _play(task: str, policy, seeds: int = 200, **kwargs) -> tuple[float, list[dict[str, float]]]:
    env = gym.make(f"llmgym/rg-{task}-v0", **kwargs)
    total, components = 0.0, []
    for seed in range(seeds):
        question, _ = env.reset(seed=seed)
        _, reward, terminated, _, info = env.step(f"<answer>{policy(question, env.unwrapped.entry)}</answer>")
        assert terminated
        total += reward
        components.append(info["reward_components"])
    env.close()
    return total / seeds, components


def test_rg_constant_guess_scores_far_below_correct_answers_on_knights_knaves():
    pytest.importorskip("reasoning_gym")
    honest, _ = _play("knights_knaves", lambda q, entry: entry["answer"])
    guess, components = _play("knights_knaves", lambda q, entry: _everyone_second_role(q))
    assert honest == pytest.approx(1.1)
    assert guess < 0.4 * honest, guess  # paid partial credit it averaged 0.70
    for c in components:  # the verifier's score is still logged, and pays only when it is full
        assert c["correct"] == (1.0 if c["verifier_score"] == 1.0 else 0.0)
    assert sum(0 < c["verifier_score"] < 1 for c in components) > 50  # the guess does earn partial scores


def test_rg_copying_the_input_earns_little_on_word_sorting():
    pytest.importorskip("reasoning_gym")
    copied, components = _play("word_sorting", lambda q, entry: _unsorted_words(q))
    assert copied < 0.2, copied  # paid partial credit it averaged 0.37
    assert sum(c["verifier_score"] for c in components) / len(components) > 0.2


def test_rg_partial_credit_option_pays_the_verifier_score():
    pytest.importorskip("reasoning_gym")
    guess, components = _play("knights_knaves", lambda q, entry: _everyone_second_role(q), partial_credit=True)
    assert guess > 0.6, guess
    assert all(c["correct"] == c["verifier_score"] for c in components)
    env = gym.make("llmgym/rg-knights_knaves-v0", partial_credit=True)
    assert env.unwrapped.partial_credit is True
    assert env.unwrapped.rubric.weights() == {"correct": 1.0, "verifier_score": 0.0, "format": 0.1, "tool_cost": -0.02}


def test_rg_no_answer_pays_nothing_and_honest_answers_keep_full_marks():
    pytest.importorskip("reasoning_gym")
    env = gym.make("llmgym/rg-chain_sum-v0")
    env.reset(seed=0)
    _, reward, _, _, info = env.step(f"<answer>{env.unwrapped.entry['answer']}</answer>")
    assert reward == pytest.approx(1.1) and env.unwrapped.solved
    assert info["reward_components"] == {"correct": 1.0, "verifier_score": 1.0, "format": 1.0, "tool_cost": 0.0}
    env.reset(seed=0)
    _, reward, _, _, info = env.step("   ")
    assert reward == 0.0 and info["reward_components"]["verifier_score"] == 0.0 and not env.unwrapped.solved


@pytest.mark.parametrize("kwargs", [{}, {"partial_credit": True}])
def test_rg_env_checker_passes_with_either_scoring(kwargs):
    pytest.importorskip("reasoning_gym")
    env = gym.make("llmgym/rg-knights_knaves-v0", **kwargs)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


# -- max_turns=0 is refused, None means the default ---------------------------------


@pytest.mark.parametrize("max_turns", [0, -1])
def test_rg_refuses_a_turn_budget_below_one(max_turns):
    pytest.importorskip("reasoning_gym")
    with pytest.raises(ValueError, match="max_turns must be >= 1"):
        gym.make("llmgym/rg-chain_sum-v0", max_turns=max_turns)


def test_rg_turn_budget_defaults():
    pytest.importorskip("reasoning_gym")
    assert gym.make("llmgym/rg-chain_sum-v0").unwrapped.max_turns == 1
    assert gym.make("llmgym/rg-chain_sum-v0", max_turns=None, python_tool=True).unwrapped.max_turns == 8
    assert gym.make("llmgym/rg-chain_sum-v0", max_turns=3).unwrapped.max_turns == 3


@pytest.mark.parametrize("max_turns", [0, -2])
def test_rule_discovery_refuses_a_turn_budget_below_one(max_turns):
    with pytest.raises(ValueError, match="max_turns must be >= 1"):
        gym.make("llmgym/RuleDiscovery-v0", max_turns=max_turns)


def test_rule_discovery_turn_budget_follows_the_level_unless_fixed():
    env = gym.make("llmgym/RuleDiscovery-v0", max_turns=None)
    assert env.unwrapped.max_turns == 50
    env.reset(seed=0, options={"difficulty": "hard"})
    assert env.unwrapped.max_turns == 80
    fixed = gym.make("llmgym/RuleDiscovery-v0", max_turns=4)
    fixed.reset(seed=0, options={"difficulty": "hard"})
    assert fixed.unwrapped.max_turns == 4


# -- RuleDiscovery passes max_tool_calls to LLMEnv -------------------------------------


def test_rule_discovery_accepts_max_tool_calls():
    env = gym.make("llmgym/RuleDiscovery-v0", difficulty="easy", max_tool_calls=2)
    assert env.unwrapped.max_tool_calls == 2
    env.reset(seed=0)
    obs, *_ = env.step(_call("look") + _call("look"))
    assert obs.count("Map:") == 2
    default = gym.make("llmgym/RuleDiscovery-v0", difficulty="easy")
    assert default.unwrapped.max_tool_calls == 1  # one action a turn unless asked otherwise
    default.reset(seed=0)
    obs, *_ = default.step(_call("look") + _call("look"))
    assert obs.count("Map:") == 1


# -- EmailQA: amounts compare as numbers ------------------------------------------------


@pytest.mark.parametrize(("text", "gold"), [
    ("$300", "$300.00"),
    ("$1204.5", "$1204.50"),
    ("The amount is $1,204.50.", "$1204.50"),
    ("1204.50", "$1204.50"),
    ("$ 300.0 due 2024-05-01", "$300.00"),
])
def test_email_qa_equal_amounts_are_right(text, gold):
    assert answer_is_right(text, gold)


@pytest.mark.parametrize(("text", "gold"), [
    ("$1204.05", "$1204.50"),
    ("$1204", "$1204.50"),
    ("$3000", "$300.00"),
    ("$30.00", "$300.00"),
    ("$300 or $400", "$300.00"),
    ("QWE123", "$300.00"),
])
def test_email_qa_other_amounts_are_wrong(text, gold):
    assert not answer_is_right(text, gold)


def test_email_qa_text_answers_unchanged():
    assert answer_is_right("The code is BGM419.", "BGM419") and not answer_is_right("BGM418", "BGM419")
    assert answer_is_right("maple 12", "Maple 12") and not answer_is_right("Maple 1", "Maple 12")


def _invoice_episode():
    env = gym.make("llmgym/EmailQA-v0")
    for seed in range(200):
        env.reset(seed=seed)
        question = env.unwrapped.question
        if question.kind == "invoice" and question.answer.endswith("0"):
            return env, question
    raise AssertionError("no invoice question with a trailing zero in 200 seeds")


def test_email_qa_amount_without_trailing_zeros_scores_right():
    env, question = _invoice_episode()
    short = "$" + str(Decimal(question.answer[1:])).rstrip("0").rstrip(".")
    assert short != question.answer
    _, _, terminated, _, info = env.step(_call("answer", text=short, sources=list(question.sources)))
    assert terminated and info["reward_components"]["outcome"] == 1.0


def test_email_qa_wrong_amount_is_still_a_hallucination():
    env, question = _invoice_episode()
    wrong = "$" + str(Decimal(question.answer[1:]) + Decimal("0.01"))
    _, _, terminated, _, info = env.step(_call("answer", text=wrong, sources=list(question.sources)))
    assert terminated and info["reward_components"]["outcome"] == -1.0
